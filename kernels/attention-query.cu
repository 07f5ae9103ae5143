// Causal attention, backward, the query launch: a block per (64 queries,
// query head h, batch b) takes the query walk (attention-backward.cuh), no
// atomics. With the row terms D formed in the context gradient's product
// (tiled-heads), this launch and the key launch run side by side. The last
// query tile walks every key tile: the longest walks first.
#include "attention-backward.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, RESIDENT_BLOCKS(4))
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms,
      HALF* __restrict__ d_q, const float* __restrict__ cosine, const float* __restrict__ sine, float stream_scale,
      float score_scale) {
  await_previous_launch();
  const WalkPlace block = walk_place<HEADS>();
  const int part = part_of(threadIdx.x), thread = threadIdx.x % PART_THREADS;
  query_walk({q, k, v, d_out, log_sum_exp, row_terms, cosine, sine, stream_scale, score_scale}, d_q,
             part_stages<QUERY_HALVES>(part), TILES - 1 - block.rank, block.head, block.batch, part, thread);
}
