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
// too. Thread k takes elements VECTOR k to VECTOR k + 7 (16 bytes of each
// plane and of each gradient's row) where FFN is a multiple of eight, so that
// a warp's loads and stores are whole 512-byte lines (at 8 x 1024, alone:
// 31.6 -> 28.6 us; a word of two halves a thread before); one element at a time
// where FFN is not, or the count ends inside a thread's eight.
#include "common.cuh"

constexpr int VECTOR = FFN % 8 == 0 ? 8 : 1;

// the up and gate gradients of element i (see above)
__device__ __forceinline__ float2 gradients(float dy, float up, float x, float sqrt_two_over_pi, float cubic,
                                            float half, float one, float cubic_slope) {
  const float th = gelu_tanh(x, sqrt_two_over_pi, cubic);
  const float value = gelu(x, th, half);
  const float slope = half * (one + th) + half * x * (one - th * th) * sqrt_two_over_pi * (one + cubic_slope * x * x);
  return make_float2(dy * value, dy * up * slope);
}

union Eight {
  uint4 words;
  HALF halves[8];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ pair_gradient, const HALF* __restrict__ gated_gradient, const HALF* __restrict__ pair,
      float sqrt_two_over_pi, float cubic, float half, float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = VECTOR * (blockIdx.x * BLOCK + threadIdx.x);
  if (i >= elements) return;
  if (VECTOR == 8 && i + 8u <= elements) {  // the eight in one row
    const size_t row = pair_place<FFN>(i);
    Eight dy, u, x, d_up, d_gate;
    dy.words = *reinterpret_cast<const uint4*>(gated_gradient + i);
    u.words = *reinterpret_cast<const uint4*>(pair + row);
    x.words = *reinterpret_cast<const uint4*>(pair + row + FFN);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float2 g = gradients(to_float(dy.halves[e]), to_float(u.halves[e]), to_float(x.halves[e]),
                                 sqrt_two_over_pi, cubic, half, one, cubic_slope);
      d_up.halves[e] = to_half(g.x);
      d_gate.halves[e] = to_half(g.y);
    }
    *reinterpret_cast<uint4*>(pair_gradient + row) = d_up.words;
    *reinterpret_cast<uint4*>(pair_gradient + row + FFN) = d_gate.words;
    return;
  }
  for (unsigned j = i; j < i + VECTOR && j < elements; ++j) {
    const size_t at = pair_place<FFN>(j);
    const float2 g = gradients(to_float(gated_gradient[j]), to_float(pair[at]), to_float(pair[at + FFN]),
                               sqrt_two_over_pi, cubic, half, one, cubic_slope);
    pair_gradient[at] = to_half(g.x);
    pair_gradient[at + FFN] = to_half(g.y);
  }
}
