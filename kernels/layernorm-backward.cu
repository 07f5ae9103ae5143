// From the forward's statistics {mean, rstd}: x_hat = (x - mean) rstd,
// g = dy gamma, dx = rstd (g - mean(g) - x_hat mean((g - mean(g)) x_hat))
// (epsilon is not needed: rstd is given). x_hat's mean is zero, so the last
// term is the usual mean(g x_hat); taken after mean(g), the two sums over
// the row run one after the other (sm_86's ptxas interleaves two
// independent chains of shuffles and reads one's results unawaited, behind
// the other's wait, which the machine-code check does not admit). The
// family layernorm-backward-add writes residual + dx instead (the seed's
// add of the branch's gradient to the residual stream's, in the same
// launch: the same binary32 sum). dx_half is dx (with the residual, where
// added) rounded to the half format: the operand of the products that read
// the gradient next (the seed's cast-down, in the same launch).
//
// A warp per row, each lane holding the row's column pairs 64 i + 2 lane
// between the row's two sums (shuffles in a fixed order); block p takes rows
// [p ROWS_PER_PART, (p + 1) ROWS_PER_PART), its warps every WARPS-th. The
// gain's and shift's gradients are sums over every row of dy x_hat and dy:
// each lane sums its columns over its warp's rows, the warps' sums meet in
// warp order, and the block writes its part of them, partials[p] = {the
// rows' sums of dy x_hat, then of dy} (binary32, 2 WIDTH), which
// layernorm-parameters adds in part order: no x_hat plane is written and
// read back, and the same bits come every run.
#include "common.cuh"

#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
#define RESIDUAL_PARAMETER , const float* __restrict__ residual
#else
#define RESIDUAL_PARAMETER
#endif

static_assert(WIDTH % 64 == 0, "a lane holds whole pairs of every 64 columns");
constexpr int WARPS = BLOCK / 32;
constexpr int PAIRS = WIDTH / 64;
constexpr int ROWS_PER_PART = (ROWS + PARTS - 1) / PARTS;
constexpr int ROWS_PER_WARP = (ROWS_PER_PART + WARPS - 1) / WARPS;

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* dx, const float* x, const float* dy, const float* __restrict__ gamma, float* __restrict__ partials,
      HALF* __restrict__ dx_half, const float* __restrict__ statistics RESIDUAL_PARAMETER, float inverse_width,
      float epsilon) {
  await_previous_launch();
  __shared__ float2 block_sums[2][WIDTH / 2];  // dy x_hat's, then dy's, by column pair
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float2 gain[PAIRS], sum_dy_xh[PAIRS], sum_dy[PAIRS];
#pragma unroll
  for (int i = 0; i < PAIRS; ++i) {
    gain[i] = reinterpret_cast<const float2*>(gamma)[32 * i + lane];
    sum_dy_xh[i] = sum_dy[i] = make_float2(0.0f, 0.0f);
  }
  // every warp walks as many rows (the same count in the whole block, so
  // that its shuffles are known to run converged); a row past the block's
  // is the block's first again, read but neither written nor summed
  const int first = blockIdx.x * ROWS_PER_PART, end = min(first + ROWS_PER_PART, ROWS);
#pragma unroll 1
  for (int k = 0; k < ROWS_PER_WARP; ++k) {
    const bool mine = first + warp + k * WARPS < end;
    const int t = mine ? first + warp + k * WARPS : first;
    const size_t row = static_cast<size_t>(t) * (WIDTH / 2);  // in pairs
    const float2 stats = reinterpret_cast<const float2*>(statistics)[t];
    float2 xh[PAIRS], g[PAIRS];
#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
    float2 r[PAIRS];  // read with the row, so that its loads overlap the sums
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) r[i] = reinterpret_cast<const float2*>(residual)[row + 32 * i + lane];
#endif
    float sum_g = 0.0f;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      const float2 v = reinterpret_cast<const float2*>(x)[row + 32 * i + lane];
      const float2 d = reinterpret_cast<const float2*>(dy)[row + 32 * i + lane];
      xh[i] = make_float2((v.x - stats.x) * stats.y, (v.y - stats.x) * stats.y);
      g[i] = make_float2(d.x * gain[i].x, d.y * gain[i].y);
      sum_g += g[i].x;
      sum_g += g[i].y;
      if (mine) {
        sum_dy_xh[i].x += d.x * xh[i].x;
        sum_dy_xh[i].y += d.y * xh[i].y;
        sum_dy[i].x += d.x;
        sum_dy[i].y += d.y;
      }
    }
    const float mean_g = warp_sum(sum_g) * inverse_width;
    float sum_gx = 0.0f;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      sum_gx += (g[i].x - mean_g) * xh[i].x;
      sum_gx += (g[i].y - mean_g) * xh[i].y;
    }
    const float mean_gx = warp_sum(sum_gx) * inverse_width;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      float2 out = make_float2(stats.y * (g[i].x - mean_g - xh[i].x * mean_gx),
                               stats.y * (g[i].y - mean_g - xh[i].y * mean_gx));
#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
      out = make_float2(r[i].x + out.x, r[i].y + out.y);
#endif
      if (mine) {
        reinterpret_cast<float2*>(dx)[row + 32 * i + lane] = out;
        reinterpret_cast<unsigned*>(dx_half)[row + 32 * i + lane] = pack_halves(out.x, out.y);
      }
    }
  }
  // the warps' sums meet in warp order
#pragma unroll 1
  for (int w = 0; w < WARPS; ++w) {
    if (warp == w) {
#pragma unroll
      for (int i = 0; i < PAIRS; ++i) {
        float2& a = block_sums[0][32 * i + lane];
        float2& b = block_sums[1][32 * i + lane];
        a = w == 0 ? sum_dy_xh[i] : make_float2(a.x + sum_dy_xh[i].x, a.y + sum_dy_xh[i].y);
        b = w == 0 ? sum_dy[i] : make_float2(b.x + sum_dy[i].x, b.y + sum_dy[i].y);
      }
    }
    __syncthreads();
  }
  float2* const part = reinterpret_cast<float2*>(partials) + static_cast<size_t>(blockIdx.x) * WIDTH;
  for (int v = threadIdx.x; v < WIDTH; v += BLOCK) part[v] = block_sums[v / (WIDTH / 2)][v % (WIDTH / 2)];
}
