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
// entries side by side). up and gate come from a plane of the same rows, the
// up projection's row then the gate projection's, as their one product
// rounded them to the half format; the gated gradient is in the half format
// too. Thread k takes elements 2k and 2k + 1
// (a word of two halves from each plane and to each gradient's row), one at a
// time where FFN is odd or the count ends between them.
#include "common.cuh"

// the up and gate gradients of element i (see above)
__device__ __forceinline__ float2 gradients(float dy, float up, float x, float sqrt_two_over_pi, float cubic,
                                            float half, float one, float cubic_slope) {
  const float th = gelu_tanh(x, sqrt_two_over_pi, cubic);
  const float value = gelu(x, th, half, one);
  const float slope = half * (one + th) + half * x * (one - th * th) * sqrt_two_over_pi * (one + cubic_slope * x * x);
  return make_float2(dy * value, dy * up * slope);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ pair_gradient, const HALF* __restrict__ gated_gradient, const HALF* __restrict__ pair,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = 2u * (blockIdx.x * BLOCK + threadIdx.x);
  if (i >= elements) return;
  const size_t row = pair_place<FFN>(i);
  if (FFN % 2 == 0 && i + 1u < elements) {  // both in one row, each pair of halves a word
    const unsigned dy = *reinterpret_cast<const unsigned*>(gated_gradient + i);
    const unsigned u = *reinterpret_cast<const unsigned*>(pair + row);
    const unsigned x = *reinterpret_cast<const unsigned*>(pair + row + FFN);
    const float2 g0 =
        gradients(low_float(dy), low_float(u), low_float(x), sqrt_two_over_pi, cubic, half, one, cubic_slope);
    const float2 g1 =
        gradients(high_float(dy), high_float(u), high_float(x), sqrt_two_over_pi, cubic, half, one, cubic_slope);
    *reinterpret_cast<unsigned*>(pair_gradient + row) = pack_halves(g0.x, g1.x);
    *reinterpret_cast<unsigned*>(pair_gradient + row + FFN) = pack_halves(g0.y, g1.y);
    return;
  }
  for (unsigned j = i; j < i + 2u && j < elements; ++j) {
    const size_t at = pair_place<FFN>(j);
    const float2 g = gradients(to_float(gated_gradient[j]), to_float(pair[at]), to_float(pair[at + FFN]),
                               sqrt_two_over_pi, cubic, half, one, cubic_slope);
    pair_gradient[at] = to_half(g.x);
    pair_gradient[at + FFN] = to_half(g.y);
  }
}
