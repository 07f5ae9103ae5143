// loss[t] = ln sum_j exp(logits[t][j]) - correct[t], a block per row
// (cross-entropy.cuh).
#include "cross-entropy.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ loss, const HALF* __restrict__ logits, const float* __restrict__ correct, float log2e,
      float ln2) {
  await_previous_launch();
  float4 held[PER_THREAD];
  const float l = row_loss(reinterpret_cast<const uint2*>(logits + static_cast<size_t>(blockIdx.x) * VOCAB), held,
                           correct[blockIdx.x], log2e, ln2);
  if (threadIdx.x == 0) loss[blockIdx.x] = l;
}
