// Causal attention, backward, the key launch: a block per (64 keys, K/V head
// g, batch b) takes the key walk (attention-backward.cuh), no atomics. The
// first key tile meets every query tile: the longest walks first.
#include "attention-backward.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, RESIDENT_BLOCKS(3))
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms,
      HALF* __restrict__ d_k, HALF* __restrict__ d_v, const float* __restrict__ cosine,
      const float* __restrict__ sine, float stream_scale, float score_scale) {
  await_previous_launch();
  const WalkPlace block = walk_place<KV_HEADS>();
  const int part = part_of(threadIdx.x), thread = threadIdx.x % PART_THREADS;
  key_walk({q, k, v, d_out, log_sum_exp, row_terms, cosine, sine, stream_scale, score_scale}, d_k, d_v,
           part_stages<KEY_HALVES, true>(part), block.rank, block.head, block.batch, part, thread);
}
