// out[t][:] = table[ids[t]][:], a warp per row t (BLOCK / 32 rows a block),
// each lane its quads lane, lane + 32, ... of the row, all read before any is
// written (a block of 128 threads a row, a quad a thread, took 29.5 us at 8 x
// 1024 on the H200). An id outside the vocabulary is clamped to it, so no
// read leaves the table.
#include "common.cuh"

static_assert(WIDTH % 4 == 0, "rows are whole float4s");
constexpr int QUADS = WIDTH / 4;
constexpr int PER_LANE = (QUADS + 31) / 32;

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ out, const int* __restrict__ ids, const float* __restrict__ table) {
  await_previous_launch();
  const int lane = threadIdx.x & 31, t = blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
  if (t >= ROWS) return;
  const unsigned id = min(static_cast<unsigned>(ids[t]), static_cast<unsigned>(VOCAB - 1));
  const float4* from = reinterpret_cast<const float4*>(table + static_cast<size_t>(id) * WIDTH);
  float4* to = reinterpret_cast<float4*>(out + static_cast<size_t>(t) * WIDTH);
  float4 v[PER_LANE];
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k)
    if (lane + 32 * k < QUADS) v[k] = from[lane + 32 * k];
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k)
    if (lane + 32 * k < QUADS) to[lane + 32 * k] = v[k];
}
