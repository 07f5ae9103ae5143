// out[i] = left[i] + right[i] for i < elements (out may be left or right).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* out, const float* left, const float* right, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < elements) out[i] = left[i] + right[i];
}
