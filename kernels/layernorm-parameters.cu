// gamma_gradient[j] = sum over rows t of dy[t][j] x_hat[t][j], beta_gradient[j]
// = sum of dy[t][j] (overwritten). A block per four columns, so that a
// 512-wide model gives the device a full wave: thread i reads the quad of
// rows i, i + BLOCK, ... (increasing) with 16-byte loads; then the block's
// sums meet in shared memory in a fixed order, halving (the same bits every
// run).
#include "common.cuh"

static_assert(WIDTH % 4 == 0, "the columns come in quads");
static_assert((BLOCK & (BLOCK - 1)) == 0, "the block's sums halve to one");

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ gamma_gradient, const float* __restrict__ dy, const float* __restrict__ x_hat,
      float* __restrict__ beta_gradient) {
  await_previous_launch();
  __shared__ float4 partial_gamma[BLOCK], partial_beta[BLOCK];
  const int quad = blockIdx.x;  // columns 4 quad .. 4 quad + 3
  float4 sum_gamma = make_float4(0.0f, 0.0f, 0.0f, 0.0f), sum_beta = sum_gamma;
#pragma unroll 4
  for (int t = threadIdx.x; t < ROWS; t += BLOCK) {
    const size_t at = static_cast<size_t>(t) * (WIDTH / 4) + quad;
    const float4 d = reinterpret_cast<const float4*>(dy)[at];
    const float4 x = reinterpret_cast<const float4*>(x_hat)[at];
    sum_gamma = add4(sum_gamma, make_float4(d.x * x.x, d.y * x.y, d.z * x.z, d.w * x.w));
    sum_beta = add4(sum_beta, d);
  }
  partial_gamma[threadIdx.x] = sum_gamma;
  partial_beta[threadIdx.x] = sum_beta;
  __syncthreads();
#pragma unroll 1
  for (int half = BLOCK / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      partial_gamma[threadIdx.x] = add4(partial_gamma[threadIdx.x], partial_gamma[threadIdx.x + half]);
      partial_beta[threadIdx.x] = add4(partial_beta[threadIdx.x], partial_beta[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    reinterpret_cast<float4*>(gamma_gradient)[quad] = partial_gamma[0];
    reinterpret_cast<float4*>(beta_gradient)[quad] = partial_beta[0];
  }
}
