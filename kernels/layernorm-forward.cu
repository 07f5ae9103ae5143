// A block per row: mean, population variance (two passes over the row held in
// registers), rstd = 1 / sqrt(var + epsilon); out = (x - mean) rstd gamma +
// beta, rounded to the half format (the products' operand: only the rounded
// row is ever read, so it is written as such); statistics[t] = {mean, rstd}.
// inverse_width is 1 / WIDTH in binary32.
#include "common.cuh"

constexpr int THREADS = BLOCK;
constexpr int PER_THREAD = (WIDTH + THREADS - 1) / THREADS;

extern "C" __global__ void __launch_bounds__(THREADS)
image(HALF* __restrict__ out, const float* __restrict__ in, const float* __restrict__ gamma, const float* __restrict__ beta,
      float* __restrict__ statistics, float inverse_width, float epsilon) {
  await_previous_launch();
  __shared__ float scratch[THREADS / 32];
  const size_t row = static_cast<size_t>(blockIdx.x) * WIDTH;
  float x[PER_THREAD], sum = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    x[i] = column < WIDTH ? in[row + column] : 0.0f;
    sum += x[i];
  }
  const float mean = block_sum(sum, scratch) * inverse_width;
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const float d = threadIdx.x + i * THREADS < WIDTH ? x[i] - mean : 0.0f;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(squares, scratch) * inverse_width + epsilon);
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    if (column < WIDTH) out[row + column] = to_half((x[i] - mean) * rstd * gamma[column] + beta[column]);
  }
  if (threadIdx.x == 0) reinterpret_cast<float2*>(statistics)[blockIdx.x] = make_float2(mean, rstd);
}
