// A pattern kernel of scripts/sass_latencies.py, frozen: the streaming
// attention's key launch split in two parts of four warps, with the headers
// it included, as it stood when it was written (SEQ 256, two heads). Under
// its register pressure ptxas lets an LDS result be covered by a later
// LDSM's barrier and an LDSM's by a later LDS's, on both architectures: the
// shared-memory loads retire in order. Kept apart from kernels/ so that the
// latency model does not move with the images it checks.
constexpr int BLOCK = 256;
constexpr int PARTS = 2;
constexpr int SEQ = 256;
constexpr int HEADS = 2;
constexpr int KV_HEADS = 2;
constexpr int BATCH = 1;
#define HALF_BFLOAT16 0
typedef unsigned short HALF;

#if defined(HALF_BFLOAT16)
__device__ __forceinline__ HALF to_half(float x) {
  HALF h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float to_float(HALF h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#define MMA_HALF "f16"

__device__ __forceinline__ float low_float(unsigned pair) { return to_float(static_cast<HALF>(pair & 0xffffu)); }
__device__ __forceinline__ float high_float(unsigned pair) { return to_float(static_cast<HALF>(pair >> 16)); }

// d += a b on the tensor cores: a 16 x 16 (row), b 16 x 8 (column), d 16 x 8 binary32
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32." MMA_HALF "." MMA_HALF ".f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// The values of GROUPS groups of GROUP_THREADS threads meet once every group
// is done with the shared memory `partial` reuses: the later groups' go there
// (value-major, so a warp's stores and loads are consecutive words) and the
// first group takes each later group's in group order with merge(values,
// theirs): a fixed order, the same bits every run. Whether the thread goes on
// (it is in the first group).
template <int GROUPS, int GROUP_THREADS, int VALUES, typename Merge>
__device__ __forceinline__ bool meet_groups(float (&values)[VALUES], float* partial, int group, int thread,
                                            Merge merge) {
  __syncthreads();
  if (group > 0) {
#pragma unroll
    for (int v = 0; v < VALUES; ++v) partial[((group - 1) * VALUES + v) * GROUP_THREADS + thread] = values[v];
  }
  __syncthreads();
  if (group > 0) return false;
#pragma unroll
  for (int other = 1; other < GROUPS; ++other) {
    float theirs[VALUES];
#pragma unroll
    for (int v = 0; v < VALUES; ++v) theirs[v] = partial[((other - 1) * VALUES + v) * GROUP_THREADS + thread];
    merge(values, theirs);
  }
  return true;
}

// values += theirs: the merge of sums
template <int VALUES>
__device__ __forceinline__ void add_values(float (&values)[VALUES], const float (&theirs)[VALUES]) {
#pragma unroll
  for (int v = 0; v < VALUES; ++v) values[v] += theirs[v];
}

// ---- the launch before ----

// On sm_90 a submission's graph links its launches by programmatic
// dependencies, so a launch is set up while the one before it drains: every
// image waits here, before its first memory access, until the launch before
// has completed and its writes are visible. (No image triggers its successor
// early: measured, blocks parked at the wait cost more than they saved.) The
// machine-code check holds every sm_90 image to this (no global memory access
// before the wait). Elsewhere the launches of a submission simply follow one
// another.
__device__ __forceinline__ void await_previous_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---- asynchronous copies and matrix fragments ----

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1
__device__ __forceinline__ void copy_async(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(shared)), "l"(global));
}

__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;"); }

// wait until at most `PENDING` committed groups are still in flight
template <int PENDING>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

// four 8 x 8 matrices of 16-bit words; lane l names row l % 8 of matrix l / 8
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void load_matrices_transposed(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// 2^x on the special-function unit (about 2 ulp)
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr int PART_THREADS = 128;  // four warps of 16 rows
constexpr int THREADS = PART_THREADS * PARTS;
static_assert(BLOCK == THREADS, "PARTS parts of four warps");
constexpr int TILE = 64;           // queries or keys a block takes, and a tile's rows
constexpr int HEAD = 64;           // a head's columns
constexpr int GROUP = HEADS / KV_HEADS;  // query heads a K/V head serves
constexpr int TILES = SEQ / TILE;
constexpr int TILE_HALVES = TILE * HEAD;
static_assert(SEQ % TILE == 0 && HEADS % KV_HEADS == 0, "whole tiles and whole groups");

// the swizzled place of (row, column) in a tile, in halves
__device__ __forceinline__ int place(int row, int column) {
  return row * HEAD + ((((column >> 3) ^ row) & 7) << 3) + (column & 7);
}

// rows [0, 64) of a tile whose rows lie `stride` halves apart in global
// memory, copied by a part's threads (thread: the index in the part)
__device__ __forceinline__ void copy_tile(HALF* tile, const HALF* from, size_t stride, int thread) {
#pragma unroll
  for (int i = 0; i < TILE_HALVES / 8 / PART_THREADS; ++i) {
    const int chunk = thread + i * PART_THREADS, row = chunk / 8, column = (chunk % 8) * 8;
    copy_async(tile + place(row, column), from + row * stride + column);
  }
}

// the part's threads wait for one another (named barrier 1 + part)
__device__ __forceinline__ void part_sync(int part) {
  if constexpr (PARTS == 1) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(part + 1), "n"(PART_THREADS) : "memory");
  }
}

// The parts' values meet once every part is done with its stages (where the
// later parts' go); the first part merges them in part order. Whether the
// thread goes on (it is in the first part).
template <int VALUES, typename Merge>
__device__ __forceinline__ bool meet_parts(float (&values)[VALUES], int part, int thread, Merge merge) {
  if constexpr (PARTS == 1) return true;
  extern __shared__ __align__(128) HALF shared[];
  return meet_groups<PARTS, PART_THREADS>(values, reinterpret_cast<float*>(shared), part, thread, merge);
}

// A fragments (16 rows x 64 columns: four k-slices) of rows [row0, row0 + 16)
// of a [rows][64] half plane in global memory, read directly
__device__ __forceinline__ void load_rows(unsigned (&a)[4][4], const HALF* plane, int row0) {
  const int lane = threadIdx.x & 31;
  const HALF* p = plane + static_cast<size_t>(row0 + (lane >> 2)) * HEAD + 2 * (lane & 3);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a[k][0] = *reinterpret_cast<const unsigned*>(p + 16 * k);
    a[k][1] = *reinterpret_cast<const unsigned*>(p + 8 * HEAD + 16 * k);
    a[k][2] = *reinterpret_cast<const unsigned*>(p + 16 * k + 8);
    a[k][3] = *reinterpret_cast<const unsigned*>(p + 8 * HEAD + 16 * k + 8);
  }
}

// acc[n] (16 x 8, n < 8) += a (16 x 64) times the tile's rows as columns:
// acc = A T^T, T [64 n][64 k] (ldmatrix: the tile's rows are B's columns)
__device__ __forceinline__ void multiply_rows(float (&acc)[8][4], const unsigned (&a)[4][4], const HALF* tile) {
  const int lane = threadIdx.x & 31, matrix = lane >> 3;
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      unsigned b[4];
      load_matrices(b, tile + place(16 * n + (lane & 7) + (matrix >> 1) * 8, 16 * k + (matrix & 1) * 8));
      mma_16816(acc[2 * n], a[k], b[0], b[1]);
      mma_16816(acc[2 * n + 1], a[k], b[2], b[3]);
    }
}

// acc[n] (16 x 8, n < 8) += a (16 x 64) times the tile: acc = A T, T [64 k][64 n]
// (ldmatrix.trans)
__device__ __forceinline__ void multiply_columns(float (&acc)[8][4], const unsigned (&a)[4][4], const HALF* tile) {
  const int lane = threadIdx.x & 31, matrix = lane >> 3;
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      unsigned b[4];
      load_matrices_transposed(b, tile + place(16 * k + (lane & 7) + (matrix & 1) * 8, 16 * n + (matrix >> 1) * 8));
      mma_16816(acc[2 * n], a[k], b[0], b[1]);
      mma_16816(acc[2 * n + 1], a[k], b[2], b[3]);
    }
}

// an accumulator (16 x 64 binary32) as A fragments in the half format: the
// element layouts of mma's C and A agree, so each thread packs its own values
__device__ __forceinline__ void to_fragments(unsigned (&a)[4][4], const float (&acc)[8][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a[k][0] = pack_halves(acc[2 * k][0], acc[2 * k][1]);
    a[k][1] = pack_halves(acc[2 * k][2], acc[2 * k][3]);
    a[k][2] = pack_halves(acc[2 * k + 1][0], acc[2 * k + 1][1]);
    a[k][3] = pack_halves(acc[2 * k + 1][2], acc[2 * k + 1][3]);
  }
}

__device__ __forceinline__ void clear(float (&acc)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

struct Stage {
  HALF queries[TILE_HALVES], gradients[TILE_HALVES];
  float lse[TILE], d[TILE];
};

extern "C" __global__ void __launch_bounds__(THREADS)
p_attention_key(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms, float* __restrict__ d_k,
      float* __restrict__ d_v, float stream_scale, float score_scale) {
  await_previous_launch();
  extern __shared__ __align__(128) HALF shared[];
  const int tile = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const int part = threadIdx.x / PART_THREADS, thread = threadIdx.x % PART_THREADS;
  const int warp = thread >> 5, lane = thread & 31;
  const int query_tiles = TILES - tile, steps = GROUP * query_tiles;
  Stage* const stages = reinterpret_cast<Stage*>(shared) + 2 * part;  // the part's two
  const int walk = steps > part ? (steps - 1 - part) / PARTS + 1 : 0;  // the part's steps part, part + PARTS, ...

  // step i: query head g GROUP + i / query_tiles, query tile tile + i % query_tiles
  auto copy_step = [&](int n) {
    const int i = part + n * PARTS;
    Stage& stage = stages[n & 1];
    const int h = g * GROUP + i / query_tiles, s = (tile + i % query_tiles) * TILE;
    const size_t rows = static_cast<size_t>(b * HEADS + h) * SEQ + s;
    copy_tile(stage.queries, q + rows * HEAD, HEAD, thread);
    copy_tile(stage.gradients, d_out + rows * HEAD, HEAD, thread);
    if (thread < TILE / 4) {
      copy_async(stage.lse + 4 * thread, log_sum_exp + rows + 4 * thread);
    } else if (thread < TILE / 2) {
      copy_async(stage.d + 4 * (thread - TILE / 4), row_terms + rows + 4 * (thread - TILE / 4));
    }
    copy_commit();
  };
  if (walk > 0) copy_step(0);

  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  const int row0 = tile * TILE + 16 * warp;  // the warp's first key
  unsigned fk[4][4], fv[4][4];
  load_rows(fk, k + kv_plane, row0);
  load_rows(fv, v + kv_plane, row0);

  float dk[8][4], dv[8][4];
  clear(dk);
  clear(dv);
  for (int n = 0; n < walk; ++n) {
    // step n's tiles have landed and every warp of the part is done with step
    // n - 1's, whose buffers the copy of step n + 1 (overlapping this step's
    // work) takes
    copy_wait<0>();
    part_sync(part);
    if (n + 1 < walk) copy_step(n + 1);
    const Stage& stage = stages[n & 1];
    const bool diagonal = (part + n * PARTS) % query_tiles == 0;

    float s[8][4], dp[8][4];
    clear(s);
    clear(dp);
    multiply_rows(s, fk, stage.queries);     // S^T = K Q^T
    multiply_rows(dp, fv, stage.gradients);  // dP^T = V dO^T
    // element (key 16 warp + lane / 4 + 8 (e / 2), query 8 c + 2 (lane % 4) + e % 2)
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int query = 8 * c + 2 * (lane & 3);
      const float2 lse = *reinterpret_cast<const float2*>(stage.lse + query);
      const float2 d = *reinterpret_cast<const float2*>(stage.d + query);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = 16 * warp + (lane >> 2) + 8 * (e >> 1);
        const bool masked = diagonal && query + (e & 1) < key;
        const float p = masked ? 0.0f : fast_exp2(s[c][e] * stream_scale - ((e & 1) ? lse.y : lse.x));
        s[c][e] = p;                                  // P^T
        dp[c][e] = p * (dp[c][e] - ((e & 1) ? d.y : d.x));  // dS^T
      }
    }
    unsigned fp[4][4], fds[4][4];
    to_fragments(fp, s);
    to_fragments(fds, dp);
    multiply_columns(dv, fp, stage.gradients);  // dV += P^T dO
    multiply_columns(dk, fds, stage.queries);   // dK += dS^T Q
  }

  float sums[2][8][4];  // d_k's, then d_v's
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) sums[0][c][e] = dk[c][e], sums[1][c][e] = dv[c][e];
  if (!meet_parts(reinterpret_cast<float(&)[64]>(sums), part, thread, add_values<64>)) return;
  const size_t at = kv_plane + static_cast<size_t>(row0 + (lane >> 2)) * HEAD + 2 * (lane & 3);
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const size_t e = at + 8 * half_row * HEAD + 8 * c;
      *reinterpret_cast<float2*>(d_k + e) =
          make_float2(sums[0][c][2 * half_row] * score_scale, sums[0][c][2 * half_row + 1] * score_scale);
      *reinterpret_cast<float2*>(d_v + e) = make_float2(sums[1][c][2 * half_row], sums[1][c][2 * half_row + 1]);
    }
}
