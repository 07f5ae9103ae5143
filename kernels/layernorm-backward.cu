// From the forward's statistics {mean, rstd}: x_hat = (x - mean) rstd,
// g = dy gamma, dx = rstd (g - mean(g) - x_hat mean((g - mean(g)) x_hat))
// (dy in the half format, as the product that makes it rounds it)
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
//
// A warp that walks more than one row copies the next row's x, dy (and
// residual) into its two stages of shared memory (cp.async, the manifest's
// dynamic shared memory) while it works on the current one: the loads in
// flight a warp no longer wait on registers (reading a row ahead into
// registers took 171 of them). The lanes read the stages as they read the
// rows, each its own pairs: the same sums.
#include "common.cuh"

#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
#define RESIDUAL_PARAMETER , const float* __restrict__ residual
constexpr int ROWS32 = 2;  // the binary32 rows a warp reads: x, residual
#else
#define RESIDUAL_PARAMETER
constexpr int ROWS32 = 1;  // x
#endif

static_assert(WIDTH % 64 == 0, "a lane holds whole pairs of every 64 columns");
constexpr int WARPS = BLOCK / 32;
constexpr int PAIRS = WIDTH / 64;
constexpr int ROWS_PER_PART = (ROWS + PARTS - 1) / PARTS;
constexpr int ROWS_PER_WARP = (ROWS_PER_PART + WARPS - 1) / WARPS;
// a stage: the binary32 rows, then dy's row of halves (half a binary32 row's
// words); each warp has two (the manifest's shared bytes, its
// _layernorm_stages), where a warp walks rows in turn, a row is whole rounds
// of the warp's 16-byte copies (128 words; dy's 256 halves), and they fit
// every card's block (the manifest's SHARED_LIMIT, sm_86's 99 KB)
constexpr int STAGE_WORDS = ROWS32 * WIDTH + WIDTH / 2;
constexpr int STAGE_BYTES = WARPS * 2 * STAGE_WORDS * 4;
constexpr bool AHEAD = ROWS_PER_WARP > 1 && WIDTH % 256 == 0 && STAGE_BYTES <= 99 * 1024;
static_assert(!AHEAD || STAGE_BYTES <= IMAGE_SHARED_BYTES, "the manifest gives the rows' stages");

// a lane's pair of dy (a word of two halves) as binary32
__device__ __forceinline__ float2 dy_pair(const unsigned* row, int pair) {
  const unsigned w = row[pair];
  return make_float2(low_float(w), high_float(w));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* dx, const float* x, const HALF* dy, const float* __restrict__ gamma, float* __restrict__ partials,
      HALF* __restrict__ dx_half, const float* __restrict__ statistics RESIDUAL_PARAMETER, float inverse_width,
      float epsilon) {
  await_previous_launch();
  extern __shared__ __align__(16) float stages[];  // AHEAD: [WARPS][2][STAGE_WORDS]
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
  const auto row_of = [&](int k) {
    const int t = first + warp + k * WARPS;
    return t < end ? t : first;
  };
  // the binary32 rows a warp reads
#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
  const float* const from[ROWS32] = {x, residual};
#else
  const float* const from[ROWS32] = {x};
#endif
  // the warp's row k into stage k % 2
  const auto copy_row = [&](int k) {
    float* const to = stages + (warp * 2 + (k & 1)) * STAGE_WORDS;
    const size_t at = static_cast<size_t>(row_of(k)) * WIDTH;
#pragma unroll
    for (int a = 0; a < ROWS32; ++a)
#pragma unroll
      for (int c = 4 * lane; c < WIDTH; c += 128) copy_async(to + a * WIDTH + c, from[a] + at + c);
#pragma unroll
    for (int c = 8 * lane; c < WIDTH; c += 256)
      copy_async(reinterpret_cast<HALF*>(to + ROWS32 * WIDTH) + c, dy + at + c);
    copy_commit();
  };
  if constexpr (AHEAD) copy_row(0);
#pragma unroll 1
  for (int k = 0; k < ROWS_PER_WARP; ++k) {
    const bool mine = first + warp + k * WARPS < end;
    const int t = row_of(k);
    const size_t row = static_cast<size_t>(t) * (WIDTH / 2);  // in pairs
    // the pairs of binary32 row a (x, residual) and of dy (words of two
    // halves) this lane reads: the stage's copies where the warp walks rows
    // in turn, else the rows themselves
    const float2* in[ROWS32];
    const unsigned* in_dy;
    if constexpr (AHEAD) {
      __syncwarp();  // every lane is done with row k - 1, whose stage row k + 1 takes
      if (k + 1 < ROWS_PER_WARP) {
        copy_row(k + 1);
        copy_wait<1>();
      } else {
        copy_wait<0>();
      }
      __syncwarp();  // every lane's copies of row k have landed
      const float* const stage = stages + (warp * 2 + (k & 1)) * STAGE_WORDS;
#pragma unroll
      for (int a = 0; a < ROWS32; ++a) in[a] = reinterpret_cast<const float2*>(stage + a * WIDTH);
      in_dy = reinterpret_cast<const unsigned*>(stage + ROWS32 * WIDTH);
    } else {
#pragma unroll
      for (int a = 0; a < ROWS32; ++a) in[a] = reinterpret_cast<const float2*>(from[a]) + row;
      in_dy = reinterpret_cast<const unsigned*>(dy) + row;
    }
    const float2 stats = reinterpret_cast<const float2*>(statistics)[t];
    float2 xh[PAIRS], g[PAIRS];
#if defined(IMAGE_FAMILY_LAYERNORM_BACKWARD_ADD)
    float2 r[PAIRS];  // read with the row, so that its loads overlap the sums
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) r[i] = in[1][32 * i + lane];
#endif
    float sum_g = 0.0f;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      const float2 v = in[0][32 * i + lane];
      const float2 d = dy_pair(in_dy, 32 * i + lane);
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
  // the warps' sums meet in warp order, in the stages' first words where
  // the warps walked rows in turn (once every warp is done with them)
  float2 (*block_sums)[WIDTH / 2];  // dy x_hat's, then dy's, by column pair
  if constexpr (AHEAD) {
    static_assert(STAGE_BYTES >= 2 * WIDTH * 4, "the sums fit the stages");
    __syncthreads();
    block_sums = reinterpret_cast<float2(*)[WIDTH / 2]>(stages);
  } else {
    __shared__ float2 sums[2][WIDTH / 2];
    block_sums = sums;
  }
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
