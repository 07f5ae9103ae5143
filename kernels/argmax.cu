// out[0] = the index of the largest of in[0 .. VOCAB), the first among equals.
// Each thread scans a stride of the row in increasing order; the candidates
// meet in a fixed tree (lanes, then warps in order) that prefers the lower
// index on ties.
#include "common.cuh"

struct Best {
  float value;
  unsigned index;
};

// the better of two candidates: the larger value, the lower index on ties
__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

__device__ __forceinline__ Best shuffle(Best b, int offset) {
  return {__shfl_xor_sync(0xffffffffu, b.value, offset), __shfl_xor_sync(0xffffffffu, b.index, offset)};
}

extern "C" __global__ void __launch_bounds__(BLOCK) image(unsigned* __restrict__ out, const float* __restrict__ in) {
  await_previous_launch();
  __shared__ Best warps[BLOCK / 32];
  static_assert(VOCAB >= BLOCK, "every thread starts from an element of its own");
  Best best = {in[threadIdx.x], threadIdx.x};
  for (unsigned i = threadIdx.x + BLOCK; i < VOCAB; i += BLOCK) best = better(best, {in[i], i});
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) best = better(best, shuffle(best, offset));
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < BLOCK / 32; ++w) best = better(best, warps[w]);
    out[0] = best.index;
  }
}
