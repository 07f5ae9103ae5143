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
// entries side by side). The gated gradient, up and gate are in the half
// format, as their products round them. Thread k takes elements 2k and 2k + 1
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
image(HALF* __restrict__ pair_gradient, const HALF* __restrict__ gated_gradient, const HALF* __restrict__ up,
      const HALF* __restrict__ gate, float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope,
      unsigned elements) {
  await_previous_launch();
  const unsigned i = 2u * (blockIdx.x * BLOCK + threadIdx.x);
  if (i >= elements) return;
  HALF* const row = pair_gradient + static_cast<size_t>(i / FFN) * 2 * FFN + i % FFN;
  if (FFN % 2 == 0 && i + 1u < elements) {  // both in one row, each pair of halves a word
    const unsigned dy = *reinterpret_cast<const unsigned*>(gated_gradient + i);
    const unsigned u = *reinterpret_cast<const unsigned*>(up + i), x = *reinterpret_cast<const unsigned*>(gate + i);
    const float2 g0 =
        gradients(low_float(dy), low_float(u), low_float(x), sqrt_two_over_pi, cubic, half, one, cubic_slope);
    const float2 g1 =
        gradients(high_float(dy), high_float(u), high_float(x), sqrt_two_over_pi, cubic, half, one, cubic_slope);
    *reinterpret_cast<unsigned*>(row) = pack_halves(g0.x, g1.x);
    *reinterpret_cast<unsigned*>(row + FFN) = pack_halves(g0.y, g1.y);
    return;
  }
  for (unsigned j = i; j < i + 2u && j < elements; ++j) {
    HALF* const at = pair_gradient + static_cast<size_t>(j / FFN) * 2 * FFN + j % FFN;
    const float2 g = gradients(to_float(gated_gradient[j]), to_float(up[j]), to_float(gate[j]), sqrt_two_over_pi, cubic,
                               half, one, cubic_slope);
    at[0] = to_half(g.x);
    at[FFN] = to_half(g.y);
  }
}
