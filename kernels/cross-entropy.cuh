// A row's cross-entropy, a block per row (cross-entropy, and
// cross-entropy-backward, which forms the logits' gradient from the same
// reading of the row): loss[t] = ln sum_j exp(logits[t][j]) - correct[t],
// the row's maximum, then sum_j 2^((x_j - max) log2e), then max +
// log2(sum) ln2. The logits come in the half format, as their product
// rounds them: binary32 logits took twice the bytes to write and to read
// (at 8 x 1024, 403 MB each way against 201; the update 0.09 ms longer).
// Both reductions run in a fixed order (each thread its stride of the row,
// then the block tree). Where the block's threads divide the row's quads
// into at most HELD_QUADS each, the row is read once, each thread holding
// its stride between the two reductions (read twice, the second time mostly
// from DRAM at 8 x 1024, the launch took 146 us on the H200); else it is
// read again for the sum. The same additions either way.
#pragma once
#include "common.cuh"

constexpr int QUADS = VOCAB / 4;  // a quad: four halves, 8 bytes
constexpr int HELD_QUADS = 16;
constexpr bool HELD = QUADS % BLOCK == 0 && QUADS / BLOCK <= HELD_QUADS;
constexpr int PER_THREAD = HELD ? QUADS / BLOCK : 1;
static_assert(VOCAB % 4 == 0, "rows are whole quads");

// quad i of a row of logits, as binary32
__device__ __forceinline__ float4 logit_quad(const uint2* row, int i) {
  const uint2 w = row[i];
  return make_float4(low_float(w.x), high_float(w.x), low_float(w.y), high_float(w.y));
}

__device__ __forceinline__ float quad_max(float top, float4 v) {
  return fmaxf(top, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
}

__device__ __forceinline__ float quad_sum(float sum, float4 v, float top, float log2e) {
  return sum + (exp2f((v.x - top) * log2e) + exp2f((v.y - top) * log2e) + exp2f((v.z - top) * log2e) +
                exp2f((v.w - top) * log2e));
}

// The row's loss, every thread's (`held`: the thread's quads i = thread + k
// BLOCK, where HELD)
__device__ __forceinline__ float row_loss(const uint2* row, float4 (&held)[PER_THREAD], float correct, float log2e,
                                          float ln2) {
  __shared__ float scratch[BLOCK / 32];
  float top = -__int_as_float(0x7f800000), sum = 0.0f;
  if constexpr (HELD) {
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) held[k] = logit_quad(row, threadIdx.x + k * BLOCK);
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) top = quad_max(top, held[k]);
    top = block_max(top, scratch);
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) sum = quad_sum(sum, held[k], top, log2e);
  } else {
    for (int i = threadIdx.x; i < QUADS; i += BLOCK) top = quad_max(top, logit_quad(row, i));
    top = block_max(top, scratch);
    for (int i = threadIdx.x; i < QUADS; i += BLOCK) sum = quad_sum(sum, logit_quad(row, i), top, log2e);
  }
  sum = block_sum(sum, scratch);
  return (top + log2f(sum) * ln2) - correct;
}
