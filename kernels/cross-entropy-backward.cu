// The exact logits' gradient, one element a thread (grid ROWS x VOCAB / BLOCK):
// the log-sum-exp is rebuilt as loss[t] + correct[t], and
// gradient[t][j] = (2^((logit - lse) log2e) - [j == targets[t]]) gradient_scale.
// gradient may be logits itself (each element is read before it is written by
// the same thread).
#include "common.cuh"

static_assert(VOCAB % BLOCK == 0, "the grid's blocks cover the row");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* gradient, const float* logits, const float* __restrict__ loss, const float* __restrict__ correct,
      const int* __restrict__ targets, float log2e, float gradient_scale) {
  const int t = blockIdx.x, j = blockIdx.y * BLOCK + threadIdx.x;
  const size_t at = static_cast<size_t>(t) * VOCAB + j;
  const float lse = loss[t] + correct[t];
  const float p = exp2f((logits[at] - lse) * log2e);
  gradient[at] = (p - (j == targets[t] ? 1.0f : 0.0f)) * gradient_scale;
}
