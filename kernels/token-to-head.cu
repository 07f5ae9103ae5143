// heads[b][h][s][d] = the half of merged[b SEQ + s][h 64 + d], the context's
// gradient in the heads' layout, and the attention backward's row terms
//   row_terms[b][h][s] = sum_d heads[b][h][s][d] out[b SEQ + s][h 64 + d]
// (out the forward's half output, token-major), formed here from the rounded
// halves the backward launches read, so that neither of them waits for the
// other. A block per token, a warp per head, a lane per pair of columns.
#include "common.cuh"

static_assert(BLOCK == HEADS * 32, "a warp per head");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ heads, float* __restrict__ row_terms, const float* __restrict__ merged,
      const HALF* __restrict__ out) {
  await_previous_launch();
  const int t = blockIdx.x, b = t / SEQ, s = t % SEQ;
  const int h = threadIdx.x / 32, d = 2 * (threadIdx.x % 32);
  const size_t from = static_cast<size_t>(t) * HEADS * 64 + h * 64 + d;
  const float2 v = *reinterpret_cast<const float2*>(merged + from);
  const unsigned gradient = pack_halves(v.x, v.y), o = *reinterpret_cast<const unsigned*>(out + from);
  const size_t row = static_cast<size_t>(b * HEADS + h) * SEQ + s;
  *reinterpret_cast<unsigned*>(heads + row * 64 + d) = gradient;
  const float sum = warp_sum(low_float(gradient) * low_float(o) + high_float(gradient) * high_float(o));
  if (threadIdx.x % 32 == 0) row_terms[row] = sum;
}
