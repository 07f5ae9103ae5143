// A pattern kernel of scripts/sass_latencies.py, frozen: the layer norm's
// backward walking rows in turn (eight warps, four rows each), each warp
// copying its next row into shared memory (cp.async) while it works on the
// current one, with the header lines it used, as it stood when it was
// written (8 x 1024 rows of 512, 256 blocks), once without and once with
// the residual. Between a row's shared loads and their readers ptxas waits
// only for the warp sums' shuffles, on both architectures: shared loads
// and shuffles retire in order; on sm_90 a global load overwrites an
// asynchronous copy's address register unwaited: the two read their
// operands in issue order. Kept apart from kernels/ so that the latency
// model does not move with the images it checks. Compiled once with
// LAYERNORM_ADD 0 and once with 1.
constexpr int BLOCK = 256;
constexpr int ROWS = 8192;
constexpr int WIDTH = 512;
constexpr int PARTS = 256;
typedef unsigned short HALF;
#if LAYERNORM_ADD
#define KERNEL_NAME layernorm_backward_add
#else
#define KERNEL_NAME layernorm_backward
#endif

__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ void await_previous_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void copy_async(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(shared)), "l"(global));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;"); }
template <int PENDING>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

#if LAYERNORM_ADD
#define RESIDUAL_PARAMETER , const float* __restrict__ residual
constexpr int ARRAYS = 3;  // the rows a warp reads: x, dy, residual
#else
#define RESIDUAL_PARAMETER
constexpr int ARRAYS = 2;
#endif

static_assert(WIDTH % 64 == 0, "a lane holds whole pairs of every 64 columns");
constexpr int WARPS = BLOCK / 32;
constexpr int PAIRS = WIDTH / 64;
constexpr int ROWS_PER_PART = (ROWS + PARTS - 1) / PARTS;
constexpr int ROWS_PER_WARP = (ROWS_PER_PART + WARPS - 1) / WARPS;
// each warp's two stages of ARRAYS rows (WARPS * 2 * ARRAYS * WIDTH words,
// the manifest's shared bytes), where a warp walks rows in turn
constexpr bool AHEAD = ROWS_PER_WARP > 1;
static_assert(WIDTH % 128 == 0, "a row is whole 16-byte copies, four a lane");

extern "C" __global__ void __launch_bounds__(BLOCK)
KERNEL_NAME(float* dx, const float* x, const float* dy, const float* __restrict__ gamma, float* __restrict__ partials,
      HALF* __restrict__ dx_half, const float* __restrict__ statistics RESIDUAL_PARAMETER, float inverse_width,
      float epsilon) {
  await_previous_launch();
  extern __shared__ __align__(16) float stages[];  // AHEAD: [WARPS][2][ARRAYS][WIDTH]
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
#if LAYERNORM_ADD
  const float* const from[ARRAYS] = {x, dy, residual};
#else
  const float* const from[ARRAYS] = {x, dy};
#endif
  // the warp's row k into stage k % 2
  const auto copy_row = [&](int k) {
    float* const to = stages + (warp * 2 + (k & 1)) * ARRAYS * WIDTH;
    const size_t at = static_cast<size_t>(row_of(k)) * WIDTH;
#pragma unroll
    for (int a = 0; a < ARRAYS; ++a)
#pragma unroll
      for (int c = 4 * lane; c < WIDTH; c += 128) copy_async(to + a * WIDTH + c, from[a] + at + c);
    copy_commit();
  };
  if constexpr (AHEAD) copy_row(0);
#pragma unroll 1
  for (int k = 0; k < ROWS_PER_WARP; ++k) {
    const bool mine = first + warp + k * WARPS < end;
    const int t = row_of(k);
    const size_t row = static_cast<size_t>(t) * (WIDTH / 2);  // in pairs
    // the pairs of array a (x, dy, residual) this lane reads: the stage's
    // copy where the warp walks rows in turn, else the row itself
    const float2* in[ARRAYS];
    if constexpr (AHEAD) {
      __syncwarp();  // every lane is done with row k - 1, whose stage row k + 1 takes
      if (k + 1 < ROWS_PER_WARP) {
        copy_row(k + 1);
        copy_wait<1>();
      } else {
        copy_wait<0>();
      }
      __syncwarp();  // every lane's copies of row k have landed
#pragma unroll
      for (int a = 0; a < ARRAYS; ++a)
        in[a] = reinterpret_cast<const float2*>(stages + ((warp * 2 + (k & 1)) * ARRAYS + a) * WIDTH);
    } else {
#pragma unroll
      for (int a = 0; a < ARRAYS; ++a) in[a] = reinterpret_cast<const float2*>(from[a]) + row;
    }
    const float2 stats = reinterpret_cast<const float2*>(statistics)[t];
    float2 xh[PAIRS], g[PAIRS];
#if LAYERNORM_ADD
    float2 r[PAIRS];  // read with the row, so that its loads overlap the sums
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) r[i] = in[2][32 * i + lane];
#endif
    float sum_g = 0.0f;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      const float2 v = in[0][32 * i + lane];
      const float2 d = in[1][32 * i + lane];
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
#if LAYERNORM_ADD
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
