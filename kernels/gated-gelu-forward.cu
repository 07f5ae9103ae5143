// gated = the half of gelu(gate) up, for i < elements, element i being (row
// i / FFN, column i % FFN), where
// gelu(x) = half x (one + tanh(sqrt_two_over_pi (x + cubic x^3))). The backward
// works gelu out again from the gate (gelu_tanh, the same instructions), so
// no binary32 plane of it is written. (cubic_slope belongs to the backward;
// the scalars are shared.) up and gate come from one plane of rows of 2 FFN
// halves, the up projection's row then the gate projection's (one product
// makes both: each bank holds a layer's up and gate entries side by side),
// in the half format as it rounds them. Thread k takes elements 2k and 2k + 1
// (a word of two halves from each row and to gated), one at a time where FFN
// is odd or the count ends between them.
#include "common.cuh"

__device__ __forceinline__ float gated_value(float up, float x, float sqrt_two_over_pi, float cubic, float half,
                                             float one) {
  return gelu(x, gelu_tanh(x, sqrt_two_over_pi, cubic), half, one) * up;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ gated, const HALF* __restrict__ pair, float sqrt_two_over_pi, float cubic, float half,
      float one, float cubic_slope, unsigned elements) {
  await_previous_launch();
  const unsigned i = 2u * (blockIdx.x * BLOCK + threadIdx.x);
  if (i >= elements) return;
  if (FFN % 2 == 0 && i + 1u < elements) {  // both in one row, each pair of halves a word
    const HALF* const row = pair + pair_place<FFN>(i);
    const unsigned u = *reinterpret_cast<const unsigned*>(row), x = *reinterpret_cast<const unsigned*>(row + FFN);
    *reinterpret_cast<unsigned*>(gated + i) =
        pack_halves(gated_value(low_float(u), low_float(x), sqrt_two_over_pi, cubic, half, one),
                    gated_value(high_float(u), high_float(x), sqrt_two_over_pi, cubic, half, one));
    return;
  }
  for (unsigned j = i; j < i + 2u && j < elements; ++j) {
    const HALF* const at = pair + pair_place<FFN>(j);
    gated[j] = to_half(gated_value(to_float(at[0]), to_float(at[FFN]), sqrt_two_over_pi, cubic, half, one));
  }
}
