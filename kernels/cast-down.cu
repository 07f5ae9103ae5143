// out[i] = in[i] in the half format (round to nearest even), i < elements;
// thread k converts elements 2k and 2k + 1 and stores them as one word (out is
// 4-byte aligned).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ out, const float* __restrict__ in, unsigned elements) {
  await_previous_launch();
  const unsigned i = 2u * (blockIdx.x * BLOCK + threadIdx.x);
  if (i + 1u < elements) {
    *reinterpret_cast<unsigned*>(out + i) = pack_halves(in[i], in[i + 1u]);
  } else if (i < elements) {
    out[i] = to_half(in[i]);
  }
}
