// A block per row, from the forward's statistics {mean, rstd}:
// x_hat = (x - mean) rstd (written), g = dy gamma,
// dx = rstd (g - mean(g) - x_hat mean(g x_hat)). epsilon is not needed (rstd is
// given); the row is held in registers between the reductions. The family
// layernorm-backward-add writes residual + dx instead (the seed's add of the
// branch's gradient to the residual stream's, in the same launch: the same
// binary32 sum).
#include "common.cuh"

#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
#define RESIDUAL_PARAMETER , const float* __restrict__ residual
#define PLUS_RESIDUAL residual[row + column] +
#else
#define RESIDUAL_PARAMETER
#define PLUS_RESIDUAL
#endif

constexpr int THREADS = BLOCK;
constexpr int PER_THREAD = (WIDTH + THREADS - 1) / THREADS;

extern "C" __global__ void __launch_bounds__(THREADS)
image(float* dx, const float* x, const float* dy, const float* __restrict__ gamma, float* __restrict__ x_hat,
      const float* __restrict__ statistics RESIDUAL_PARAMETER, float inverse_width, float epsilon) {
  await_previous_launch();
  __shared__ float scratch[THREADS / 32];
  const size_t row = static_cast<size_t>(blockIdx.x) * WIDTH;
  const float2 stats = reinterpret_cast<const float2*>(statistics)[blockIdx.x];
  float xh[PER_THREAD], g[PER_THREAD], sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    xh[i] = g[i] = 0.0f;
    if (column < WIDTH) {
      xh[i] = (x[row + column] - stats.x) * stats.y;
      g[i] = dy[row + column] * gamma[column];
    }
    sum_g += g[i];
    sum_gx += g[i] * xh[i];
  }
  const float mean_g = block_sum(sum_g, scratch) * inverse_width;
  const float mean_gx = block_sum(sum_gx, scratch) * inverse_width;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    if (column < WIDTH) {
      x_hat[row + column] = xh[i];
      dx[row + column] = PLUS_RESIDUAL stats.y * (g[i] - mean_g - xh[i] * mean_gx);
    }
  }
}
