// From the gated activation's gradient: up_gradient = half(gated_gradient gelu)
// and gate_gradient = half(gated_gradient up GELU'(gate)), with th = tanh(
// sqrt_two_over_pi (x + cubic x^3)) and
//   GELU'(x) = half (one + th) + half x (one - th^2) sqrt_two_over_pi (one + cubic_slope x^2),
// cubic_slope = 3 cubic; for i < elements.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ up_gradient, HALF* __restrict__ gate_gradient, const float* __restrict__ gated_gradient,
      const float* __restrict__ gelu, const float* __restrict__ up, const float* __restrict__ gate,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= elements) return;
  const float dy = gated_gradient[i], x = gate[i];
  const float th = tanhf(sqrt_two_over_pi * (x + cubic * x * x * x));
  const float slope = half * (one + th) + half * x * (one - th * th) * sqrt_two_over_pi * (one + cubic_slope * x * x);
  up_gradient[i] = to_half(dy * gelu[i]);
  gate_gradient[i] = to_half(dy * up[i] * slope);
}
