// gelu = half gate (one + tanh(sqrt_two_over_pi (gate + cubic gate^3))), the
// binary32 plane the backward reads, and gated = the half of gelu up, for
// i < elements. (cubic_slope belongs to the backward; the scalars are shared.)
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ gelu, HALF* __restrict__ gated, const float* __restrict__ up, const float* __restrict__ gate,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= elements) return;
  const float x = gate[i];
  const float y = half * x * (one + tanhf(sqrt_two_over_pi * (x + cubic * x * x * x)));
  gelu[i] = y;
  gated[i] = to_half(y * up[i]);
}
