// From the gated activation's gradient: the up gradient half(gated_gradient
// gelu(gate)) and the gate gradient half(gated_gradient up GELU'(gate)), with
// th = gelu_tanh(gate) (the forward's instructions, so gelu(gate) is the
// forward's to the bit) and
//   gelu(x) = half x (one + th),
//   GELU'(x) = half (one + th) + half x (one - th^2) sqrt_two_over_pi (one + cubic_slope x^2),
// cubic_slope = 3 cubic; for i < elements, element i being (row i / FFN,
// column i % FFN). Both go to one plane of rows of 2 FFN halves, the up
// gradient's row then the gate gradient's: the data gradients of the up and
// gate products are then one product over K = 2 FFN, and their weight
// gradients one over M = 2 FFN (each bank holds a layer's up and gate
// entries side by side).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ pair_gradient, const float* __restrict__ gated_gradient, const float* __restrict__ up,
      const float* __restrict__ gate, float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope,
      unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= elements) return;
  const float dy = gated_gradient[i], x = gate[i];
  const float th = gelu_tanh(x, sqrt_two_over_pi, cubic);
  const float gelu = half * x * (one + th);
  const float slope = half * (one + th) + half * x * (one - th * th) * sqrt_two_over_pi * (one + cubic_slope * x * x);
  HALF* const row = pair_gradient + static_cast<size_t>(i / FFN) * 2 * FFN + i % FFN;
  row[0] = to_half(dy * gelu);
  row[FFN] = to_half(dy * up[i] * slope);
}
