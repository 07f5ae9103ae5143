// A warp per row (BLOCK / 32 rows a block): mean, population variance (two
// passes over the row held in registers), rstd = 1 / sqrt(var + epsilon);
// out = (x - mean) rstd gamma + beta, rounded to the half format (the
// products' operand: only the rounded row is ever read, so it is written as
// such); statistics[t] = {mean, rstd}. inverse_width is 1 / WIDTH in
// binary32. Lane l holds the row's quads l, l + 32, ... (a warp's loads are
// 512 consecutive bytes), and the sums meet by butterfly: no barrier, and
// every lane ends with the same bits (a block a row, its sums meeting
// through shared memory, took 2.1 us at 1 x 1024 on the H200).
#include "common.cuh"

constexpr int ROWS_PER_BLOCK = BLOCK / 32;
constexpr int QUADS = WIDTH / 4;  // a row's float4s
constexpr int PER_LANE = (QUADS + 31) / 32;
static_assert(WIDTH % 4 == 0, "rows of whole quads (16-byte aligned)");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ out, const float* __restrict__ in, const float* __restrict__ gamma,
      const float* __restrict__ beta, float* __restrict__ statistics, float inverse_width, float epsilon) {
  await_previous_launch();
  const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (row >= ROWS) return;
  const float4* const x4 = reinterpret_cast<const float4*>(in + static_cast<size_t>(row) * WIDTH);
  float4 x[PER_LANE];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int q = lane + 32 * i;
    x[i] = q < QUADS ? x4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += x[i].x + x[i].y + x[i].z + x[i].w;
  }
  const float mean = warp_sum(sum) * inverse_width;
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    if (lane + 32 * i < QUADS) {
      const float a = x[i].x - mean, b = x[i].y - mean, c = x[i].z - mean, d = x[i].w - mean;
      squares += a * a + b * b + c * c + d * d;
    }
  }
  const float rstd = 1.0f / sqrtf(warp_sum(squares) * inverse_width + epsilon);
  const float4* const gamma4 = reinterpret_cast<const float4*>(gamma);
  const float4* const beta4 = reinterpret_cast<const float4*>(beta);
  uint2* const out4 = reinterpret_cast<uint2*>(out + static_cast<size_t>(row) * WIDTH);
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int q = lane + 32 * i;
    if (q < QUADS) {
      const float4 g = gamma4[q], b = beta4[q];
      out4[q] = make_uint2(pack_halves((x[i].x - mean) * rstd * g.x + b.x, (x[i].y - mean) * rstd * g.y + b.y),
                           pack_halves((x[i].z - mean) * rstd * g.z + b.z, (x[i].w - mean) * rstd * g.w + b.w));
    }
  }
  if (lane == 0) reinterpret_cast<float2*>(statistics)[row] = make_float2(mean, rstd);
}
