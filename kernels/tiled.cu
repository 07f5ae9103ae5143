// C (M x N, binary32) = A B (+ R): half operands, binary32 accumulation on the
// tensor cores (mma.sync m16n8k16). A block computes a BLOCK_M x BLOCK_N tile
// of C with WARPS_M x WARPS_N warps; K is walked in steps of BLOCK_K through a
// ring of STAGES shared-memory stages filled by cp.async, so the copies of
// later steps overlap the products of the current one.
//
// With K_GROUPS > 1 the block holds that many groups of WARPS_M x WARPS_N
// warps, each with its own ring, walking its own contiguous share of K; at the
// end the groups' accumulators meet in shared memory and the first group adds
// them in group order. A product with few tiles and a long K (a weight
// gradient) so keeps more warps busy on each multiprocessor, in one launch and
// with a fixed order of additions (the same bits every run).
//
// Each operand is read where it is stored. A: rows [M][K] or, A_COLUMNS,
// [K][M]. B: [N][K] (B^T's rows) or, B_COLUMNS, [K][N]. An operand stored
// with K contiguous is kept in shared memory as [rows][BLOCK_K] and read with
// ldmatrix; one stored with K strided as [BLOCK_K][rows] and read with
// ldmatrix.trans. Both are XOR-swizzled in 16-byte chunks so that neither the
// copies nor the fragment loads conflict on banks, with no padding (the
// dynamic shared memory is exactly STAGES x (BLOCK_M + BLOCK_N) x BLOCK_K
// halves).
#include "common.cuh"

constexpr int GROUP_THREADS = WARPS_M * WARPS_N * 32;  // one K group's threads
constexpr int THREADS = GROUP_THREADS * K_GROUPS;
static_assert(BLOCK == THREADS, "a warp per warp tile of each K group");
constexpr int WARP_M = BLOCK_M / WARPS_M;  // the rows of C one warp computes
constexpr int WARP_N = BLOCK_N / WARPS_N;
constexpr int TILES_M = WARP_M / 16;       // its mma tiles
constexpr int TILES_N = WARP_N / 8;

static_assert(BLOCK_K == 32 || BLOCK_K == 64, "a K-contiguous tile row is four or eight 16-byte chunks");
static_assert(M % BLOCK_M == 0 && N % BLOCK_N == 0 && K % BLOCK_K == 0, "the tile divides the product");
static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "a warp's tile is whole pairs of mma tiles");
static_assert(BLOCK_M % 64 == 0 && BLOCK_N % 64 == 0, "a K-strided tile row is at least eight chunks");
static_assert(STAGES >= 2, "at least one stage in flight while one is read");
static_assert((K / BLOCK_K) % K_GROUPS == 0, "the K groups take equal shares of the steps");

// One operand's tile: EXTENT rows (of M or N) by BLOCK_K, stored in global
// memory with K contiguous (rows of length K) or K strided (rows of length
// TOTAL, the operand's M or N).
template <bool K_STRIDED, int EXTENT, int TOTAL>
struct Operand {
  static constexpr int HALVES = EXTENT * BLOCK_K;
  static constexpr int CHUNKS = HALVES / 8;
  static_assert(CHUNKS % GROUP_THREADS == 0, "a group's threads copy the tile evenly");

  // the swizzled place of (row, k) in the stage, in halves
  __device__ static __forceinline__ int place(int row, int k) {
    if constexpr (K_STRIDED) {
      return k * EXTENT + (((row >> 3) ^ (k & 7)) << 3) + (row & 7);
    } else {
      // eight rows of a fragment load land in eight different 16-byte bank
      // groups: 128-byte rows (BLOCK_K 64) by their own index, 64-byte rows
      // (two to a 128-byte line) by their pair's
      const int swizzle = BLOCK_K == 64 ? (row & 7) : ((row >> 1) & 3);
      return row * BLOCK_K + (((k >> 3) ^ swizzle) << 3) + (k & 7);
    }
  }

  // the tile at rows [row0, row0 + EXTENT), k in [k0, k0 + BLOCK_K), copied
  // by the group's threads (thread: the index in the group)
  __device__ static __forceinline__ void copy(HALF* stage, const HALF* global, int row0, int k0, int thread) {
#pragma unroll
    for (int i = 0; i < CHUNKS / GROUP_THREADS; ++i) {
      const int chunk = thread + i * GROUP_THREADS;
      if constexpr (K_STRIDED) {
        const int k = chunk / (EXTENT / 8), row = (chunk % (EXTENT / 8)) * 8;
        copy_async(stage + place(row, k), global + static_cast<size_t>(k0 + k) * TOTAL + row0 + row);
      } else {
        const int row = chunk / (BLOCK_K / 8), k = (chunk % (BLOCK_K / 8)) * 8;
        copy_async(stage + place(row, k), global + static_cast<size_t>(row0 + row) * K + k0 + k);
      }
    }
  }

  // A fragment: rows [row0, row0 + 16) x k [k0, k0 + 16) as mma's row-major A
  __device__ static __forceinline__ void a_fragment(unsigned (&r)[4], const HALF* stage, int row0, int k0) {
    const int lane = threadIdx.x & 31, matrix = lane >> 3;
    if constexpr (K_STRIDED) {
      load_matrices_transposed(r, stage + place(row0 + (matrix & 1) * 8, k0 + (lane & 7) + (matrix >> 1) * 8));
    } else {
      load_matrices(r, stage + place(row0 + (lane & 7) + (matrix & 1) * 8, k0 + (matrix >> 1) * 8));
    }
  }

  // B fragments of two n-tiles: rows [row0, row0 + 16) x k [k0, k0 + 16);
  // r[0], r[1] the first tile's, r[2], r[3] the second's
  __device__ static __forceinline__ void b_fragments(unsigned (&r)[4], const HALF* stage, int row0, int k0) {
    const int lane = threadIdx.x & 31, matrix = lane >> 3;
    if constexpr (K_STRIDED) {
      load_matrices_transposed(r, stage + place(row0 + (matrix >> 1) * 8, k0 + (lane & 7) + (matrix & 1) * 8));
    } else {
      load_matrices(r, stage + place(row0 + (lane & 7) + (matrix >> 1) * 8, k0 + (matrix & 1) * 8));
    }
  }
};

using OperandA = Operand<A_COLUMNS, BLOCK_M, M>;
using OperandB = Operand<B_COLUMNS, BLOCK_N, N>;
constexpr int STAGE_HALVES = OperandA::HALVES + OperandB::HALVES;

#if defined(IMAGE_FAMILY_TILED_ADD)
static_assert(RESIDUAL == 1, "tiled-add adds its residual");
// c may be r itself: each element of R is read by the thread that writes C there, before it writes
extern "C" __global__ void __launch_bounds__(THREADS)
image(float* c, const HALF* __restrict__ a, const HALF* __restrict__ b, const float* r) {
#else
static_assert(RESIDUAL == 0, "tiled adds no residual");
extern "C" __global__ void __launch_bounds__(THREADS)
image(float* __restrict__ c, const HALF* __restrict__ a, const HALF* __restrict__ b) {
#endif
  extern __shared__ __align__(128) HALF shared[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = warp / (WARPS_M * WARPS_N), group_warp = warp % (WARPS_M * WARPS_N);
  const int thread = threadIdx.x % GROUP_THREADS;
  const int block_m = blockIdx.y * BLOCK_M, block_n = blockIdx.x * BLOCK_N;
  const int warp_m = (group_warp / WARPS_N) * WARP_M, warp_n = (group_warp % WARPS_N) * WARP_N;
  constexpr int STEPS = K / BLOCK_K / K_GROUPS;  // each group's
  HALF* const ring = shared + group * STAGES * STAGE_HALVES;
  const int k_first = group * STEPS * BLOCK_K;

  auto copy_step = [&](int step) {
    HALF* stage = ring + (step % STAGES) * STAGE_HALVES;
    OperandA::copy(stage, a, block_m, k_first + step * BLOCK_K, thread);
    OperandB::copy(stage + OperandA::HALVES, b, block_n, k_first + step * BLOCK_K, thread);
  };

  float accumulator[TILES_M][TILES_N][4];
#pragma unroll
  for (int i = 0; i < TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < TILES_N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) accumulator[i][j][e] = 0.0f;

#pragma unroll
  for (int step = 0; step < STAGES - 1; ++step) {
    if (step < STEPS) copy_step(step);
    copy_commit();
  }

  for (int step = 0; step < STEPS; ++step) {
    // step's copies have landed (one group committed per step), and every
    // warp is done with the stage the next copy overwrites
    copy_wait<STAGES - 2>();
    __syncthreads();
    if (step + STAGES - 1 < STEPS) copy_step(step + STAGES - 1);
    copy_commit();

    const HALF* stage = ring + (step % STAGES) * STAGE_HALVES;
#pragma unroll
    for (int k = 0; k < BLOCK_K; k += 16) {
      unsigned fa[TILES_M][4], fb[TILES_N / 2][4];
#pragma unroll
      for (int i = 0; i < TILES_M; ++i) OperandA::a_fragment(fa[i], stage, warp_m + 16 * i, k);
#pragma unroll
      for (int j = 0; j < TILES_N / 2; ++j)
        OperandB::b_fragments(fb[j], stage + OperandA::HALVES, warp_n + 16 * j, k);
#pragma unroll
      for (int i = 0; i < TILES_M; ++i)
#pragma unroll
        for (int j = 0; j < TILES_N; ++j)
          mma_16816(accumulator[i][j], fa[i], fb[j / 2][(j & 1) * 2], fb[j / 2][(j & 1) * 2 + 1]);
    }
  }

  if constexpr (K_GROUPS > 1) {
    // The rings are free once every copy has landed and every warp has read
    // its last stage; the later groups' accumulators go there (value-major,
    // so a warp's stores and loads are consecutive words), and the first
    // group adds them in group order.
    constexpr int VALUES = TILES_M * TILES_N * 4;
    float* const partial = reinterpret_cast<float*>(shared);
    copy_wait<0>();
    __syncthreads();
    if (group > 0) {
#pragma unroll
      for (int i = 0; i < TILES_M; ++i)
#pragma unroll
        for (int j = 0; j < TILES_N; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            partial[((group - 1) * VALUES + (i * TILES_N + j) * 4 + e) * GROUP_THREADS + thread] =
                accumulator[i][j][e];
    }
    __syncthreads();
    if (group > 0) return;
#pragma unroll
    for (int g = 1; g < K_GROUPS; ++g)
#pragma unroll
      for (int i = 0; i < TILES_M; ++i)
#pragma unroll
        for (int j = 0; j < TILES_N; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            accumulator[i][j][e] += partial[((g - 1) * VALUES + (i * TILES_N + j) * 4 + e) * GROUP_THREADS + thread];
  }

  // the accumulator's elements: (row lane / 4, columns 2 (lane % 4) + 0, 1), and 8 rows below
  const int row0 = block_m + warp_m + (lane >> 2), column0 = block_n + warp_n + 2 * (lane & 3);
#pragma unroll
  for (int i = 0; i < TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < TILES_N; ++j)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        const size_t at = static_cast<size_t>(row0 + 16 * i + 8 * half_row) * N + column0 + 8 * j;
        float2 v = make_float2(accumulator[i][j][2 * half_row], accumulator[i][j][2 * half_row + 1]);
#if defined(IMAGE_FAMILY_TILED_ADD)
        const float2 residual = *reinterpret_cast<const float2*>(r + at);
        v.x += residual.x;
        v.y += residual.y;
#endif
        *reinterpret_cast<float2*>(c + at) = v;
      }
}
