// gated = the half of gelu(gate) up, for i < elements, where
// gelu(x) = half x (one + tanh(sqrt_two_over_pi (x + cubic x^3))). The backward
// works gelu out again from the gate (gelu_tanh, the same instructions), so
// no binary32 plane of it is written. (cubic_slope belongs to the backward;
// the scalars are shared.) up and gate are in the half format, as their
// products round them. Thread k takes elements 2k and 2k + 1 (one 4-byte load
// of each plane, one 4-byte store), the last alone where elements is odd.
#include "common.cuh"

__device__ __forceinline__ float gated_value(float up, float x, float sqrt_two_over_pi, float cubic, float half,
                                             float one) {
  return gelu(x, gelu_tanh(x, sqrt_two_over_pi, cubic), half, one) * up;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ gated, const HALF* __restrict__ up, const HALF* __restrict__ gate,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = 2u * (blockIdx.x * BLOCK + threadIdx.x);
  if (i + 1u < elements) {
    const unsigned u = *reinterpret_cast<const unsigned*>(up + i), x = *reinterpret_cast<const unsigned*>(gate + i);
    *reinterpret_cast<unsigned*>(gated + i) =
        pack_halves(gated_value(low_float(u), low_float(x), sqrt_two_over_pi, cubic, half, one),
                    gated_value(high_float(u), high_float(x), sqrt_two_over_pi, cubic, half, one));
  } else if (i < elements) {
    gated[i] = to_half(gated_value(to_float(up[i]), to_float(gate[i]), sqrt_two_over_pi, cubic, half, one));
  }
}
