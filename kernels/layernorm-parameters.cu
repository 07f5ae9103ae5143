// gamma_gradient[j] = sum over rows t of dy[t][j] x_hat[t][j], beta_gradient[j]
// = sum of dy[t][j] (overwritten). A block per 32 columns: lane j takes a
// column, warp w the rows w, w + WARPS, ... in increasing order, then the
// warps' sums are added in warp order.
#include "common.cuh"

constexpr int WARPS = BLOCK / 32;

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ gamma_gradient, const float* __restrict__ dy, const float* __restrict__ x_hat,
      float* __restrict__ beta_gradient) {
  __shared__ float partial_gamma[WARPS][32], partial_beta[WARPS][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int column = blockIdx.x * 32 + lane;
  float sum_gamma = 0.0f, sum_beta = 0.0f;
  if (column < WIDTH) {
#pragma unroll 8
    for (int t = warp; t < ROWS; t += WARPS) {
      const float d = dy[static_cast<size_t>(t) * WIDTH + column];
      sum_gamma += d * x_hat[static_cast<size_t>(t) * WIDTH + column];
      sum_beta += d;
    }
  }
  partial_gamma[warp][lane] = sum_gamma;
  partial_beta[warp][lane] = sum_beta;
  __syncthreads();
  if (warp == 0 && column < WIDTH) {
    float g = partial_gamma[0][lane], b = partial_beta[0][lane];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      g += partial_gamma[w][lane];
      b += partial_beta[w][lane];
    }
    gamma_gradient[column] = g;
    beta_gradient[column] = b;
  }
}
