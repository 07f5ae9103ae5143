// C (M x N, binary32; rounded to the half format in tiled-half, tiled-gated,
// which also writes the gated activation (see GATED), tiled-rope, which
// stores it by head, its queries and keys turned (see ROPE), and
// tiled-heads, which stores it by head with the attention backward's row
// terms (see BY_HEAD)) = A B (+ R):
// half operands, binary32 accumulation on the tensor cores (mma.sync
// m16n8k16). A block computes a BLOCK_M x BLOCK_N tile of C with WARPS_M x
// WARPS_N warps; K is walked in steps of BLOCK_K through a
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
// ldmatrix; one stored with K strided as 64-wide columns of [BLOCK_K][64]
// and read with ldmatrix.trans. Both are XOR-swizzled in 16-byte chunks so
// that neither the copies nor the fragment loads conflict on banks, with no
// padding (the dynamic shared memory is exactly STAGES x (BLOCK_M + BLOCK_N) x
// BLOCK_K halves). With BLOCK_K 64 both are also the 128-byte swizzled
// layouts (K-major and MN-major) Hopper's warpgroup products read.
//
// With K_BLOCKS > 1 (on sm_90 and later) K is also split across the blocks of
// a cluster (K_BLOCKS blocks along z): each walks its contiguous share, the
// later blocks leave their sums in their own shared memory and the first
// block adds them in block order, reading them across the cluster (the same
// bits every run, and a product with few tiles spread over K_BLOCKS times the
// multiprocessors). Cards without clusters take the whole of K in the first
// block; the others return.
//
// WGMMA 1 (built for sm_90a): each warpgroup of four warps computes 64 rows
// of the tile (of its K group's share) with wgmma.mma_async straight from
// the shared stages; built
// for any other card the same image runs the mma.sync path with its
// WARPS_M x WARPS_N warps.
//
// WGMMA 2 and 3 (sm_90a): the same warpgroup products, fed by a warpgroup of
// their own. A launch of at most a wave of blocks walks the tiles (tile t,
// t + the grid, ...); the last warpgroup only copies: one of its threads
// arms each stage's full mbarrier with the stage's bytes and has the tensor
// memory accelerator bring both operands' boxes (bulk tensor copies, laid
// out 128-byte swizzled as the stages are). The others only multiply,
// releasing a stage on its empty mbarrier once their products have read it.
// No barrier of the whole block stands in the walk, so the copies of a
// block's next tile run while it stores the last. With WGMMA 2 the
// multiplying warpgroups share each tile (64 rows each); with WGMMA 3 they
// take the tiles in turn, so one stores while the other multiplies. On other
// cards the copying warpgroup copies with cp.async, each thread's copies
// arriving on the full mbarrier, and the others walk on the mma.sync path.
// WGMMA 2 with K_GROUPS 2: two multiplying warpgroups take a tile's K steps
// in turn, each over all of the tile's 64 rows, so that a tile of 64 rows
// has two warpgroups' products in flight; at the tile's end the second's sums
// meet the first's in shared memory beside the ring, and the first adds them
// and stores the tile.
// WGMMA 2 with K_BLOCKS > 1: a block per tile of C and K share (no walk);
// every block of the cluster leaves its sums in its own shared memory, then
// each adds up its share of the tile's n-tiles over the cluster's blocks, in
// block order, and stores it (a product with few tiles and a long K on
// K_BLOCKS times the multiprocessors, the adding and storing spread over
// them, the same bits every run).
#include "common.cuh"

constexpr int GROUP_THREADS = WARPS_M * WARPS_N * 32;  // one K group's threads
constexpr int WARPGROUP_THREADS = 128;
constexpr int PRODUCER_THREADS = WGMMA >= 2 ? WARPGROUP_THREADS : 0;  // the warpgroup that only copies (WGMMA 2, 3)
constexpr int THREADS = GROUP_THREADS * K_GROUPS + PRODUCER_THREADS;
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
#if __CUDA_ARCH__ >= 900 && (IMAGE_WGMMA < 2 || defined(__CUDA_ARCH_FEAT_SM90_ALL))
constexpr int SPLIT = K_BLOCKS;  // the blocks of a cluster that share K (WGMMA 2: with the warpgroups' meeting)
#else
constexpr int SPLIT = 1;
#endif
static_assert(K_BLOCKS == 1 || K_GROUPS == 1, "K split across a block's groups or a cluster's blocks");
static_assert(WGMMA < 2 || (K_GROUPS == 1 && K_BLOCKS == 1) || (WGMMA == 2 && (K_GROUPS == 1 || K_BLOCKS == 1)),
              "a block that walks tiles takes the whole of K; WGMMA 2 splits K across a cluster's blocks or its "
              "warpgroups' turns");
static_assert(WGMMA != 3 || GROUP_THREADS == 2 * WARPGROUP_THREADS, "two warpgroups take the tiles in turn");
static_assert(WGMMA < 2 || BLOCK_K == 64, "a tensor copy's row is one 128-byte swizzle atom");

// A tensor map (CUtensorMap): the runtime encodes one for each operand from
// its relocated pointer and the operand's extent, and passes them after the
// parameter block (where the cubin places them, 64-byte aligned)
struct alignas(64) TensorMap {
  unsigned long long words[16];
};
#if IMAGE_WGMMA >= 2 && defined(__CUDA_ARCH_FEAT_SM90_ALL) && IMAGE_TENSOR_STORE && defined(IMAGE_FAMILY_TILED_ROPE)
// (the queries', the keys' and the values' planes: they go with `rope`)
#define STAGED_HEADS_MAPS
#define TENSOR_MAP_PARAMETERS                                                                       \
  , const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, \
      const __grid_constant__ TensorMap map_queries, const __grid_constant__ TensorMap map_keys, \
      const __grid_constant__ TensorMap map_values
#define TENSOR_MAP_ARGUMENTS , &map_a, &map_b, nullptr, nullptr
#elif IMAGE_WGMMA >= 2 && defined(__CUDA_ARCH_FEAT_SM90_ALL) && IMAGE_TENSOR_STORE && \
    ((IMAGE_WGMMA == 2 && IMAGE_RESIDUAL) || defined(IMAGE_FAMILY_TILED_GATED))
// (the fourth: R's, or the gated activation's)
#define TENSOR_MAP_PARAMETERS                                                                       \
  , const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, \
      const __grid_constant__ TensorMap map_c, const __grid_constant__ TensorMap map_x
#define TENSOR_MAP_ARGUMENTS , &map_a, &map_b, &map_c, &map_x
#elif IMAGE_WGMMA >= 2 && defined(__CUDA_ARCH_FEAT_SM90_ALL) && IMAGE_TENSOR_STORE
#define TENSOR_MAP_PARAMETERS                                                                       \
  , const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, \
      const __grid_constant__ TensorMap map_c
#define TENSOR_MAP_ARGUMENTS , &map_a, &map_b, &map_c, nullptr
#elif IMAGE_WGMMA >= 2 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TENSOR_MAP_PARAMETERS , const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b
#define TENSOR_MAP_ARGUMENTS , &map_a, &map_b, nullptr, nullptr
#else
#define TENSOR_MAP_PARAMETERS
#define TENSOR_MAP_ARGUMENTS , nullptr, nullptr, nullptr, nullptr
#endif
static_assert((K / BLOCK_K) % (K_GROUPS * SPLIT) == 0, "the K groups and blocks take equal shares of the steps");
constexpr int STEPS = K / BLOCK_K / K_GROUPS / SPLIT;  // each group's
constexpr int TILE_STEPS = STEPS * K_GROUPS;  // a block's steps of a tile (the copying warpgroup's)
constexpr int TILES_ALONG_N = N / BLOCK_N, TILES = M / BLOCK_M * TILES_ALONG_N;  // C's tiles, N fastest
// C's elements: binary32, or (tiled-half, tiled-gated, tiled-rope, tiled-heads) rounded to the half format
#if defined(IMAGE_FAMILY_TILED_HALF) || defined(IMAGE_FAMILY_TILED_GATED) || defined(IMAGE_FAMILY_TILED_ROPE) || \
    defined(IMAGE_FAMILY_TILED_HEADS)
#define HALF_C 1
typedef HALF C_ELEMENT;
#else
#define HALF_C 0
typedef float C_ELEMENT;
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool ALTERNATING = WGMMA == 3;  // the warpgroups take tiles in turn
constexpr bool IN_TURNS = WGMMA == 2 && K_GROUPS > 1;  // the warpgroups take a tile's K steps in turn
constexpr bool TENSOR_COPIES = WGMMA >= 2;  // the tensor memory accelerator copies the stages
constexpr int RELEASING_WARPS = ALTERNATING || IN_TURNS ? 4 : GROUP_THREADS / 32;  // the warps that read a stage
// A walk of 256 columns: each multiplying thread's sums take 128 registers,
// more than an even share of the block's leaves beside them, so the copying
// warpgroup, which needs few, hands its registers to the multiplying ones
// (setmaxnreg: 24 and 240 a thread. The block keeps the registers it was
// launched with, 168 a thread, 64512 in all: asking for more than it holds,
// setmaxnreg.inc would wait for ever). So too where the warpgroups take
// tiles of 128 x 128 in turn, each a whole tile's sums, and round C to the
// half format: pairing its words (store_tile_words_at) took 8 bytes of local
// memory beyond 168 registers (rc-m8192-n1408-k512-half on tile 41)
constexpr bool HANDS_REGISTERS = (WGMMA == 2 && BLOCK_N == 256) || (WGMMA == 3 && HALF_C);
static_assert(!HANDS_REGISTERS || (BLOCK_M == 128 && K_GROUPS == 1), "two multiplying warpgroups and the copying one");
#else
constexpr bool TENSOR_COPIES = false;
constexpr int RELEASING_WARPS = GROUP_THREADS / 32;
#endif

// the first k of a K group's share (of the block's, where a cluster splits K)
__device__ __forceinline__ int k_first(int group) {
  int block = 0;
  if constexpr (SPLIT > 1) block = blockIdx.z;
  return (block * K_GROUPS + group) * STEPS * BLOCK_K;
}

// WGMMA 2 with K split across the cluster: each block adds up and stores
// SHARE_TILES of the tile's n-tiles (the z-th share)
constexpr bool SHARED_SUMS = WGMMA == 2 && SPLIT > 1;
constexpr int SHARE_TILES = BLOCK_N / 8 / SPLIT;
static_assert(!SHARED_SUMS || (SHARE_TILES * SPLIT == BLOCK_N / 8 && SHARE_TILES % 2 == 0),
              "each block of the cluster stores whole pairs of n-tiles");

#if defined(IMAGE_FAMILY_TILED_GATED)
// The up and gate projections as one product, the gated activation in its
// epilogue: B's rows (C's columns) are the up projection's [0, N / 2), then
// the gate's. A tile of BLOCK_N columns takes BLOCK_N / 2 of each, the same
// ones, its columns alternating PAIRED of the up's and PAIRED of the gate's,
// so that the thread holding an up value holds its gate too (n-tile j's
// partner is j + PAIRED / 8; PAIRED below): the warpgroups' tensor copies
// bring B's stage as two boxes, the up's rows and the gate's.
constexpr bool GATED = true;
static_assert(!B_COLUMNS && K_GROUPS == 1 && K_BLOCKS == 1,
              "B's rows K-contiguous, each tile's n-tiles whole in one place (no K split)");
#else
constexpr bool GATED = false;
#endif

#if defined(IMAGE_FAMILY_TILED_ROPE)
// The queries, keys and values as one product, the rotary turn in its
// epilogue, C stored by head (the seed's qk-rope launch, no launch of its
// own): C's columns are the query heads', then the key heads', then the value
// heads', 64 each; columns i and i + 32 (i < 32) of a query or key head turn
// together by the angle of rotary column i at the row's position. A tile of
// 64-column heads takes each head's column i beside column i + 32, PAIRED
// columns of the first 32 alternating with the same of the last 32, so that
// the thread holding one holds its partner (n-tile j's is j + PAIRED / 8;
// PAIRED below): on the warpgroups' path PAIRED is 32, and the columns keep
// their order.
constexpr bool ROPE = true;
constexpr int ROTATED = (HEADS + KV_HEADS) * 64;  // the query and key heads' columns
static_assert(!B_COLUMNS && K_GROUPS == 1 && K_BLOCKS == 1 && N == ROTATED + KV_HEADS * 64 && M % SEQ == 0,
              "B's rows K-contiguous, each tile's heads whole in one place (no K split), whole sequences");
#else
constexpr bool ROPE = false;
#endif

#if defined(IMAGE_FAMILY_TILED_HEADS)
// The context's gradient (the attention output's data gradient) by head,
// with the attention backward's row terms in its epilogue (the seed's
// token-to-head, no launch of its own, nor a binary32 C written and read
// again): C's columns are the heads', 64 each; C is rounded to the half
// format and stored [batch][head][seq][64], and
//   row_terms[b][h][s] = sum_d C~[b SEQ + s][h 64 + d] out[b SEQ + s][h 64 + d]
// from the rounded halves C~ (those both backward launches read) times the
// forward's output `out` (the half format, token-major), in binary32: a
// thread's columns of the head, then its quad's (the four lanes of a row),
// then, where the warps' path splits a head's columns across warps, the
// warps' sums through shared memory in warp order (the same bits every run,
// no atomics). The tile's sums are whole in one block: K groups meet in the
// first, which stores the tile; K is not split across a cluster's blocks.
constexpr bool BY_HEAD = true;
static_assert(K_BLOCKS == 1 && N == HEADS * 64 && M % SEQ == 0,
              "each tile stored by one block (no K split across a cluster), whole heads, whole sequences");
#else
constexpr bool BY_HEAD = false;
#endif

// The columns a gated or rotary tile takes from one of its two halves in
// turn (above), as the path the image takes on the card pairs them (the
// others' code is compiled too, never run): the warpgroups hold a tile's
// whole width, so a whole half (a gated tile's up half, a head's first 32
// columns); the warps pair the n-tiles of each 16 columns. Other products:
// the whole tile.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int PAIRED = !(GATED || ROPE) ? BLOCK_N : WGMMA == 0 ? 8 : GATED ? BLOCK_N / 2 : 32;
#else
constexpr int PAIRED = GATED || ROPE ? 8 : BLOCK_N;
#endif

// Of columns alternating PAIRED of one half (of HALF_SPAN columns, the
// first from `first`) and PAIRED of the other, the place of column t
template <int HALF_SPAN>
__device__ __forceinline__ int alternating(int first, int t) {
  return first + (t / PAIRED) % 2 * HALF_SPAN + t / (2 * PAIRED) * PAIRED + t % PAIRED;
}

// B's row, and C's column, of a tile's row (column) t < BLOCK_N, the tile's
// first at tile_n: itself, but in the gated and the rotary products (see
// above; a rotary tile whose columns keep their order takes no arithmetic)
__device__ __forceinline__ int paired(int tile_n, int t) {
  if constexpr (GATED) return alternating<N / 2>(tile_n / 2, t);
  if constexpr (ROPE && PAIRED < 32) return alternating<32>(tile_n + t - t % 64, t % 64);  // in its head
  return tile_n + t;
}

// C's column of a column of the tiles' order (paired keeps a column's place
// in its 8, so a thread's first column, 2 (lane % 4) on, maps whole)
__device__ __forceinline__ int paired_column(int column) {
  return paired(column / BLOCK_N * BLOCK_N, column % BLOCK_N);
}

// One operand's tile: EXTENT rows (of M or N) by BLOCK_K, stored in global
// memory with K contiguous (rows of length K) or K strided (rows of length
// TOTAL, the operand's M or N).
template <bool K_STRIDED, int EXTENT, int TOTAL, bool PAIRED_ROWS = false>
struct Operand {
  static constexpr int HALVES = EXTENT * BLOCK_K;
  static constexpr int CHUNKS = HALVES / 8;

  // the swizzled place of (row, k) in the stage, in halves
  __device__ static __forceinline__ int place(int row, int k) {
    if constexpr (K_STRIDED) {
      return (row >> 6) * (BLOCK_K * 64) + k * 64 + ((((row >> 3) & 7) ^ (k & 7)) << 3) + (row & 7);
    } else {
      // eight rows of a fragment load land in eight different 16-byte bank
      // groups: 128-byte rows (BLOCK_K 64) by their own index, 64-byte rows
      // (two to a 128-byte line) by their pair's
      const int swizzle = BLOCK_K == 64 ? (row & 7) : ((row >> 1) & 3);
      return row * BLOCK_K + (((k >> 3) ^ swizzle) << 3) + (k & 7);
    }
  }

  // the tile at rows [row0, row0 + EXTENT) (paired, with PAIRED_ROWS), k in
  // [k0, k0 + BLOCK_K), copied by COPYING threads (thread: the index among
  // them)
  template <int COPYING = GROUP_THREADS>
  __device__ static __forceinline__ void copy(HALF* stage, const HALF* global, int row0, int k0, int thread) {
    static_assert(CHUNKS % COPYING == 0, "the threads copy the tile evenly");
#pragma unroll
    for (int i = 0; i < CHUNKS / COPYING; ++i) {
      const int chunk = thread + i * COPYING;
      if constexpr (K_STRIDED) {
        const int k = chunk / (EXTENT / 8), row = (chunk % (EXTENT / 8)) * 8;
        copy_async(stage + place(row, k), global + static_cast<size_t>(k0 + k) * TOTAL + row0 + row);
      } else {
        const int row = chunk / (BLOCK_K / 8), k = (chunk % (BLOCK_K / 8)) * 8;
        const int at = PAIRED_ROWS ? paired(row0, row) : row0 + row;
        copy_async(stage + place(row, k), global + static_cast<size_t>(at) * K + k0 + k);
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
using OperandB = Operand<B_COLUMNS, BLOCK_N, N, GATED || ROPE>;
constexpr int STAGE_HALVES = OperandA::HALVES + OperandB::HALVES;

#if defined(IMAGE_FAMILY_TILED_ADD)
static_assert(RESIDUAL == 1, "tiled-add adds its residual");
#define EPILOGUE_PARAMETER , const float* r
#define EPILOGUE_ARGUMENT , r
#elif defined(IMAGE_FAMILY_TILED_GATED)
static_assert(RESIDUAL == 0, "tiled-gated adds no residual");
// where the gated activation goes ([M][N / 2], the half format) and the
// GELU's scalars
struct Gated {
  HALF* out;
  float sqrt_two_over_pi, cubic, half;
};
#define EPILOGUE_PARAMETER , Gated gated
#define EPILOGUE_ARGUMENT , gated
#elif defined(IMAGE_FAMILY_TILED_ROPE)
static_assert(RESIDUAL == 0, "tiled-rope adds no residual");
// where the heads go ([batch][head][seq][64] each, the half format) and the
// rotary tables ([32][SEQ] binary32, column-major); where tensor copies
// store the heads (TENSOR_STORE), the three planes' tensor maps
struct Rope {
  HALF *queries, *keys, *values;
  const float *cosine, *sine;
  const TensorMap* maps[3];
};
#define EPILOGUE_PARAMETER , Rope rope
#define EPILOGUE_ARGUMENT , rope
#elif defined(IMAGE_FAMILY_TILED_HEADS)
static_assert(RESIDUAL == 0, "tiled-heads adds no residual");
// where the heads go ([batch][head][seq][64], the half format) and the row
// terms ([batch][head][seq], binary32), and the forward's output they are
// formed with ([M][N], the half format)
struct ByHead {
  HALF* heads;
  float* row_terms;
  const HALF* out;
};
#define EPILOGUE_PARAMETER , ByHead by_head
#define EPILOGUE_ARGUMENT , by_head
#else
static_assert(RESIDUAL == 0, "tiled adds no residual");
#define EPILOGUE_PARAMETER
#define EPILOGUE_ARGUMENT
#endif

// TENSOR_STORE (sm_90a): each multiplying warpgroup leaves its 64 rows of a
// tile's C (binary32, or a half C, a gated product's halves and activation,
// a rotary product's heads) in a slab of shared memory past the ring, and
// one of its threads has the tensor memory accelerator store them (bulk
// tensor copies of boxes of 128 bytes a row: 32 binary32 columns or 64
// halves, 128-byte swizzled), while the warpgroup goes on to the next
// tile's products: with C stored from the registers, the stores' time
// added to the products' (rr-m8192-n12288-k512 on the H200, alone: 241 us,
// 152 with no store at all; rr-m8192-n12288-k512-half on an H100, 185.9 us
// on tile 66, 168.9 on tile 67). Other cards store from the registers.
static_assert(!TENSOR_STORE || (WGMMA >= 2 && !BY_HEAD && (!GATED || BLOCK_N % 128 == 0) &&
                                 K_GROUPS == 1 && K_BLOCKS == 1),
              "a walking block's binary32 or half C (or a gated product's C and activation, each half of the "
              "tile whole boxes of 64 columns, or a rotary product's heads), each tile's sums whole in its "
              "warpgroups");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool STAGED_C = TENSOR_STORE;
#else
constexpr bool STAGED_C = false;
#endif
// A residual added in the walk of WGMMA 2 comes through the same slab: the
// tensor memory accelerator brings the tile's R into it while the tile's
// products run (on an mbarrier of the warpgroup's, after the ring's), and
// each thread adds its sums to R where it would have written them. Every
// element of R and C then moves by tensor copies: with a thread's loads and
// stores of R and C the launch stalled on the load and store queue
// (rr-m8192-n512-k512-add on the H200: its warps stalled there most).
constexpr bool STAGED_R = STAGED_C && RESIDUAL && WGMMA == 2;
// A slab: a warpgroup's 64 rows of a binary32 or half C (a box of 128
// bytes a row per 32 or 64 columns), or of a gated product's three boxes of
// 64 halves (its up half, gate half and their activation:
// store_staged_gated, which takes a tile wider than 128 columns in passes),
// or a rotary product's heads, a box of 64 halves each (store_staged_heads)
constexpr int SLAB_ROWS = 64, BOX_COLUMNS = 128 / sizeof(C_ELEMENT);
constexpr int BOX_WORDS = SLAB_ROWS * 32;  // a box's words of 4 bytes: its rows of 128 bytes
constexpr int SLAB_WORDS = GATED ? 3 * BOX_WORDS : SLAB_ROWS * BLOCK_N * sizeof(C_ELEMENT) / 4;
// the bytes of the ring and its mbarriers (and R's), where tensor copies
// fill it (a function: a constant of its own put data into every cubin)
constexpr int ring_bytes() { return STAGES * STAGE_HALVES * 2 + 2 * STAGES * 8 + (STAGED_R ? 16 : 0); }
// the later K groups' sums, a tile's in binary32 each: past the ring where
// the block walks tiles (multiply_tiles_in_turns), else where the rings were
constexpr int later_sums_bytes() { return (K_GROUPS - 1) * BLOCK_M * BLOCK_N * 4; }
// the slabs' offset in the dynamic shared memory: past the ring, its
// mbarriers (and R's), 1024-byte aligned (the swizzle's period; the
// manifest's _product_shared)
constexpr int SLAB_OFFSET = (ring_bytes() + 1023) / 1024 * 1024;
// what the manifest gives (IMAGE_SHARED_BYTES) holds the ring and its
// mbarriers where tensor copies fill it, and every multiplying warpgroup's slab
static_assert(!TENSOR_COPIES || ring_bytes() <= IMAGE_SHARED_BYTES, "the manifest gives the ring and its mbarriers");
static_assert(!STAGED_C || SLAB_OFFSET + GROUP_THREADS / 128 * SLAB_WORDS * 4 <= IMAGE_SHARED_BYTES,
              "the manifest gives every multiplying warpgroup its slab");
// ... and, where two warpgroups take a tile's K steps in turn, the second's
// sums past the ring's mbarriers (multiply_tiles_in_turns)
static_assert(WGMMA < 2 || K_GROUPS == 1 || ring_bytes() + later_sums_bytes() <= IMAGE_SHARED_BYTES,
              "the manifest gives the second warpgroup's sums past the ring");
// Without a copying warpgroup (WGMMA 0, 1) each K group has its own ring,
// and the later K groups' (or a cluster's later blocks') sums go where the
// rings were (meet_k_groups, meet_k_blocks): the manifest gives both
static_assert(WGMMA >= 2 || K_GROUPS * STAGES * STAGE_HALVES * 2 <= IMAGE_SHARED_BYTES,
              "the manifest gives every K group its ring");
static_assert(WGMMA >= 2 ||
                  (K_GROUPS > 1 ? later_sums_bytes() : (K_BLOCKS > 1) * BLOCK_M * BLOCK_N * 4) <= IMAGE_SHARED_BYTES,
              "the manifest gives the later K groups' or blocks' sums");

// A C larger than half the L2 does not stay there for its reader: its
// stores are marked to leave L2 first, and the operands' tensor copies to
// stay, so that the stream of C does not push the operands out
// (in one run on the H200: rr-m8192-n12288-k512 255 -> 238 us, rr-m8192-n1408-k512
// 30.5 -> 29.0 us)
constexpr bool STREAMED_C = static_cast<size_t>(M) * N * sizeof(C_ELEMENT) > (32u << 20);

// A store to C (streamed where C is)
template <typename T>
__device__ __forceinline__ void store_c(T* at, T value) {
  if constexpr (STREAMED_C) {
    __stcs(at, value);
  } else {
    *at = value;
  }
}

// C's pair at (row, column) stored
__device__ __forceinline__ void store_pair(float* c, int row, int column, float v0, float v1) {
  store_c(reinterpret_cast<float2*>(c + static_cast<size_t>(row) * N + column), make_float2(v0, v1));
}

#if HALF_C
// A half C's pair at (row, column) stored, a word of two halves
__device__ __forceinline__ void store_pair(HALF* c, int row, int column, float v0, float v1) {
  store_c(reinterpret_cast<unsigned*>(c + static_cast<size_t>(row) * N + column), pack_halves(v0, v1));
}

// A half C's pairs of n-tiles j and j + 1 in one row (the warpgroups' path):
// the thread's pairs at columns `column` = 8 j + 2 (lane % 4) and
// 8 (j + 1) + 2 (lane % 4). The lanes of a pair trade a word, so that each
// stores four halves side by side and the four lanes of the row write its 32
// bytes whole: a word store of each n-tile alone writes each 32-byte sector
// in two halves, and took longer than the binary32 C's pairs
// (rr-m1024-n1408-k512 on the H200, alone: 5.1 us, against 6.0 binary32; in
// the update, with word stores, 7.4 against 6.0). Every lane of the warp takes
// part. (The warps' path, which other cards take, stores words: for sm_86 the
// certificate's schedule check refused the exchange's machine code, a
// shuffle's result read on a path it could not rule out.)
// (`at`: the thread's first pair's place; the row's 16 halves lie side by side;
// a, b: the pairs' words, rounded.)
__device__ __forceinline__ void store_tile_words_at(HALF* at, unsigned a, unsigned b) {
  const bool odd = threadIdx.x & 1;  // lane % 4 odd: the n-tile j + 1 half of the row's 16 halves
  const unsigned theirs = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
  store_c(reinterpret_cast<uint2*>(at + (odd ? 6 : 0)), odd ? make_uint2(theirs, b) : make_uint2(a, theirs));
}

__device__ __forceinline__ void store_tile_pair_at(HALF* at, float a0, float a1, float b0, float b1) {
  store_tile_words_at(at, pack_halves(a0, a1), pack_halves(b0, b1));
}

// (Rows of LENGTH halves: C's, or the gated activation's.)
template <int LENGTH = N>
__device__ __forceinline__ void store_tile_pair(HALF* c, int row, int column, float a0, float a1, float b0,
                                                float b1) {
  store_tile_pair_at(c + static_cast<size_t>(row) * LENGTH + column, a0, a1, b0, b1);
}
#endif

#if defined(IMAGE_FAMILY_TILED_ROPE)
// C's place at (row, column) in the heads' layout: row b SEQ + s, column
// head 64 + i
__device__ __forceinline__ HALF* head_place(const Rope& rope, int row, int column) {
  const int b = row / SEQ, s = row % SEQ, head = column / 64;
  HALF* const base = head < HEADS ? rope.queries : head < HEADS + KV_HEADS ? rope.keys : rope.values;
  const int heads = head < HEADS ? HEADS : KV_HEADS, h = head < HEADS ? head : (head - HEADS) % KV_HEADS;
  return base + (static_cast<size_t>(b * heads + h) * SEQ + s) * 64 + column % 64;
}

// A head's columns i and i + 32 of a row turned by the angle of rotary
// column i at the row's position (c, sn its cosine and sine), from both as
// the half format rounds them (as C keeps them; qk-rope turned C's halves
// so), in binary32:
//   x <- x cos - y sin, y <- y cos + x sin
__device__ __forceinline__ void turn(float& x, float& y, float c, float sn) {
  const float x0 = to_float(to_half(x)), x1 = to_float(to_half(y));
  x = x0 * c - x1 * sn;
  y = x1 * c + x0 * sn;
}

// The angles a warpgroup thread turns with (PAIRED 32): of its columns i =
// 2 (lane % 4) + 8 q + e (q < 4, e < 2) of each head, the same in every head
// of its tile, at its two rows' positions; [half row][2 q + e]. A tile's
// walk reads them before its products, so that the loads land while those
// run.
struct Angles {
  float cosine[2][8], sine[2][8];
};

// A warpgroup thread's query and key heads turned (PAIRED 32): each head's
// n-tiles j < 4 with their partners j + 4 (column0: a column of the
// thread's in the tile's first head; the thread's columns lie in each
// head's first 8)
__device__ __forceinline__ void turn_heads(float (&d)[BLOCK_N / 2], int column0, const Angles& angles) {
#pragma unroll
  for (int h = 0; h < BLOCK_N / 64; ++h)
    if (column0 + 64 * h < ROTATED)  // a query or key head
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = 8 * h + q;
          const int at = 2 * q + e % 2;
          turn(d[4 * j + e], d[4 * (j + 4) + e], angles.cosine[e / 2][at], angles.sine[e / 2][at]);
        }
}

__device__ __forceinline__ Angles angles_of(const Rope& rope, int row0, int column0) {
  Angles angles;
#pragma unroll
  for (int half_row = 0; half_row < 2; ++half_row)
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int at = (column0 % 64 + 8 * (q / 2) + q % 2) * SEQ + (row0 + 8 * half_row) % SEQ;
      angles.cosine[half_row][q] = rope.cosine[at];
      angles.sine[half_row][q] = rope.sine[at];
    }
  return angles;
}
#else
struct Angles {};
#endif

#if defined(IMAGE_FAMILY_TILED_HEADS)
// The place of the row term of (row, column) of C: [b][head][s] for row
// b SEQ + s, column head 64 + d (unsigned: the divisions are shifts and
// masks; in signed words their fixups for negative numbers, hoisted out of
// the walk, took registers enough for sm_86's code of the 1 x 1024 tile to
// spill)
__device__ __forceinline__ unsigned head_row(unsigned row, unsigned column) {
  return (row / SEQ * HEADS + column / 64) * SEQ + row % SEQ;
}

// C's place at (row, column) in the heads' layout
__device__ __forceinline__ HALF* head_place(const ByHead& by_head, unsigned row, unsigned column) {
  return by_head.heads + static_cast<size_t>(head_row(row, column)) * 64 + column % 64;
}

// out's pair at `from`, a word of two halves
__device__ __forceinline__ unsigned out_word(const HALF* from) { return *reinterpret_cast<const unsigned*>(from); }

// A pair's share of its row term: C's two halves as rounded (a word) times
// out's, in binary32
__device__ __forceinline__ float pair_term(unsigned c, unsigned o) {
  return low_float(c) * low_float(o) + high_float(c) * high_float(o);
}

// A row's term of the head at `column`, once its quad's lanes have summed
// it: the first lane writes it
__device__ __forceinline__ void store_row_term(const ByHead& by_head, int row, int column, float term) {
  if ((threadIdx.x & 3) == 0) by_head.row_terms[head_row(row, column)] = term;
}
#endif

#if defined(IMAGE_FAMILY_TILED_GATED)
// The gated activations gelu(gate) up of a pair of up and gate sums, from
// the half words C holds them in (up, gate: each a pair, the lower column
// in the low bits), so that the backward, which works gelu out again from
// C's gate with the same instructions (gelu_tanh), sees the forward's
// values to the bit
__device__ __forceinline__ unsigned gated_pair(const Gated& g, unsigned up, unsigned gate) {
  const auto value = [&](unsigned up, unsigned gate) {  // the activation of the pair's low halves
    const float u = to_float(static_cast<HALF>(up)), x = to_float(static_cast<HALF>(gate));
    return gelu(x, gelu_tanh(x, g.sqrt_two_over_pi, g.cubic), g.half) * u;
  };
  return pack_halves(value(up, gate), value(up >> 16, gate >> 16));
}
#endif

#if defined(IMAGE_FAMILY_TILED_ADD)
// the thread's pair of R at (row, column)
__device__ __forceinline__ float2 residual_pair(const float* r, int row, int column) {
  return *reinterpret_cast<const float2*>(r + static_cast<size_t>(row) * N + column);
}
#endif

// The epilogue, over the thread's pairs of C (`pairs` calls its argument
// with each pair's two values, row and column): R added to every pair, then
// C stored. Every element of R is read before any of C is written, so the
// loads go out together (a store between them would order each load behind
// it, C and R not being known apart); each element of R is read by the
// thread that writes C there, so c may be r itself. (STORED false: R added,
// the pairs left for the caller to store.)
template <bool STORED = true, typename Pairs>
__device__ __forceinline__ void finish(C_ELEMENT* c, Pairs pairs EPILOGUE_PARAMETER) {
#if defined(IMAGE_FAMILY_TILED_ADD)
  pairs([&](float& v0, float& v1, int row, int column) {
    const float2 residual = residual_pair(r, row, column);
    v0 += residual.x;
    v1 += residual.y;
  });
#endif
  if constexpr (STORED) pairs([&](float& v0, float& v1, int row, int column) { store_pair(c, row, column, v0, v1); });
}

// A warpgroup thread's pairs of COUNT n-tiles of its sums d from n-tile
// `first`, as `finish` walks them: visit(the pair's two values, row,
// column) for each, n-tile j's at rows row0 and row0 + 8, columns
// column0 + 8 j and the next
template <int COUNT, int VALUES>
__device__ __forceinline__ auto warpgroup_pairs(float (&d)[VALUES], int first, int row0, int column0) {
  return [&d, first, row0, column0](auto visit) {
#pragma unroll
    for (int j = first; j < first + COUNT; ++j)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row)
        visit(d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1], row0 + 8 * half_row, column0 + 8 * j);
  };
}

// The K groups' sums meet, once every copy has landed and every warp has read
// its last stage (the later groups' go where the rings were); the first group
// adds them in group order. Whether the thread goes on to store them (it is in
// the first group).
template <int VALUES>
__device__ __forceinline__ bool meet_k_groups(float (&values)[VALUES], int group, int thread) {
  extern __shared__ __align__(1024) HALF shared[];
  copy_wait<0>();
  return meet_groups<K_GROUPS, GROUP_THREADS>(values, reinterpret_cast<float*>(shared), group, thread,
                                              add_values<VALUES>);
}

#if __CUDA_ARCH__ >= 900
// Every thread of the cluster's blocks arrives (its shared memory writes
// released) and waits for the others (theirs acquired)
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The cluster's blocks' sums meet, once every copy has landed and every warp
// has read its last stage: the later blocks' values go where their rings
// were (value-major, as the K groups'), and the first block adds them in
// block order. Every block waits until the first has read them all (its
// shared memory must outlive the reads). Whether the thread goes on to store
// them (its block is the first).
template <int VALUES>
__device__ __forceinline__ bool meet_k_blocks(float (&values)[VALUES], int thread) {
  extern __shared__ __align__(1024) HALF shared[];
  float* const partial = reinterpret_cast<float*>(shared);
  copy_wait<0>();
  __syncthreads();
  const unsigned block = blockIdx.z;  // the rank in the cluster (1 x 1 x K_BLOCKS)
  if (block > 0) {
#pragma unroll
    for (int v = 0; v < VALUES; ++v) partial[v * GROUP_THREADS + thread] = values[v];
  }
  cluster_barrier();
  if (block == 0) {
#pragma unroll 1
    for (unsigned other = 1; other < K_BLOCKS; ++other) {
      unsigned remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(partial)), "r"(other));
#pragma unroll
      for (int v = 0; v < VALUES; ++v) {
        float x;
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(x) : "r"(remote + 4u * (v * GROUP_THREADS + thread)));
        values[v] += x;
      }
    }
  }
  cluster_barrier();
  return block == 0;
}

// A warpgroup thread's sums to shared memory, each n-tile's four side by
// side (n-tile-major, then thread: ROW threads to a row of quads), where
// another warpgroup or block adds them to its own (add_quad)
template <int ROW, int VALUES>
__device__ __forceinline__ void leave_quads(float4* to, const float (&values)[VALUES], int thread) {
#pragma unroll
  for (int j = 0; j < VALUES / 4; ++j)
    to[j * ROW + thread] = make_float4(values[4 * j], values[4 * j + 1], values[4 * j + 2], values[4 * j + 3]);
}

// sums[0, 4) += quad
__device__ __forceinline__ void add_quad(float* sums, float4 quad) {
  sums[0] += quad.x;
  sums[1] += quad.y;
  sums[2] += quad.z;
  sums[3] += quad.w;
}

// The cluster's blocks' sums of a tile meet (WGMMA 2): once both
// multiplying warpgroups are done with the ring, each block's values go where
// its ring was, each n-tile's four of a thread side by side (n-tile-major,
// then thread), and each block adds up its share of the n-tiles over the
// cluster's blocks in block order (the same additions whichever block makes
// them): every block's values of the share are loaded before any is added,
// so that the loads across the cluster are in flight together. Every block
// waits until all have read its values (its shared memory must outlive the
// reads); the copying warpgroup arrives at both cluster barriers too.
template <int VALUES>
__device__ __forceinline__ void add_cluster_shares(const float (&values)[VALUES], float (&share)[4 * SHARE_TILES],
                                                   int thread) {
  extern __shared__ __align__(1024) HALF shared[];
  float4* const partial = reinterpret_cast<float4*>(shared);
  asm volatile("bar.sync 1, %0;" ::"n"(GROUP_THREADS) : "memory");
  leave_quads<GROUP_THREADS>(partial, values, thread);
  cluster_barrier();
  const unsigned first = blockIdx.z * SHARE_TILES;  // the share's first n-tile
  float4 x[K_BLOCKS][SHARE_TILES];
#pragma unroll
  for (unsigned block = 0; block < K_BLOCKS; ++block) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(partial)), "r"(block));
#pragma unroll
    for (int j = 0; j < SHARE_TILES; ++j)
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(x[block][j].x), "=f"(x[block][j].y), "=f"(x[block][j].z), "=f"(x[block][j].w)
                   : "r"(remote + 16u * ((first + j) * GROUP_THREADS + thread)));
  }
#pragma unroll
  for (int j = 0; j < SHARE_TILES; ++j) {
    share[4 * j] = x[0][j].x;
    share[4 * j + 1] = x[0][j].y;
    share[4 * j + 2] = x[0][j].z;
    share[4 * j + 3] = x[0][j].w;
#pragma unroll
    for (unsigned block = 1; block < K_BLOCKS; ++block) add_quad(&share[4 * j], x[block][j]);
  }
  cluster_barrier();
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d (64 x N, the warpgroup's) += A (64 x 16) B (16 x N), operands in shared memory
template <int N_TILE>
struct Warpgroup;
template <>
struct Warpgroup<64> {
  __device__ static __forceinline__ void product(float (&d)[32], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16" WGMMA_TYPES " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, %34, %35;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "n"(A_COLUMNS ? 1 : 0), "n"(B_COLUMNS ? 1 : 0));
  }
};
template <>
struct Warpgroup<128> {
  __device__ static __forceinline__ void product(float (&d)[64], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16" WGMMA_TYPES " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, %66, %67;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "n"(A_COLUMNS ? 1 : 0), "n"(B_COLUMNS ? 1 : 0));
  }
};

template <>
struct Warpgroup<256> {
  __device__ static __forceinline__ void product(float (&d)[128], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16" WGMMA_TYPES " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, 1, 1, 1, %130, %131;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(a), "l"(b), "n"(A_COLUMNS ? 1 : 0), "n"(B_COLUMNS ? 1 : 0));
  }
};

// K-major rows of BLOCK_K halves are one 128- or 64-byte swizzle atom
// wide; MN-major operands are 64-wide columns of 128-byte rows
constexpr unsigned ROW_BYTES = BLOCK_K * 2, COLUMN_BYTES = BLOCK_K * 64 * 2;
constexpr unsigned long long K_SWIZZLE = BLOCK_K == 64 ? SWIZZLE_128 : SWIZZLE_64;

// d += rows [64 r, 64 r + 64) of the stage's A times its B (issued, not committed)
__device__ __forceinline__ void issue_products(float (&d)[BLOCK_N / 2], const HALF* stage, int r) {
  const HALF* stage_a = stage + r * 64 * BLOCK_K;
  const HALF* stage_b = stage + OperandA::HALVES;
#pragma unroll
  for (int k = 0; k < BLOCK_K; k += 16) {
    // K-major: 16 k are 32 bytes into the rows; MN-major: 16 rows of 128 bytes down
    const unsigned long long da = A_COLUMNS ? matrix(stage_a + k * 64, COLUMN_BYTES, 8 * 128, SWIZZLE_128)
                                            : matrix(stage_a + k, 16, 8 * ROW_BYTES, K_SWIZZLE);
    const unsigned long long db = B_COLUMNS ? matrix(stage_b + k * 64, COLUMN_BYTES, 8 * 128, SWIZZLE_128)
                                            : matrix(stage_b + k, 16, 8 * ROW_BYTES, K_SWIZZLE);
    Warpgroup<BLOCK_N>::product(d, da, db);
  }
}

// d += the warpgroup's 64 rows of the stage's A times its B, committed as one
// group of products (left in flight)
__device__ __forceinline__ void multiply_stage(float (&d)[BLOCK_N / 2], const HALF* stage, int warpgroup) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  issue_products(d, stage, warpgroup);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// The epilogue of a warpgroup's d (its thread's first row and column), CHUNK
// n-tiles at a time (a chunk's R read before its C is stored); d's elements,
// n-tile j: (row lane / 4, columns 2 (lane % 4) + 0, 1), and 8 rows below
// (A rotary product's `early`: the thread's angles, read before the tile's
// products; else they are read here.)
template <int CHUNK = BLOCK_N / 8, int D_TILES = BLOCK_N / 8>
__device__ __forceinline__ void store_warpgroup(C_ELEMENT* c, float (&d)[4 * D_TILES], int row0, int column0
                                                EPILOGUE_PARAMETER, const Angles* early = nullptr) {
#if defined(IMAGE_FAMILY_TILED_ROPE)
  // each query and key head's n-tiles j < 4 turned with their partners
  // j + 4, then every head's pairs of n-tiles stored in its place
  static_assert(D_TILES == BLOCK_N / 8 && PAIRED == 32, "the whole tile, its heads whole, its columns in order");
  turn_heads(d, column0, early ? *early : angles_of(rope, row0, column0));
#pragma unroll
  for (int j = 0; j < D_TILES; j += 2)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row)
      store_tile_pair_at(head_place(rope, row0 + 8 * half_row, column0 + 8 * j), d[4 * j + 2 * half_row],
                         d[4 * j + 2 * half_row + 1], d[4 * j + 4 + 2 * half_row], d[4 * j + 5 + 2 * half_row]);
#elif defined(IMAGE_FAMILY_TILED_HEADS)
  // each head's n-tiles of each of the thread's rows in pairs: rounded,
  // their share of the row's term summed (n-tile order), stored in the
  // head's place; then the row's term summed over its quad and written.
  // Where the warpgroups take tiles in turn (WGMMA 3) a thread holds two
  // tiles' sums, and the pairs' exchange beside them took more registers
  // than it has (local memory): there each pair goes as a word.
  static_assert(D_TILES == BLOCK_N / 8, "the whole tile, its heads whole");
#pragma unroll
  for (int h = 0; h < BLOCK_N / 64; ++h)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int row = row0 + 8 * half_row, column = column0 + 64 * h;  // the thread's first of the head's columns
      HALF* const at = head_place(by_head, row, column);
      const HALF* const from = by_head.out + static_cast<size_t>(row) * N + column;
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < 8; q += 2) {
        const int e = 4 * (8 * h + q) + 2 * half_row;
        const unsigned first = pack_halves(d[e], d[e + 1]), second = pack_halves(d[e + 4], d[e + 5]);
        sum += pair_term(first, out_word(from + 8 * q));
        sum += pair_term(second, out_word(from + 8 * q + 8));
        if constexpr (ALTERNATING) {
          store_c(reinterpret_cast<unsigned*>(at + 8 * q), first);
          store_c(reinterpret_cast<unsigned*>(at + 8 * q + 8), second);
        } else {
          store_tile_words_at(at + 8 * q, first, second);
        }
      }
      store_row_term(by_head, row, column, quad_sum(sum));
    }
#elif HALF_C
#pragma unroll
  for (int j = 0; j < D_TILES; j += 2)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row)
      store_tile_pair(c, row0 + 8 * half_row, paired_column(column0 + 8 * j), d[4 * j + 2 * half_row],
                      d[4 * j + 2 * half_row + 1], d[4 * j + 4 + 2 * half_row], d[4 * j + 5 + 2 * half_row]);
#if defined(IMAGE_FAMILY_TILED_GATED)
  // the up's n-tiles j, j + 1 beside their gates PAIRED / 8 n-tiles on
  static_assert(D_TILES == BLOCK_N / 8, "the whole tile, its up and gate halves");
  constexpr int G = PAIRED / 8;
  // the activations of the thread's pair at e, from its up's and its gate's words
  const auto activations = [&](int e) {
    return gated_pair(gated, pack_halves(d[e], d[e + 1]), pack_halves(d[e + 4 * G], d[e + 4 * G + 1]));
  };
#pragma unroll
  for (int j = 0; j < G; j += 2)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int e = 4 * j + 2 * half_row;
      const size_t row = row0 + 8 * half_row;
      store_tile_words_at(gated.out + row * (N / 2) + paired_column(column0 + 8 * j), activations(e), activations(e + 4));
    }
#endif
#else
#pragma unroll
  for (int j0 = 0; j0 < D_TILES; j0 += CHUNK) {
    finish(c, warpgroup_pairs<CHUNK>(d, j0, row0, column0) EPILOGUE_ARGUMENT);
  }
#endif
}

// The warpgroups' path. Stage s's products run while the next stage's
// barrier and copies are issued: a stage is refilled only two steps after it
// was read (wgmma.wait_group 1 leaves the latest products in flight), so the
// copies run STAGES - 2 steps ahead.
__device__ __forceinline__ void product_async(C_ELEMENT* c, const HALF* a, const HALF* b EPILOGUE_PARAMETER) {
  static_assert(BLOCK_M % 64 == 0 && GROUP_THREADS == BLOCK_M * 2, "a warpgroup per 64 rows of each K group");
  static_assert(STAGES >= 3, "a stage in flight, one being read and one being filled");
  extern __shared__ __align__(1024) HALF shared[];
  const int group = threadIdx.x / GROUP_THREADS, thread = threadIdx.x % GROUP_THREADS;
  const int warpgroup = thread >> 7, warp = (thread >> 5) & 3, lane = thread & 31;
  const int block_m = blockIdx.y * BLOCK_M, block_n = blockIdx.x * BLOCK_N;
  const int row0 = block_m + warpgroup * 64 + warp * 16 + (lane >> 2), column0 = block_n + 2 * (lane & 3);
  HALF* const ring = shared + group * STAGES * STAGE_HALVES;

  auto copy_step = [&](int step) {
    HALF* stage = ring + (step % STAGES) * STAGE_HALVES;
    OperandA::copy(stage, a, block_m, k_first(group) + step * BLOCK_K, thread);
    OperandB::copy(stage + OperandA::HALVES, b, block_n, k_first(group) + step * BLOCK_K, thread);
  };

  float d[BLOCK_N / 2];
  clear(d);

#pragma unroll
  for (int step = 0; step < STAGES - 2; ++step) {
    if (step < STEPS) copy_step(step);
    copy_commit();
  }

  for (int step = 0; step < STEPS; ++step) {
    // step's copies have landed and are visible to the warpgroups' reads
    // (the async proxy); every warpgroup is done with step - 2's products,
    // whose stage is refilled next
    copy_wait<STAGES - 3>();
    shared_to_async_proxy();
    __syncthreads();
    if (step + STAGES - 2 < STEPS) copy_step(step + STAGES - 2);
    copy_commit();

    multiply_stage(d, ring + (step % STAGES) * STAGE_HALVES, warpgroup);
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");

  if constexpr (K_GROUPS > 1) {
    if (!meet_k_groups(d, group, thread)) return;
  }
  if constexpr (SPLIT > 1) {
    if (!meet_k_blocks(d, thread)) return;
  }

  store_warpgroup(c, d, row0, column0 EPILOGUE_ARGUMENT);
}

#endif

// d += the warp's rows and columns of the stage's A times its B (mma.sync)
// (A_BY_TILE: the warp's 128 sums a thread beside a copying warpgroup, as
// a walk of 256 columns has, leave too few of the block's registers for all
// of a k-step's A fragments too: each m-tile's is loaded as its products
// take it.)
constexpr bool A_BY_TILE = TILES_M * TILES_N * 4 >= 128 && THREADS > 256;

__device__ __forceinline__ void multiply_stage_warps(float (&accumulator)[TILES_M][TILES_N][4], const HALF* stage,
                                                     int warp_m, int warp_n) {
#pragma unroll
  for (int k = 0; k < BLOCK_K; k += 16) {
    unsigned fa[A_BY_TILE ? 1 : TILES_M][4], fb[TILES_N / 2][4];
    auto load_a = [&](int i) { OperandA::a_fragment(fa[A_BY_TILE ? 0 : i], stage, warp_m + 16 * i, k); };
    if constexpr (!A_BY_TILE) {
#pragma unroll
      for (int i = 0; i < TILES_M; ++i) load_a(i);
    }
#pragma unroll
    for (int j = 0; j < TILES_N / 2; ++j) OperandB::b_fragments(fb[j], stage + OperandA::HALVES, warp_n + 16 * j, k);
#pragma unroll
    for (int i = 0; i < TILES_M; ++i) {
      if constexpr (A_BY_TILE) load_a(i);
#pragma unroll
      for (int j = 0; j < TILES_N; ++j)
        mma_16816(accumulator[i][j], fa[A_BY_TILE ? 0 : i], fb[j / 2][(j & 1) * 2], fb[j / 2][(j & 1) * 2 + 1]);
    }
  }
}

// Each even n-tile of a warp's accumulator beside the next, its partner
// (PAIRED 8: an up's gate, a head's columns i + 32 beside its columns i):
// visit(the n-tile's four, the partner's four, row, C's column, e) for each
// half row, the pair's elements e and e + 1
template <typename Visit>
__device__ __forceinline__ void paired_n_tiles(float (&accumulator)[TILES_M][TILES_N][4], int row0, int column0,
                                               Visit visit) {
#pragma unroll
  for (int i = 0; i < TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < TILES_N; j += 2)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row)
        visit(accumulator[i][j], accumulator[i][j + 1], row0 + 16 * i + 8 * half_row,
              paired_column(column0 + 8 * j), 2 * half_row);
}

#if defined(IMAGE_FAMILY_TILED_HEADS)
// A warp's columns hold whole heads (WARP_N a multiple of 64) or a part of
// one head's 64 columns, the other parts the next warps' along N
constexpr int HEAD_PARTS = WARP_N < 64 ? 64 / WARP_N : 1;  // the warps holding a head's row
constexpr int HEAD_TILES = WARP_N < 64 ? TILES_N : 8;      // a warp's n-tiles of each head it holds
constexpr int WARP_HEADS = TILES_N / HEAD_TILES;           // the heads (or part of one) it holds

// Where the warps' shares of a head's row terms meet, a word for each row
// of the tile and warp along N (the manifest's _row_sums_shared): where the
// block walks tiles (WGMMA 2, 3), past the ring, its mbarriers and the K
// groups' sums, as the copying warpgroup goes on filling the ring; else
// the ring, which the block is done with. What the manifest gives
// (IMAGE_SHARED_BYTES) holds them.
constexpr int row_sums_offset() { return WGMMA >= 2 ? ring_bytes() + later_sums_bytes() : 0; }
static_assert(HEAD_PARTS == 1 || row_sums_offset() + WARPS_N * BLOCK_M * 4 <= IMAGE_SHARED_BYTES,
              "the manifest gives the row sums their bytes");

__device__ __forceinline__ float* row_sums() {
  extern __shared__ __align__(1024) HALF shared[];
  return reinterpret_cast<float*>(reinterpret_cast<char*>(shared) + row_sums_offset());
}

// The warps' epilogue of a heads product (`store_warps`): each row's
// n-tiles of each head the warp holds rounded, their share of the row's
// term summed (n-tile order) and stored in the head's place; then the
// row's term summed over its quad and, where a head's columns span
// HEAD_PARTS warps, over those warps in order through shared memory (every
// thread of the group takes part in its barriers: the first K group alone,
// the others have left).
__device__ __forceinline__ void store_warps_by_head(float (&accumulator)[TILES_M][TILES_N][4], int row0, int column0,
                                                    const ByHead& by_head) {
  float sums[TILES_M][WARP_HEADS][2];
#pragma unroll
  for (int i = 0; i < TILES_M; ++i)
#pragma unroll
    for (int g = 0; g < WARP_HEADS; ++g)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        // the thread's row, and its first of the head's columns
        const int row = row0 + 16 * i + 8 * half_row, column = column0 + 64 * g;
        HALF* const at = head_place(by_head, row, column);
        const HALF* const from = by_head.out + static_cast<size_t>(row) * N + column;
        float sum = 0.0f;
#pragma unroll
        for (int q = 0; q < HEAD_TILES; ++q) {
          const float(&pair)[4] = accumulator[i][HEAD_TILES * g + q];
          const unsigned word = pack_halves(pair[2 * half_row], pair[2 * half_row + 1]);
          sum += pair_term(word, out_word(from + 8 * q));
          store_c(reinterpret_cast<unsigned*>(at + 8 * q), word);
        }
        sums[i][g][half_row] = quad_sum(sum);
      }
  if constexpr (HEAD_PARTS == 1) {
#pragma unroll
    for (int i = 0; i < TILES_M; ++i)
#pragma unroll
      for (int g = 0; g < WARP_HEADS; ++g)
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row)
          store_row_term(by_head, row0 + 16 * i + 8 * half_row, column0 + 64 * g, sums[i][g][half_row]);
  } else {
    float* const partial = row_sums();  // [warp along N][row of the tile]
    const int part = column0 % BLOCK_N / WARP_N;  // the warp's place along N
    const bool first_lane = (threadIdx.x & 3) == 0;
    // every warp of the group is done with these bytes (the ring's last
    // stage, the K groups' sums, the last tile's row terms)
    asm volatile("bar.sync 1, %0;" ::"n"(GROUP_THREADS) : "memory");
    if (first_lane) {
#pragma unroll
      for (int i = 0; i < TILES_M; ++i)
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row)
          partial[part * BLOCK_M + (row0 + 16 * i + 8 * half_row) % BLOCK_M] = sums[i][0][half_row];
    }
    asm volatile("bar.sync 1, %0;" ::"n"(GROUP_THREADS) : "memory");
    if (first_lane && part % HEAD_PARTS == 0) {  // the head's first warp adds the others' in warp order
#pragma unroll
      for (int i = 0; i < TILES_M; ++i)
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row) {
          const int row = row0 + 16 * i + 8 * half_row;
          float term = sums[i][0][half_row];
#pragma unroll
          for (int p = 1; p < HEAD_PARTS; ++p) term += partial[(part + p) * BLOCK_M + row % BLOCK_M];
          by_head.row_terms[head_row(row, column0)] = term;
        }
    }
  }
}
#endif

// The epilogue of a warp's accumulator (its thread's first row and column);
// its elements: (row lane / 4, columns 2 (lane % 4) + 0, 1), and 8 rows below
__device__ __forceinline__ void store_warps(C_ELEMENT* c, float (&accumulator)[TILES_M][TILES_N][4], int row0,
                                           int column0 EPILOGUE_PARAMETER) {
#if defined(IMAGE_FAMILY_TILED_GATED)
  // each even n-tile the up's, the next its gate's
  paired_n_tiles(accumulator, row0, column0, [&](float(&u)[4], float(&x)[4], int row, int column, int e) {
    store_pair(c, row, column, u[e], u[e + 1]);
    store_pair(c, row, column + N / 2, x[e], x[e + 1]);
    store_c(reinterpret_cast<unsigned*>(gated.out + static_cast<size_t>(row) * (N / 2) + column),
            gated_pair(gated, pack_halves(u[e], u[e + 1]), pack_halves(x[e], x[e + 1])));
  });
#elif defined(IMAGE_FAMILY_TILED_ROPE)
  // each even n-tile a head's columns i, the next their partners i + 32,
  // turned where the head is a query's or a key's
  paired_n_tiles(accumulator, row0, column0, [&](float(&x)[4], float(&y)[4], int row, int column, int e) {
    if (column < ROTATED) {
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        const int at = (column % 64 + f) * SEQ + row % SEQ;
        turn(x[e + f], y[e + f], rope.cosine[at], rope.sine[at]);
      }
    }
    store_c(reinterpret_cast<unsigned*>(head_place(rope, row, column)), pack_halves(x[e], x[e + 1]));
    store_c(reinterpret_cast<unsigned*>(head_place(rope, row, column + 32)), pack_halves(y[e], y[e + 1]));
  });
#elif defined(IMAGE_FAMILY_TILED_HEADS)
  store_warps_by_head(accumulator, row0, column0, by_head);
#else
  finish(c, [&](auto visit) {
#pragma unroll
    for (int i = 0; i < TILES_M; ++i)
#pragma unroll
      for (int j = 0; j < TILES_N; ++j)
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row)
          visit(accumulator[i][j][2 * half_row], accumulator[i][j][2 * half_row + 1], row0 + 16 * i + 8 * half_row,
                column0 + 8 * j);
  } EPILOGUE_ARGUMENT);
#endif
}

// The warps' path (mma.sync), on every card.
__device__ __forceinline__ void product_sync(C_ELEMENT* c, const HALF* a, const HALF* b EPILOGUE_PARAMETER) {
  extern __shared__ __align__(1024) HALF shared[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = warp / (WARPS_M * WARPS_N), group_warp = warp % (WARPS_M * WARPS_N);
  const int thread = threadIdx.x % GROUP_THREADS;
  const int block_m = blockIdx.y * BLOCK_M, block_n = blockIdx.x * BLOCK_N;
  const int warp_m = (group_warp / WARPS_N) * WARP_M, warp_n = (group_warp % WARPS_N) * WARP_N;
  HALF* const ring = shared + group * STAGES * STAGE_HALVES;

  auto copy_step = [&](int step) {
    HALF* stage = ring + (step % STAGES) * STAGE_HALVES;
    OperandA::copy(stage, a, block_m, k_first(group) + step * BLOCK_K, thread);
    OperandB::copy(stage + OperandA::HALVES, b, block_n, k_first(group) + step * BLOCK_K, thread);
  };

  float accumulator[TILES_M][TILES_N][4];
  clear(accumulator);

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
    multiply_stage_warps(accumulator, ring + (step % STAGES) * STAGE_HALVES, warp_m, warp_n);
  }

  if constexpr (K_GROUPS > 1) {
    // the accumulator's [i][j][e] is value (i TILES_N + j) 4 + e
    if (!meet_k_groups(reinterpret_cast<float(&)[TILES_M * TILES_N * 4]>(accumulator), group, thread)) return;
  }
#if __CUDA_ARCH__ >= 900
  if constexpr (SPLIT > 1) {
    if (!meet_k_blocks(reinterpret_cast<float(&)[TILES_M * TILES_N * 4]>(accumulator), thread)) return;
  }
#endif
  store_warps(c, accumulator, block_m + warp_m + (lane >> 2), block_n + warp_n + 2 * (lane & 3) EPILOGUE_ARGUMENT);
}

// The copying warpgroup's walk: fill(stage, its full mbarrier, block_m,
// block_n, k0) brings a step's operands; a stage is refilled once the
// multiplying warps have released it.
template <typename Fill>
__device__ __forceinline__ void copy_tiles(unsigned long long* full, unsigned long long* empty, Fill fill) {
  extern __shared__ __align__(1024) HALF shared[];
  int it = 0;  // the steps walked so far, over every tile
  for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
    const int block_m = tile / TILES_ALONG_N * BLOCK_M, block_n = tile % TILES_ALONG_N * BLOCK_N;
    for (int step = 0; step < TILE_STEPS; ++step, ++it) {
      const int s = it % STAGES;
      if (it >= STAGES) barrier_wait(&empty[s], (it / STAGES - 1) & 1);
      fill(shared + s * STAGE_HALVES, &full[s], block_m, block_n, k_first(0) + step * BLOCK_K);
    }
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One operand's stage by bulk tensor copies (128-byte swizzled, as `place`
// lays it out): K contiguous, one box of BLOCK_K x EXTENT; K strided, a box
// of 64 x BLOCK_K per 64-wide column.
template <bool K_STRIDED, int EXTENT>
__device__ __forceinline__ void tensor_copy(HALF* stage, const TensorMap* map, int row0, int k0,
                                            unsigned long long* full) {
#pragma unroll
  for (int i = 0; i < (K_STRIDED ? EXTENT / 64 : 1); ++i) {
    const int x = K_STRIDED ? row0 + 64 * i : k0, y = K_STRIDED ? k0 : row0;
    if constexpr (STREAMED_C) {  // the operands stay in L2 while C streams past
      unsigned long long policy;
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
          " [%0], [%1, {%2, %3}], [%4], %5;"
          ::"r"(shared_address(stage + i * BLOCK_K * 64)), "l"(map), "r"(x), "r"(y), "r"(shared_address(full)),
          "l"(policy)
          : "memory");
    } else {
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
          ::"r"(shared_address(stage + i * BLOCK_K * 64)), "l"(map), "r"(x), "r"(y), "r"(shared_address(full))
          : "memory");
    }
  }
}

#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The ring's step `it`'s stage, once its copies have landed, for the
// warpgroup products: cp.async's writes (the generic proxy), seen here
// through the mbarrier, made visible to the products' reads (the async
// proxy); tensor copies write through the async proxy the products read
// through, so their stages need no fence
__device__ __forceinline__ const HALF* await_stage(unsigned long long* full, int it) {
  extern __shared__ __align__(1024) HALF shared[];
  const int s = it % STAGES;
  barrier_wait(&full[s], (it / STAGES) & 1);
  if constexpr (!TENSOR_COPIES) shared_to_async_proxy();
  return shared + s * STAGE_HALVES;
}

// d += the products of the ring's step `it` (its stage's `rows`: the
// warpgroup's 64), issued once the step's copies have landed; every product
// issued before them is done on return (the latest stay in flight)
__device__ __forceinline__ void multiply_step(float (&d)[BLOCK_N / 2], unsigned long long* full, int it, int rows) {
  multiply_stage(d, await_stage(full, it), rows);
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}

// Whether this is the thread elect.sync chooses among its warp's (every
// lane taking part)
__device__ __forceinline__ bool elect_one() {
  unsigned elected;
  asm volatile("{\n\t.reg .pred p;\n\telect.sync _|p, 0xffffffff;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(elected));
  return elected != 0;
}

// Warpgroup WARPGROUP's slab of C, past the ring and its mbarriers, as
// words of 4 bytes (binary32 elements, or pairs of halves)
template <int WARPGROUP, typename Word = float>
__device__ __forceinline__ Word* slab_of() {
  static_assert(sizeof(Word) == 4, "a slab of SLAB_WORDS words");
  extern __shared__ __align__(1024) HALF shared[];
  return reinterpret_cast<Word*>(reinterpret_cast<char*>(shared) + SLAB_OFFSET) + WARPGROUP * SLAB_WORDS;
}

// Word `word` of 16-byte chunk `chunk` in row `row` of box `box` of a slab:
// a box's rows are 128 bytes, their chunks swizzled by the row as the
// tensor copies' 128-byte swizzle lays them out (so that a warp's words
// take each bank as few times as they can)
template <typename Word>
__device__ __forceinline__ Word* swizzled(Word* slab, int box, int row, int chunk, int word) {
  return &slab[box * BOX_WORDS + row * 32 + ((chunk ^ (row & 7)) << 2) + word];
}

// A warpgroup index as a compile-time constant (its slab and named barrier
// are constants in the code each takes)
template <int V>
struct WarpgroupIs {
  enum : int { value = V };  // (no storage: a static member took a global in the cubin)
};

// visit(WarpgroupIs<w>, the first row of its 64) for warpgroup w of a tile
// whose first row is block_m (a tile of 64 rows has one)
template <typename Visit>
__device__ __forceinline__ void by_warpgroup(int warpgroup, int block_m, Visit visit) {
  if (BLOCK_M == 64 || warpgroup == 0) {
    visit(WarpgroupIs<0>{}, block_m);
  } else {
    visit(WarpgroupIs<1>{}, block_m + 64);
  }
}

// A warpgroup's slab free for its threads' writes: the tensor copies that
// stored it last have read it (waited on by the whole of the first warp,
// whose elected thread issued them), and every thread has seen that
template <int WARPGROUP>
__device__ __forceinline__ void slab_free() {
  if (((threadIdx.x >> 5) & 3) == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"n"(4 + WARPGROUP) : "memory");
}

// A warpgroup's slab written: its threads' writes made visible to the
// tensor copies (the async proxy), every thread's done
template <int WARPGROUP>
__device__ __forceinline__ void slab_written() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"n"(4 + WARPGROUP) : "memory");
}

// The L2 policy of C's stores by tensor copies: a streamed C leaves L2
// first (STREAMED_C)
__device__ __forceinline__ unsigned long long c_store_policy() {
  unsigned long long policy;
  if constexpr (STREAMED_C) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  }
  return policy;
}

// A box of a warpgroup's slab stored by a tensor copy through `map` at
// (column, row) of its tensor, in the thread's bulk group (its caller
// commits the group)
__device__ __forceinline__ void store_box(const TensorMap* map, int column, int row, const void* box,
                                          unsigned long long policy) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%1, %2}], [%3], %4;"
               ::"l"(map), "r"(column), "r"(row), "r"(shared_address(box)), "l"(policy)
               : "memory");
}

#if HALF_C
// The warpgroup's 64 rows of a tile's sums (d), rounded to the half format,
// written into its slab as boxes of 64 halves (128 bytes) by 64 rows, a
// row's 16-byte chunks swizzled by the row (128-byte swizzle), a thread's
// pairs a word each: box b holds n-tiles 8 b .. 8 b + 7 (a rotary
// product's head b)
__device__ __forceinline__ void stage_halves(unsigned* slab, const float (&d)[BLOCK_N / 2]) {
  const int thread = threadIdx.x & 127, warp = thread >> 5, lane = thread & 31;
#pragma unroll
  for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int row = warp * 16 + (lane >> 2) + 8 * half_row;
      *swizzled(slab, j / 8, row, j % 8, lane & 3) = pack_halves(d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1]);
    }
}
#endif

// Warpgroup WARPGROUP's 64 rows of a tile's C (d: the thread's sums,
// n-tile j at rows lane / 4 and 8 below, columns 2 (lane % 4) + 0, 1; row0,
// column0: C's first row and column of them) through its slab
// (TENSOR_STORE): the slab is written as the boxes lay it out, a box per
// 128 bytes of a row (32 binary32 columns, or 64 halves: stage_halves), its
// 16-byte chunks swizzled by the row (so that a warp's pairs take each bank
// twice, as few as 256 bytes can), then one thread has the tensor memory
// accelerator store the boxes and goes on without waiting: only the next
// store into the slab waits for the copies to have read it.
template <int WARPGROUP>
__device__ __forceinline__ void store_staged(const float (&d)[BLOCK_N / 2], int row0, int column0,
                                             const TensorMap* map_c, unsigned long long* r_full = nullptr,
                                             unsigned r_parity = 0) {
  const int warp = (threadIdx.x >> 5) & 3;
  float* const slab = slab_of<WARPGROUP>();
  // (STAGED_R: R's copies into the slab waited for it to be free,
  // load_staged_r; their landing is waited on here, and R's elements are
  // added where they lie)
  slab_free<WARPGROUP>();
  if constexpr (STAGED_R) barrier_wait(r_full, r_parity);
#if HALF_C
  stage_halves(slab_of<WARPGROUP, unsigned>(), d);
#else
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int row = warp * 16 + (lane >> 2) + 8 * half_row, column = 8 * j + 2 * (lane & 3);
      float* const at = swizzled(slab, column / BOX_COLUMNS, row, column % BOX_COLUMNS / 4, column % 4);
      float2 v = make_float2(d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1]);
      if constexpr (STAGED_R) {
        const float2 residual = *reinterpret_cast<const float2*>(at);
        v.x += residual.x;
        v.y += residual.y;
      }
      *reinterpret_cast<float2*>(at) = v;
    }
#endif
  slab_written<WARPGROUP>();
  // one thread of the first warp, elected (so the compiler takes the copies'
  // coordinates as the one thread's: they are the warpgroup's alike, which
  // it cannot tell, and took them apart lane by lane where one thread of
  // the warpgroup was chosen by its index)
  if (warp == 0 && elect_one()) {
    const unsigned long long policy = c_store_policy();
#pragma unroll
    for (int box = 0; box < BLOCK_N / BOX_COLUMNS; ++box)
      store_box(map_c, column0 + box * BOX_COLUMNS, row0, slab + box * BOX_WORDS, policy);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
}

// R's rows of the warpgroup's slab (STAGED_R) brought by tensor copies, as
// C's boxes lie there, onto its mbarrier r_full, once the slab's last
// stores have read it (waited on by the first warp, whose elected thread
// issued those stores and issues these copies)
template <int WARPGROUP>
__device__ __forceinline__ void load_staged_r(int row0, int column0, const TensorMap* map_r,
                                              unsigned long long* r_full) {
  float* const slab = slab_of<WARPGROUP>();
  if (((threadIdx.x >> 5) & 3) != 0) return;
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  if (!elect_one()) return;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(r_full)),
               "n"(SLAB_WORDS * 4)
               : "memory");
#pragma unroll
  for (int box = 0; box < BLOCK_N / BOX_COLUMNS; ++box)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(shared_address(slab + box * BOX_WORDS)), "l"(map_r), "r"(column0 + box * BOX_COLUMNS),
        "r"(row0), "r"(shared_address(r_full))
        : "memory");
}

#if defined(IMAGE_FAMILY_TILED_GATED)
// A gated product's staged stores (TENSOR_STORE): the warpgroup's 64 rows
// of a tile's up half of C, its gate half and their activation go through
// its slab as three boxes of 64 halves (128 bytes) by 64 rows, 128-byte
// swizzled (a row's 16-byte chunks by the row), a thread's pairs of halves
// a word each; then one thread has the tensor memory accelerator store
// them, C's halves at the up's and the gate's columns, the activation at
// the up's in its own rows, and goes on. A tile of 256 columns (halves of
// 128) goes in two passes of 64 columns a half, the second waiting for the
// first's copies to have read the slab: a slab of each half's whole width
// beside the ring left too few stages. As store_staged, the slab is written
// once its last stores have read it.
template <int WARPGROUP>
__device__ __forceinline__ void store_staged_gated(const float (&d)[BLOCK_N / 2], int row0, int column0,
                                                   const TensorMap* map_c, const TensorMap* map_gated,
                                                   const Gated& gated) {
  static_assert(PAIRED % 64 == 0, "each half of the tile whole boxes of 64 columns");
  const int thread = threadIdx.x & 127, warp = thread >> 5, lane = thread & 31;
  unsigned* const slab = slab_of<WARPGROUP, unsigned>();
  // box b's word of a thread's pair in n-tile j of the pass (of its half) at half_row
  auto at = [&](int b, int j, int half_row) {
    const int row = warp * 16 + (lane >> 2) + 8 * half_row;
    return swizzled(slab, b, row, j, lane & 3);
  };
  constexpr int G = PAIRED / 8;
#pragma unroll
  for (int pass = 0; pass < PAIRED / 64; ++pass) {
    slab_free<WARPGROUP>();
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        const int e = 4 * (8 * pass + j) + 2 * half_row, f = e + 4 * G;  // the up's pair, and its gate's
        const unsigned up = pack_halves(d[e], d[e + 1]), gate = pack_halves(d[f], d[f + 1]);
        *at(0, j, half_row) = up;
        *at(1, j, half_row) = gate;
        *at(2, j, half_row) = gated_pair(gated, up, gate);
      }
    slab_written<WARPGROUP>();
    if (warp == 0 && elect_one()) {
      const unsigned long long policy = c_store_policy();
      const int up = column0 / 2 + 64 * pass;  // the up's first column of the pass (paired)
      const TensorMap* const maps[3] = {map_c, map_c, map_gated};
      const int columns[3] = {up, N / 2 + up, up};
#pragma unroll
      for (int b = 0; b < 3; ++b) store_box(maps[b], columns[b], row0, slab + b * BOX_WORDS, policy);
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
}
#endif

#if defined(IMAGE_FAMILY_TILED_ROPE)
// A rotary product's staged stores (TENSOR_STORE): the warpgroup's 64 rows
// of each head of the tile, the queries and keys turned, go through its
// slab as a box of 64 halves (128 bytes) by 64 rows, 128-byte swizzled (a
// row's 16-byte chunks by the row), a thread's pairs of halves a word each;
// then one thread has the tensor memory accelerator store each box into
// its head's plane, whose rows [batch][head][seq] hold the slab's 64 rows
// (of one sequence) one after the other, and goes on. As store_staged, the
// slab is written once its last stores have read it.
// (row0, column0: the warpgroup's first row and the tile's first column;
// angles: the thread's, at its rows.)
template <int WARPGROUP>
__device__ __forceinline__ void store_staged_heads(float (&d)[BLOCK_N / 2], int row0, int column0, const Rope& rope,
                                                   const Angles& angles) {
  static_assert(SEQ % SLAB_ROWS == 0, "a slab's rows in one sequence");
  const int warp = (threadIdx.x >> 5) & 3;
  unsigned* const slab = slab_of<WARPGROUP, unsigned>();
  turn_heads(d, column0, angles);
  slab_free<WARPGROUP>();
  stage_halves(slab, d);  // a head a box
  slab_written<WARPGROUP>();
  if (warp == 0 && elect_one()) {
    const unsigned long long policy = c_store_policy();
    const int b = row0 / SEQ, s = row0 % SEQ;
#pragma unroll
    for (int h = 0; h < BLOCK_N / 64; ++h) {
      const int head = column0 / 64 + h, plane = head < HEADS ? 0 : head < HEADS + KV_HEADS ? 1 : 2;
      const int heads = plane == 0 ? HEADS : KV_HEADS, index = plane == 0 ? head : (head - HEADS) % KV_HEADS;
      // (chosen, not indexed: indexed by a register, the maps took local memory)
      const TensorMap* const map = plane == 0 ? rope.maps[0] : plane == 1 ? rope.maps[1] : rope.maps[2];
      store_box(map, 0, (b * heads + index) * SEQ + s, slab + h * BOX_WORDS, policy);
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
}
#endif

// The end of a warpgroup's walk with TENSOR_STORE: its last stores have
// written C (and read the slab, which outlives the block no longer); the
// first warp waits, its elected thread among them
__device__ __forceinline__ void finish_stores() {
  if (STAGED_C && ((threadIdx.x >> 5) & 3) == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

#if defined(IMAGE_FAMILY_TILED_ADD)
// the n-tiles of a walking tile's R each thread reads before the tile's products
constexpr int EARLY_R = HANDS_REGISTERS ? BLOCK_N / 16 : BLOCK_N / 8;
#endif

// The multiplying warpgroups' walk over the same tiles and stages: a stage
// is read once its copies have landed and released once the products that
// read it are done (the latest products stay in flight meanwhile).
__device__ __forceinline__ void multiply_tiles(C_ELEMENT* c, unsigned long long* full, unsigned long long* empty,
                                               const TensorMap* map_c, const TensorMap* map_x EPILOGUE_PARAMETER) {
  // (map_x: R's where STAGED_R, the gated activation's where a gated C is staged)
  const int warpgroup = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  unsigned long long* const r_full = empty + STAGES;  // STAGED_R: each warpgroup's R landed in its slab
  int it = 0;
  for (int tile = blockIdx.x, walked = 0; tile < TILES; tile += gridDim.x, ++walked) {
    const int block_m = tile / TILES_ALONG_N * BLOCK_M, block_n = tile % TILES_ALONG_N * BLOCK_N;
    const int row0 = block_m + warpgroup * 64 + warp * 16 + (lane >> 2), column0 = block_n + 2 * (lane & 3);
#if defined(IMAGE_FAMILY_TILED_ROPE)
    const Angles angles = angles_of(rope, row0, column0);
#endif
#if defined(IMAGE_FAMILY_TILED_ADD)
    // the thread's R, read before the tile's products so that the loads land
    // while they run (each element by the thread that stores C there: c may
    // be r); of a tile of 256 columns, the first half's: its sums and all of
    // R do not fit the registers
    float2 residual[EARLY_R][2];
#pragma unroll
    for (int j = 0; j < EARLY_R; ++j)
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row)
        if constexpr (!SHARED_SUMS && !STAGED_R)  // else each block's share of R is read as it is stored, or
                                                  // R comes through the slab
          residual[j][half_row] = residual_pair(r, row0 + 8 * half_row, column0 + 8 * j);
#endif
    float d[BLOCK_N / 2];
    clear(d);
    for (int step = 0; step < STEPS; ++step, ++it) {
      multiply_step(d, full, it, warpgroup);
      if (step > 0 && lane == 0) barrier_arrive(&empty[(it - 1) % STAGES]);
      // R's copies issued once the tile's first products are in flight
      if (STAGED_R && step == 0)
        by_warpgroup(warpgroup, block_m, [&](auto w, int first_row) {
          load_staged_r<decltype(w)::value>(first_row, block_n, map_x, r_full + decltype(w)::value);
        });
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (lane == 0) barrier_arrive(&empty[(it - 1) % STAGES]);
    if constexpr (SHARED_SUMS) {  // a block per tile: the walk ends here
      float share[4 * SHARE_TILES];
      add_cluster_shares(d, share, threadIdx.x);
      store_warpgroup<SHARE_TILES, SHARE_TILES>(c, share, row0, column0 + 8 * SHARE_TILES * blockIdx.z
                                                EPILOGUE_ARGUMENT);
      return;
    }
#if defined(IMAGE_FAMILY_TILED_ADD)
    // (the walk of WGMMA 2 stages a residual product's C only where it stages R too: STAGED_R)
    if constexpr (STAGED_R) {
      const unsigned parity = walked & 1;
      by_warpgroup(warpgroup, block_m, [&](auto w, int first_row) {
        store_staged<decltype(w)::value>(d, first_row, block_n, map_c, r_full + decltype(w)::value, parity);
      });
    } else {
#pragma unroll
      for (int j = 0; j < EARLY_R; ++j)
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row)
          store_pair(c, row0 + 8 * half_row, column0 + 8 * j, d[4 * j + 2 * half_row] + residual[j][half_row].x,
                     d[4 * j + 2 * half_row + 1] + residual[j][half_row].y);
      if constexpr (EARLY_R < BLOCK_N / 8) {  // the rest of R, read together once the first half is stored
        finish(c, warpgroup_pairs<BLOCK_N / 8 - EARLY_R>(d, EARLY_R, row0, column0) EPILOGUE_ARGUMENT);
      }
    }
#elif defined(IMAGE_FAMILY_TILED_ROPE)
    if constexpr (STAGED_C) {
      by_warpgroup(warpgroup, block_m, [&](auto w, int first_row) {
        store_staged_heads<decltype(w)::value>(d, first_row, block_n, rope, angles);
      });
    } else {
      store_warpgroup(c, d, row0, column0, rope, &angles);
    }
#elif defined(IMAGE_FAMILY_TILED_GATED)
    if constexpr (STAGED_C) {
      by_warpgroup(warpgroup, block_m, [&](auto w, int first_row) {
        store_staged_gated<decltype(w)::value>(d, first_row, block_n, map_c, map_x, gated);
      });
    } else {
      store_warpgroup(c, d, row0, column0 EPILOGUE_ARGUMENT);
    }
#else
    if constexpr (STAGED_C) {
      by_warpgroup(warpgroup, block_m, [&](auto w, int first_row) {
        store_staged<decltype(w)::value>(d, first_row, block_n, map_c);
      });
    } else {
      store_warpgroup(c, d, row0, column0 EPILOGUE_ARGUMENT);
    }
#endif
  }
  finish_stores();
}
// WGMMA 3: each multiplying warpgroup takes every other tile of the block's
// walk whole (all BLOCK_M rows), so one stores its tile while the other's
// products run. A warpgroup starts a tile's waits on the ring only once the
// other has passed all of its waits for the tile before (named barriers 2
// and 3): a stage's mbarrier phase then never runs more than one ahead of
// its waiter, which is all a parity can tell apart.
// A gated product's C and activation go through the warpgroup's slab as
// tile 59's do, a 64-row half of the tile after the other: stored from the
// registers, two tiles' sums and the activation took local memory. Over a
// share at 8 x 1024 (rr-m4096-n2816-k512-gated, on the H200) tile 60 took
// 25.0 us alone against 59's 28.8, where the walk of WGMMA 2 leaves the
// tensor pipe idle while both warpgroups make the activation.
// (With TENSOR_STORE each warpgroup's walk is its own code, WARPGROUP, so
// that its slab and named barrier are constants: with one code for both,
// the warpgroup from the thread's index, rr-m1024-n12288-k512 took 32.9 us
// with tile 62 against 28.6 with tile 60 on the H200, where with this code
// the two take alike, 27.4.)
template <int WARPGROUP = -1>
__device__ __forceinline__ void multiply_tiles_alternating(C_ELEMENT* c, unsigned long long* full,
                                                           unsigned long long* empty, const TensorMap* map_c,
                                                           const TensorMap* map_x EPILOGUE_PARAMETER) {
  const int warpgroup = WARPGROUP >= 0 ? WARPGROUP : threadIdx.x >> 7;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  constexpr int HALVES = BLOCK_M / 64;
  for (int j = warpgroup; blockIdx.x + j * gridDim.x < TILES; j += 2) {  // the block's j-th tile
    const int tile = blockIdx.x + j * gridDim.x;
    const int block_m = tile / TILES_ALONG_N * BLOCK_M, block_n = tile % TILES_ALONG_N * BLOCK_N;
    float d[HALVES][BLOCK_N / 2];
    clear(d);
    if (j > 0) asm volatile("bar.sync %0, 256;" ::"r"(2 + warpgroup) : "memory");
    for (int step = 0; step < STEPS; ++step) {
      const int it = j * STEPS + step;
      const HALF* const stage = await_stage(full, it);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int h = 0; h < HALVES; ++h) issue_products(d[h], stage, h);
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      if (step > 0 && lane == 0) barrier_arrive(&empty[(it - 1) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (lane == 0) barrier_arrive(&empty[(j * STEPS + STEPS - 1) % STAGES]);
    if (blockIdx.x + (j + 1) * gridDim.x < TILES) asm volatile("bar.arrive %0, 256;" ::"r"(3 - warpgroup) : "memory");
    // with a residual, one n-tile's R at a time: the whole tile's sums and
    // more of R do not fit the registers
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      const int row = block_m + h * 64 + warp * 16 + (lane >> 2), column = block_n + 2 * (lane & 3);
      if constexpr (STAGED_C) {
#if defined(IMAGE_FAMILY_TILED_ADD)
        finish<false>(c, warpgroup_pairs<BLOCK_N / 8>(d[h], 0, row, column) EPILOGUE_ARGUMENT);
#endif
#if defined(IMAGE_FAMILY_TILED_GATED)
        store_staged_gated<WARPGROUP < 0 ? 0 : WARPGROUP>(d[h], block_m + h * 64, block_n, map_c, map_x, gated);
#elif defined(IMAGE_FAMILY_TILED_ROPE)
        store_staged_heads<WARPGROUP < 0 ? 0 : WARPGROUP>(d[h], block_m + h * 64, block_n, rope,
                                                          angles_of(rope, row, column));
#else
        store_staged<WARPGROUP < 0 ? 0 : WARPGROUP>(d[h], block_m + h * 64, block_n, map_c);
#endif
      } else {
        store_warpgroup<RESIDUAL ? 1 : BLOCK_N / 8>(c, d[h], row, column EPILOGUE_ARGUMENT);
      }
    }
  }
  finish_stores();
}
// WGMMA 2 with K groups: each multiplying warpgroup multiplies all 64 rows
// of the tile over every other step, on the one ring. With STAGES and a
// tile's steps even, each stage is only ever read by one warpgroup, so its
// mbarriers' phases follow one reader, as with one warpgroup. The second's
// sums go beside the ring (after the mbarriers) once its products are done;
// the first waits for them (named barrier 2), adds them to its own (the same
// order every run) and stores the tile; the second writes the next tile's
// sums only once the first has read these (named barrier 3).
__device__ __forceinline__ void multiply_tiles_in_turns(C_ELEMENT* c, unsigned long long* full,
                                                        unsigned long long* empty EPILOGUE_PARAMETER) {
  static_assert(!IN_TURNS || (K_GROUPS == 2 && STAGES % 2 == 0 && TILE_STEPS % 2 == 0 && BLOCK_M == 64),
                "two warpgroups over a tile of 64 rows, each stage read by one of them");
  float4* const theirs = reinterpret_cast<float4*>(empty + STAGES);  // n-tile-major, then thread
  const int group = threadIdx.x >> 7, thread = threadIdx.x & 127, warp = thread >> 5, lane = threadIdx.x & 31;
  int base = 0;  // the ring's steps walked before the tile
  for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, base += TILE_STEPS) {
    const int block_m = tile / TILES_ALONG_N * BLOCK_M, block_n = tile % TILES_ALONG_N * BLOCK_N;
    float d[BLOCK_N / 2];
    clear(d);
    for (int step = group; step < TILE_STEPS; step += 2) {
      const int it = base + step;
      multiply_step(d, full, it, 0);
      if (step >= 2 && lane == 0) barrier_arrive(&empty[(it - 2) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (lane == 0) barrier_arrive(&empty[(base + TILE_STEPS - 2 + group) % STAGES]);
    if (group == 1) {
      if (base > 0) asm volatile("bar.sync 3, 256;" ::: "memory");
      leave_quads<WARPGROUP_THREADS>(theirs, d, thread);
      asm volatile("bar.arrive 2, 256;" ::: "memory");
      continue;
    }
    asm volatile("bar.sync 2, 256;" ::: "memory");
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) add_quad(&d[4 * j], theirs[j * WARPGROUP_THREADS + thread]);
    if (tile + gridDim.x < TILES) asm volatile("bar.arrive 3, 256;" ::: "memory");
    store_warpgroup<RESIDUAL ? 1 : BLOCK_N / 8>(c, d, block_m + warp * 16 + (lane >> 2), block_n + 2 * (lane & 3)
                                                EPILOGUE_ARGUMENT);
  }
}
#else
// The multiplying warps' walk (mma.sync): a warp releases a stage once its
// fragment loads from it are done.
__device__ __forceinline__ void multiply_tiles(C_ELEMENT* c, unsigned long long* full, unsigned long long* empty,
                                               const TensorMap*, const TensorMap* EPILOGUE_PARAMETER) {
  extern __shared__ __align__(1024) HALF shared[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warp_m = (warp / WARPS_N) * WARP_M, warp_n = (warp % WARPS_N) * WARP_N;
  int it = 0;
  for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
    const int block_m = tile / TILES_ALONG_N * BLOCK_M, block_n = tile % TILES_ALONG_N * BLOCK_N;
    float accumulator[TILES_M][TILES_N][4];
    clear(accumulator);
    for (int step = 0; step < TILE_STEPS; ++step, ++it) {
      const int s = it % STAGES;
      barrier_wait(&full[s], (it / STAGES) & 1);
      multiply_stage_warps(accumulator, shared + s * STAGE_HALVES, warp_m, warp_n);
      __syncwarp();  // every lane's loads from the stage are done
      if (lane == 0) barrier_arrive(&empty[s]);
    }
    store_warps(c, accumulator, block_m + warp_m + (lane >> 2), block_n + warp_n + 2 * (lane & 3)
                EPILOGUE_ARGUMENT);
  }
}
#endif

// WGMMA 2 and 3's block: its mbarriers follow the ring in shared memory (then,
// TENSOR_STORE, the multiplying warpgroups' slabs of C).
__device__ __forceinline__ void product_specialized(C_ELEMENT* c, const HALF* a, const HALF* b, const TensorMap* map_a,
                                                    const TensorMap* map_b, const TensorMap* map_c,
                                                    const TensorMap* map_x EPILOGUE_PARAMETER) {
  static_assert(WGMMA < 2 || GROUP_THREADS == BLOCK_M * 2, "a warpgroup per 64 rows");
  static_assert(!SHARED_SUMS || BLOCK_M * BLOCK_N * 4 <= STAGES * STAGE_HALVES * 2,
                "the cluster's sums go where the ring was (its mbarriers follow it)");
  extern __shared__ __align__(1024) HALF shared[];
  unsigned long long* const full = reinterpret_cast<unsigned long long*>(shared + STAGES * STAGE_HALVES);
  unsigned long long* const empty = full + STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&full[s], TENSOR_COPIES ? 1 : WARPGROUP_THREADS);  // the stage's copies landed
      barrier_init(&empty[s], RELEASING_WARPS);  // every warp that read it done
    }
    if constexpr (STAGED_R) {  // each warpgroup's R landed in its slab
      barrier_init(&empty[STAGES], 1);
      barrier_init(&empty[STAGES + 1], 1);
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  __syncthreads();
  constexpr int MULTIPLYING = GROUP_THREADS * K_GROUPS;  // the copying warpgroup follows every K group
  if (threadIdx.x >= MULTIPLYING) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (HANDS_REGISTERS) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
    if constexpr (TENSOR_COPIES) {
      // the first thread arms each stage's full mbarrier with the stage's
      // bytes and issues its tensor copies
      if (threadIdx.x == MULTIPLYING) {
        copy_tiles(full, empty, [&](HALF* stage, unsigned long long* full_stage, int block_m, int block_n, int k0) {
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(full_stage)),
                       "r"(STAGE_HALVES * 2)
                       : "memory");
          tensor_copy<A_COLUMNS, BLOCK_M>(stage, map_a, block_m, k0, full_stage);
          if constexpr (GATED) {  // the up's rows, then the gate's (a box of BLOCK_N / 2 rows each)
            tensor_copy<false, BLOCK_N / 2>(stage + OperandA::HALVES, map_b, paired(block_n, 0), k0, full_stage);
            tensor_copy<false, BLOCK_N / 2>(stage + OperandA::HALVES + BLOCK_N / 2 * BLOCK_K, map_b,
                                            paired(block_n, PAIRED), k0, full_stage);
          } else {
            tensor_copy<B_COLUMNS, BLOCK_N>(stage + OperandA::HALVES, map_b, block_n, k0, full_stage);
          }
        });
      }
      if constexpr (SHARED_SUMS) {  // the multiplying warpgroups' two cluster barriers (add_cluster_shares)
        __syncwarp();
        cluster_barrier();
        cluster_barrier();
      }
      return;
    }
#endif
    // every thread's cp.async copies arrive on the full mbarrier as they land
    const int thread = threadIdx.x - MULTIPLYING;
    copy_tiles(full, empty, [&](HALF* stage, unsigned long long* full_stage, int block_m, int block_n, int k0) {
      OperandA::copy<WARPGROUP_THREADS>(stage, a, block_m, k0, thread);
      OperandB::copy<WARPGROUP_THREADS>(stage + OperandA::HALVES, b, block_n, k0, thread);
      barrier_arrive_on_copies(full_stage);
    });
    copy_wait_all();  // no copy outlives its thread
  } else {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (HANDS_REGISTERS) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
    if constexpr (ALTERNATING) {
      if (!STAGED_C) {
        multiply_tiles_alternating(c, full, empty, map_c, map_x EPILOGUE_ARGUMENT);
      } else if (threadIdx.x < WARPGROUP_THREADS) {
        multiply_tiles_alternating<0>(c, full, empty, map_c, map_x EPILOGUE_ARGUMENT);
      } else {
        multiply_tiles_alternating<1>(c, full, empty, map_c, map_x EPILOGUE_ARGUMENT);
      }
      return;
    }
    if constexpr (IN_TURNS) {
      multiply_tiles_in_turns(c, full, empty EPILOGUE_ARGUMENT);
      return;
    }
#endif
    if constexpr (K_GROUPS > 1) {
      if (threadIdx.x >= GROUP_THREADS) return;  // other cards: the first K group takes every step
    }
    multiply_tiles(c, full, empty, map_c, map_x EPILOGUE_ARGUMENT);
  }
}
#if __CUDA_ARCH__ >= 900 && IMAGE_K_BLOCKS > 1
#define CLUSTER __cluster_dims__(1, 1, K_BLOCKS)
#else
#define CLUSTER
#endif
#if defined(IMAGE_FAMILY_TILED_ADD)
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER
image(C_ELEMENT* c, const HALF* __restrict__ a, const HALF* __restrict__ b, const float* r TENSOR_MAP_PARAMETERS) {
#elif defined(IMAGE_FAMILY_TILED_GATED)
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER
image(C_ELEMENT* __restrict__ c, HALF* __restrict__ gated_out, const HALF* __restrict__ a, const HALF* __restrict__ b,
      float sqrt_two_over_pi, float cubic, float half TENSOR_MAP_PARAMETERS) {
  const Gated gated{gated_out, sqrt_two_over_pi, cubic, half};
#elif defined(IMAGE_FAMILY_TILED_ROPE)
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER
image(HALF* __restrict__ queries, HALF* __restrict__ keys, HALF* __restrict__ values, const HALF* __restrict__ a,
      const HALF* __restrict__ b, const float* __restrict__ cosine, const float* __restrict__ sine
      TENSOR_MAP_PARAMETERS) {
#if defined(STAGED_HEADS_MAPS)
  const Rope rope{queries, keys, values, cosine, sine, {&map_queries, &map_keys, &map_values}};
#else
  const Rope rope{queries, keys, values, cosine, sine, {}};
#endif
  HALF* const c = nullptr;  // C goes by head (head_place), through `rope`
#elif defined(IMAGE_FAMILY_TILED_HEADS)
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER
image(HALF* __restrict__ heads, float* __restrict__ row_terms, const HALF* __restrict__ a, const HALF* __restrict__ b,
      const HALF* __restrict__ out TENSOR_MAP_PARAMETERS) {
  const ByHead by_head{heads, row_terms, out};
  HALF* const c = nullptr;  // C goes by head (head_place), through `by_head`
#else
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER
image(C_ELEMENT* __restrict__ c, const HALF* __restrict__ a, const HALF* __restrict__ b TENSOR_MAP_PARAMETERS) {
#endif
  await_previous_launch();
  if constexpr (K_BLOCKS > 1 && SPLIT == 1) {
    if (blockIdx.z > 0) return;  // no clusters: the first block takes the whole of K
  }
  if constexpr (WGMMA >= 2) {
    product_specialized(c, a, b TENSOR_MAP_ARGUMENTS EPILOGUE_ARGUMENT);
    return;
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (WGMMA == 1) {
    product_async(c, a, b EPILOGUE_ARGUMENT);
    return;
  }
#endif
  product_sync(c, a, b EPILOGUE_ARGUMENT);
}
