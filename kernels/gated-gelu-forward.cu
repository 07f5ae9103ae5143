// gated = the half of gelu(gate) up, for i < elements, where
// gelu(x) = half x (one + tanh(sqrt_two_over_pi (x + cubic x^3))). The backward
// works gelu out again from the gate (gelu_tanh, the same instructions), so
// no binary32 plane of it is written. (cubic_slope belongs to the backward;
// the scalars are shared.)
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ gated, const float* __restrict__ up, const float* __restrict__ gate,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= elements) return;
  const float x = gate[i];
  const float y = half * x * (one + gelu_tanh(x, sqrt_two_over_pi, cubic));
  gated[i] = to_half(y * up[i]);
}
