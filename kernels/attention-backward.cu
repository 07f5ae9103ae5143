// Causal attention, backward, in one launch: a block per (64-row tile t, K/V
// head g, batch b) takes the key walk of g's key tile t (d_k, d_v) and then
// the query walk of query tile t of each of g's query heads (d_q), no
// atomics (the walks: attention-backward.cuh). A key tile's walk meets the
// query tiles from its own on (TILES - t of them a head), a query tile's the
// key tiles up to its own (t + 1): so every block walks GROUP (TILES + 1)
// tiles. The plan takes this image where the query and key launches would
// each have fewer blocks than two waves of the device (attention_parts):
// their blocks, each holding a multiprocessor's registers, then ran one
// launch after the other, the key tile 0's walk of TILES tiles and then the
// query tile TILES - 1's (1 x 1024: the update 2.344 -> 2.276 ms).
#include "attention-backward.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms,
      HALF* __restrict__ d_q, HALF* __restrict__ d_k, HALF* __restrict__ d_v, const float* __restrict__ cosine,
      const float* __restrict__ sine, float stream_scale, float score_scale) {
  await_previous_launch();
  const WalkPlace block = walk_place<KV_HEADS>();  // every block's walks are as long: any order
  const int tile = block.rank, g = block.head, b = block.batch;
  const int part = part_of(threadIdx.x), thread = threadIdx.x % PART_THREADS;
  HALF* const stages = part_stages<PART_HALVES, true>(part);
  const Inputs in{q, k, v, d_out, log_sum_exp, row_terms, cosine, sine, stream_scale, score_scale};
  key_walk(in, d_k, d_v, stages, tile, g, b, part, thread);
  for (int h = g * GROUP; h < (g + 1) * GROUP; ++h) {
    part_sync(part);  // every thread of the part is done with its stages (the walk before stored through them)
    query_walk(in, d_q, stages, tile, h, b, part, thread);
  }
}
