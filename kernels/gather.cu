// out[t][:] = table[ids[t]][:], a block per row t. An id outside the
// vocabulary is clamped to it, so no read leaves the table.
#include "common.cuh"

static_assert(WIDTH % 4 == 0, "rows are whole float4s");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ out, const int* __restrict__ ids, const float* __restrict__ table) {
  await_previous_launch();
  const unsigned id = min(static_cast<unsigned>(ids[blockIdx.x]), static_cast<unsigned>(VOCAB - 1));
  const float4* from = reinterpret_cast<const float4*>(table + static_cast<size_t>(id) * WIDTH);
  float4* to = reinterpret_cast<float4*>(out + static_cast<size_t>(blockIdx.x) * WIDTH);
  for (int i = threadIdx.x; i < WIDTH / 4; i += BLOCK) to[i] = from[i];
}
