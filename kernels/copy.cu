// out[i] = in[i] for i < elements.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ out, const float* __restrict__ in, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < elements) out[i] = in[i];
}
