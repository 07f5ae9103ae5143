// out[i] = value for i < elements.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK) image(float* __restrict__ out, float value, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < elements) out[i] = value;
}
