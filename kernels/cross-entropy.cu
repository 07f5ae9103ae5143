// loss[t] = ln sum_j exp(logits[t][j]) - correct[t], a block per row: the row's
// maximum, then sum_j 2^((x_j - max) log2e), then max + log2(sum) ln2. Both
// reductions run in a fixed order (each thread its stride of the row, then
// the block tree).
#include "common.cuh"

constexpr int THREADS = BLOCK;
static_assert(VOCAB % 4 == 0, "rows are whole float4s");

extern "C" __global__ void __launch_bounds__(THREADS)
image(float* __restrict__ loss, const float* __restrict__ logits, const float* __restrict__ correct, float log2e,
      float ln2) {
  await_previous_launch();
  __shared__ float scratch[THREADS / 32];
  const float4* row = reinterpret_cast<const float4*>(logits + static_cast<size_t>(blockIdx.x) * VOCAB);
  float top = -__int_as_float(0x7f800000);
  for (int i = threadIdx.x; i < VOCAB / 4; i += THREADS) {
    const float4 v = row[i];
    top = fmaxf(top, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  top = block_max(top, scratch);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < VOCAB / 4; i += THREADS) {
    const float4 v = row[i];
    sum += exp2f((v.x - top) * log2e) + exp2f((v.y - top) * log2e) + exp2f((v.z - top) * log2e) +
           exp2f((v.w - top) * log2e);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) loss[blockIdx.x] = (top + log2f(sum) * ln2) - correct[blockIdx.x];
}
