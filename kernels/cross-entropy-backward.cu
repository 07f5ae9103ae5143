// Each row's loss (cross-entropy.cuh) and, from the same reading of the row,
// the exact logits' gradient in the half format, a block per row: with the
// log-sum-exp lse = loss[t] + correct[t] (as the seed rebuilds it from the
// loss),
// gradient[t][j] = (2^((logit - lse) log2e) - [j == targets[t]]) gradient_scale,
// rounded once (what the products read: the seed's binary32 gradient and its
// cast-down in one launch). The update's loss and gradient so take one
// reading of the logits, not one in the seed's cross-entropy and another in
// its cross-entropy backward (at 8 x 1024, 201 MB each).
// The targets live in the staging window (host memory the device reads over
// the bus), so each row's target is read once, by its block, not by every
// warp of the row; the row itself is walked in quads, consecutive threads on
// consecutive 16 bytes.
#include "cross-entropy.cuh"

// the gradient of one quad of the row, its first column j
__device__ __forceinline__ uint2 quad_gradient(float4 x, int j, int target, float lse, float log2e,
                                               float gradient_scale) {
  float4 g;  // binary32, then rounded
  g.x = (exp2f((x.x - lse) * log2e) - (j == target ? 1.0f : 0.0f)) * gradient_scale;
  g.y = (exp2f((x.y - lse) * log2e) - (j + 1 == target ? 1.0f : 0.0f)) * gradient_scale;
  g.z = (exp2f((x.z - lse) * log2e) - (j + 2 == target ? 1.0f : 0.0f)) * gradient_scale;
  g.w = (exp2f((x.w - lse) * log2e) - (j + 3 == target ? 1.0f : 0.0f)) * gradient_scale;
  return make_uint2(pack_halves(g.x, g.y), pack_halves(g.z, g.w));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ gradient, float* __restrict__ loss, const HALF* __restrict__ logits,
      const float* __restrict__ correct, const int* __restrict__ targets, float log2e, float ln2,
      float gradient_scale) {
  await_previous_launch();
  __shared__ int target;
  const int t = blockIdx.x;
  if (threadIdx.x == 0) target = targets[t];  // seen by all past row_loss's barriers
  const uint2* const row = reinterpret_cast<const uint2*>(logits + static_cast<size_t>(t) * VOCAB);
  const float right = correct[t];
  float4 held[PER_THREAD];
  const float l = row_loss(row, held, right, log2e, ln2);
  if (threadIdx.x == 0) loss[t] = l;
  const float lse = l + right;
  uint2* const out = reinterpret_cast<uint2*>(gradient) + static_cast<size_t>(t) * QUADS;
  if constexpr (HELD) {
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
      const int i = threadIdx.x + k * BLOCK;
      out[i] = quad_gradient(held[k], 4 * i, target, lse, log2e, gradient_scale);
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < QUADS; i += BLOCK)
      out[i] = quad_gradient(logit_quad(row, i), 4 * i, target, lse, log2e, gradient_scale);
  }
}
