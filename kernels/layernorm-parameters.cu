// gamma_gradient[j] = the sum over the layer norm backward's parts p of
// partials[p][j] (its rows' sums of dy x_hat), beta_gradient[j] = that of
// partials[p][WIDTH + j] (their sums of dy); overwritten. A block per 32 of
// the 2 WIDTH values: its warp w adds the parts w, w + WARPS, ... in order
// (a warp's lanes read 32 neighbouring words of a part), and the warps'
// sums meet in warp order (the same bits every run).
#include "common.cuh"

constexpr int WARPS = BLOCK / 32;
constexpr int VALUES = 2 * WIDTH;
static_assert(VALUES % 32 == 0, "the values come in warps");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ gamma_gradient, float* __restrict__ beta_gradient, const float* __restrict__ partials) {
  await_previous_launch();
  __shared__ float warp_sums[WARPS][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int v = blockIdx.x * 32 + lane;
  float sum = 0.0f;
#pragma unroll 8
  for (int p = warp; p < PARTS; p += WARPS) sum += partials[static_cast<size_t>(p) * VALUES + v];
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0) {
    float total = warp_sums[0][lane];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) total += warp_sums[w][lane];
    if (v < WIDTH) {
      gamma_gradient[v] = total;
    } else {
      beta_gradient[v - WIDTH] = total;
    }
  }
}
