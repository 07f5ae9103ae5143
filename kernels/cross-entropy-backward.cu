// The exact logits' gradient in the half format, a block per row: the
// log-sum-exp is rebuilt as loss[t] + correct[t], and
// gradient[t][j] = (2^((logit - lse) log2e) - [j == targets[t]]) gradient_scale,
// rounded once (what the products read: the seed's binary32 gradient and its
// cast-down in one launch).
// The targets live in the staging window (host memory the device reads over
// the bus), so each row's target is read once, by its block, not by every
// warp of the row; the row itself is walked in quads (VOCAB is a multiple of
// 128), consecutive threads on consecutive 16 bytes.
#include "common.cuh"

static_assert(VOCAB % 4 == 0, "the row comes in quads");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ gradient, const float* __restrict__ logits, const float* __restrict__ loss,
      const float* __restrict__ correct, const int* __restrict__ targets, float log2e, float gradient_scale) {
  await_previous_launch();
  __shared__ int target;
  const int t = blockIdx.x;
  if (threadIdx.x == 0) target = targets[t];
  const float lse = loss[t] + correct[t];
  __syncthreads();
  const size_t row = static_cast<size_t>(t) * (VOCAB / 4);
#pragma unroll 4
  for (int i = threadIdx.x; i < VOCAB / 4; i += BLOCK) {
    const float4 x = reinterpret_cast<const float4*>(logits)[row + i];
    const int j = 4 * i;
    float4 g;  // binary32, then rounded
    g.x = (exp2f((x.x - lse) * log2e) - (j == target ? 1.0f : 0.0f)) * gradient_scale;
    g.y = (exp2f((x.y - lse) * log2e) - (j + 1 == target ? 1.0f : 0.0f)) * gradient_scale;
    g.z = (exp2f((x.z - lse) * log2e) - (j + 2 == target ? 1.0f : 0.0f)) * gradient_scale;
    g.w = (exp2f((x.w - lse) * log2e) - (j + 3 == target ? 1.0f : 0.0f)) * gradient_scale;
    reinterpret_cast<uint2*>(gradient)[row + i] = make_uint2(pack_halves(g.x, g.y), pack_halves(g.z, g.w));
  }
}
