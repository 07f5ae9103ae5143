// What the three streaming attention images share: the geometry, the 64 x 64
// half tiles they stage in shared memory, and the fragment moves between
// tiles, registers and the tensor cores.
//
// A block of PARTS parts of four warps; in the query-major images (forward,
// query) a block takes 64 queries of one head and each warp of a part 16 of
// them, in the key image 64 keys of one K/V head and each warp of a part 16
// keys. The parts split the block's walk over the other side's tiles (part p
// takes every PARTS-th tile from the p-th), each with its own stages in the
// dynamic shared memory and its own barrier, so a block's longest walk (the
// causal diagonal's) is PARTS times shorter; at the end the parts' sums meet
// in a fixed order (the same bits every run). Every 64 x 64 operand tile (64
// rows of 64 halves, 128 bytes) is copied with cp.async into shared memory,
// its 16-byte chunks XOR-swizzled by the row (chunk ^ row % 8) so that both
// ldmatrix and ldmatrix.trans read it without bank conflicts. Tiles start
// 1024 bytes apart: so laid out, a tile is also the 128-byte swizzled layout
// Hopper's warpgroup products read (K-major as rows, MN-major as columns).
//
// On sm_90a a part's four warps are one warpgroup, and its products are
// warpgroup products (wgmma): each warp's A fragments stay in its registers
// (mma.sync's A layout is wgmma's), or A is a tile of the block's own rows in
// shared memory too (OwnRows), the tile is read from shared memory, and the
// sums land in the layout mma.sync's would. Elsewhere each warp
// multiplies on its own with mma.sync. Products are issued with
// multiply_rows and multiply_columns and their sums read after
// await_products, so that independent products run together (on sm_90a;
// with mma.sync they are done when issued).
#pragma once
#include "common.cuh"

constexpr int PART_THREADS = 128;  // four warps of 16 rows
constexpr int THREADS = PART_THREADS * PARTS;
static_assert(BLOCK == THREADS, "PARTS parts of four warps");

// The part a thread of the block is in: 0 at compile time where the block is
// one part, so that a part's stages, the tiles in them and the products'
// descriptors are uniform registers (threadIdx.x / 128 is not, to the
// compiler: every descriptor went through vector registers, then R2UR; the
// key walk's step 484 -> 445 instructions, the query walk's 363 -> 340, the
// forward's 358 -> 347)
__device__ __forceinline__ int part_of(unsigned thread) { return PARTS == 1 ? 0 : thread / PART_THREADS; }
constexpr int TILE = 64;           // queries or keys a block takes, and a tile's rows
constexpr int HEAD = 64;           // a head's columns
constexpr int GROUP = HEADS / KV_HEADS;  // query heads a K/V head serves
constexpr int TILES = SEQ / TILE;
constexpr int TOKENS = BATCH * SEQ;  // the columns of a transposed token-major plane
constexpr int TILE_HALVES = TILE * HEAD;
static_assert(SEQ % TILE == 0 && HEADS % KV_HEADS == 0, "whole tiles and whole groups");

// The blocks of one part a multiprocessor holds at once, where a launch has
// many waves of them: on sm_90a an image asks the compiler for as few
// registers as that takes (the walks are latency-bound, and another block's
// walk fills a block's waits: the key launch at 8 x 1024, three blocks
// instead of two, 54.8 -> 52.0 us; the query launch, four instead of three,
// the update 9.379 -> 9.335 ms). Blocks of two parts take a
// multiprocessor's registers each; other cards' mma.sync walks keep the
// registers they take.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RESIDENT_BLOCKS(blocks) (PARTS == 1 ? (blocks) : 1)
#else
#define RESIDENT_BLOCKS(blocks) 1
#endif

// A block's walk: its length (in tiles of the other side) follows from the
// block's tile alone, and blocks start in launch order (x fastest). So the
// launch is taken tile-major over its heads and batches, the longest walks
// first, and the shortest fill the last wave. (Taken head by head, as the
// grid lies, the last heads' longest walks started in the last wave: at 8 x
// 1024, alone, the forward took 41 us a layer, now 33.) `rank` 0 is the
// longest walk; `head` and `batch` are the block's. The grid is TILES x
// HEADS_ALONG_Y x BATCH; given HEADS_ALONG_Y, the image's constants make a
// block's place a few multiplications the compiler may work out again
// rather than hold through the walk (the backward's walks: at 8 x 1024 the
// query launch 35.8 -> 34.2 us, and the key launch fits 168 registers
// without local memory); the forward's walk holds fewer registers with the
// extents the launch gives (gridDim: 128 at 8 x 1024, four blocks a
// multiprocessor, against 168).
struct WalkPlace {
  int rank, head, batch;
};

template <int HEADS_ALONG_Y = 0>
__device__ __forceinline__ WalkPlace walk_place() {
  const unsigned along_x = HEADS_ALONG_Y ? TILES : gridDim.x, along_y = HEADS_ALONG_Y ? HEADS_ALONG_Y : gridDim.y;
  const unsigned others = along_y * (HEADS_ALONG_Y ? BATCH : gridDim.z);
  const unsigned linear = blockIdx.x + along_x * (blockIdx.y + along_y * blockIdx.z);
  const unsigned other = linear % others;
  return {static_cast<int>(linear / others), static_cast<int>(other % along_y), static_cast<int>(other / along_y)};
}

// the swizzled place of (row, column) in a tile, in halves
__device__ __forceinline__ int place(int row, int column) {
  return row * HEAD + ((((column >> 3) ^ row) & 7) << 3) + (column & 7);
}

// rows [0, 64) of a tile whose rows lie `stride` halves apart in global
// memory, copied by a part's threads (thread: the index in the part)
// (a thread's chunks lie 16 rows apart, in the same swizzled column, so one
// address each side and constant steps serve them all)
__device__ __forceinline__ void copy_tile(HALF* tile, const HALF* from, size_t stride, int thread) {
  constexpr int ROWS = PART_THREADS / 8;  // rows a pass of the part's threads copies
  const int row = thread / 8, column = (thread % 8) * 8;
  HALF* const to = tile + place(row, column);
  from += row * stride + column;
#pragma unroll
  for (int i = 0; i < TILE / ROWS; ++i) copy_async(to + i * ROWS * HEAD, from + i * ROWS * stride);
}

// A part's HALVES halves of stages: a block of one part keeps them in static
// shared memory, where its loads have constant addresses; parts share the
// dynamic shared memory the manifest gives, as does a block of one part
// whose stages are more than a block may declare (DYNAMIC: the key walk's,
// 49 KB on sm_90a, in the key and the backward image).
template <int HALVES, bool DYNAMIC = false>
__device__ __forceinline__ HALF* part_stages(int part) {
  if constexpr (PARTS == 1 && !DYNAMIC) {
    __shared__ __align__(1024) HALF stages[HALVES];
    return stages;
  } else {
    extern __shared__ __align__(1024) HALF shared[];
    static_assert(HALVES * sizeof(HALF) % 1024 == 0, "each part's tiles 1024-byte aligned");
    static_assert(PARTS * HALVES * sizeof(HALF) <= IMAGE_SHARED_BYTES, "the manifest gives every part its stages");
    return shared + part * HALVES;
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
  static_assert((PARTS - 1) * VALUES * PART_THREADS * sizeof(float) <= IMAGE_SHARED_BYTES,
                "the manifest gives the later parts' sums their room");
  extern __shared__ __align__(1024) HALF shared[];
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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A tile as a wgmma operand: 128-byte rows, 8 of them (1024 bytes) a group,
// 128-byte swizzled; as columns (MN-major) one 64-wide block of them. Only
// the descriptor's low word (the start address, the leading offset) varies
// from tile to tile: the products take it alone and set the constant high
// word (the stride, the swizzle) in their own PTX, so that a walk's
// descriptor arithmetic is 32-bit.
__device__ __forceinline__ unsigned tile_matrix(const HALF* p) {
  return static_cast<unsigned>(matrix(p, TILE_HALVES * sizeof(HALF), 1024, SWIZZLE_128));
}
#define TILE_MATRIX_HIGH "0x4000004000000000"  // (1024 >> 4) << 32 | SWIZZLE_128 << 62

// this warp's 16 rows of the warpgroup's 64 x 64 sums d, as asm operands
#define WARPGROUP_SUMS(d, how)                                                                                     \
  how(d[0][0]), how(d[0][1]), how(d[0][2]), how(d[0][3]), how(d[1][0]), how(d[1][1]), how(d[1][2]), how(d[1][3]), \
      how(d[2][0]), how(d[2][1]), how(d[2][2]), how(d[2][3]), how(d[3][0]), how(d[3][1]), how(d[3][2]),           \
      how(d[3][3]), how(d[4][0]), how(d[4][1]), how(d[4][2]), how(d[4][3]), how(d[5][0]), how(d[5][1]),           \
      how(d[5][2]), how(d[5][3]), how(d[6][0]), how(d[6][1]), how(d[6][2]), how(d[6][3]), how(d[7][0]),           \
      how(d[7][1]), how(d[7][2]), how(d[7][3])
// the descriptor (a .b64 register) of the tile whose low word is operand `low`
#define TILE_DESCRIPTOR(name, low) "cvt.u64.u32 " name ", " low ";\n or.b64 " name ", " name ", " TILE_MATRIX_HIGH ";\n"
#define WARPGROUP_PRODUCT(setup, a, rest)                                                                 \
  "{\n .reg .b64 a, b;\n" setup "wgmma.mma_async.sync.aligned.m64n64k16" WGMMA_TYPES " "                 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"     \
  "%26,%27,%28,%29,%30,%31}, " a ", b, " rest ";\n}"

// d (the warpgroup's 64 x 64, this warp's 16 rows) = a (16 x 16, registers)
// times B (16 x 64) in shared memory (b: its descriptor's low word), plus d
// where ADD, K-major (COLUMNS 0) or MN-major (1); without ADD d's values are
// not read, so need not be set
template <int COLUMNS, bool ADD>
__device__ __forceinline__ void warpgroup_product(float (&d)[8][4], const unsigned (&a)[4], unsigned b) {
  if constexpr (ADD) {
    asm volatile(WARPGROUP_PRODUCT(TILE_DESCRIPTOR("b", "%36"), "{%32,%33,%34,%35}", "1, 1, 1, %37")
                 : WARPGROUP_SUMS(d, "+f") : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b), "n"(COLUMNS));
  } else {
    asm volatile(WARPGROUP_PRODUCT(TILE_DESCRIPTOR("b", "%36"), "{%32,%33,%34,%35}", "0, 1, 1, %37")
                 : WARPGROUP_SUMS(d, "=f") : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b), "n"(COLUMNS));
  }
}

// the same with A (64 x 16) in shared memory too (a: its descriptor's low
// word), both K-major
template <int COLUMNS, bool ADD>
__device__ __forceinline__ void warpgroup_product(float (&d)[8][4], unsigned a, unsigned b) {
  static_assert(COLUMNS == 0, "a shared A multiplies rows");
  if constexpr (ADD) {
    asm volatile(WARPGROUP_PRODUCT(TILE_DESCRIPTOR("a", "%32") TILE_DESCRIPTOR("b", "%33"), "a", "1, 1, 1, 0, 0")
                 : WARPGROUP_SUMS(d, "+f") : "r"(a), "r"(b));
  } else {
    asm volatile(WARPGROUP_PRODUCT(TILE_DESCRIPTOR("a", "%32") TILE_DESCRIPTOR("b", "%33"), "a", "0, 1, 1, 0, 0")
                 : WARPGROUP_SUMS(d, "=f") : "r"(a), "r"(b));
  }
}
#undef WARPGROUP_SUMS
#undef WARPGROUP_PRODUCT
#undef TILE_DESCRIPTOR
#undef TILE_MATRIX_HIGH

// A block's own 64 rows (queries, keys) as the A operand of products with
// tiles of the other side: on sm_90a a tile in the part's shared memory (the
// products read it there and the registers stay free), elsewhere each warp's
// fragments of its 16 rows
struct OwnRows {
  const HALF* tile;
};

// A k-slice's descriptor from its tile's: the slice's offset in 16-byte units
// added to the start address field (K-major: 16 k are 32 bytes along the
// rows; MN-major: 16 rows down, 2048 bytes). A tile lies below 256 KB, so
// the sum stays inside the 14-bit field. (Built from each slice's address,
// the descriptors cost more instructions a step than this addition.)
template <int COLUMNS>
__device__ __forceinline__ unsigned slice_matrix(unsigned tile, int k) {
  return tile + (COLUMNS ? 16 * HEAD : 16) * k * sizeof(HALF) / 16;
}

// A's k-slice k (16 columns) as wgmma takes it. The own rows' slices are
// built from their addresses: with slice_matrix (hoisted out of the walk as
// 64-bit descriptors) the key walk needed local memory at 168 registers,
// and with it as 32-bit words the walks' machine code changes, untimed.
__device__ __forceinline__ const unsigned (&a_slice(const unsigned (&a)[4][4], int k))[4] { return a[k]; }
__device__ __forceinline__ unsigned a_slice(const OwnRows& a, int k) { return tile_matrix(a.tile + 16 * k); }

// acc (+)= A (16 x 64 a warp) times the tile, four k-slices of 16, the first
// adding to acc where ADD, left in flight: the registers of A and acc, and
// the tiles, are the products' until await_products
template <int COLUMNS, bool ADD, typename A>
__device__ __forceinline__ void multiply_tile(float (&acc)[8][4], const A& a, const HALF* tile) {
  const unsigned b = tile_matrix(tile);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  warpgroup_product<COLUMNS, ADD>(acc, a_slice(a, 0), b);
#pragma unroll
  for (int k = 1; k < 4; ++k) warpgroup_product<COLUMNS, true>(acc, a_slice(a, k), slice_matrix<COLUMNS>(b, k));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// the own rows of plane's tile `tile_index` ([rows][64]) into `tile`, copied
// with the part's next group of copies
__device__ __forceinline__ OwnRows own_rows(HALF* tile, const HALF* plane, int tile_index, int thread) {
  copy_tile(tile, plane + static_cast<size_t>(tile_index) * TILE_HALVES, HEAD, thread);
  return {tile};
}

// every product this warp left in flight done
__device__ __forceinline__ void await_products() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// acc[n] (16 x 8, n < 8) = a (16 x 64) times the tile's rows as columns:
// acc = A T^T, T [64 n][64 k]
template <typename A>
__device__ __forceinline__ void multiply_rows(float (&acc)[8][4], const A& a, const HALF* tile) {
  multiply_tile<0, false>(acc, a, tile);
}

// acc[n] (16 x 8, n < 8) += a (16 x 64) times the tile: acc += A T, T [64 k][64 n]
__device__ __forceinline__ void multiply_columns(float (&acc)[8][4], const unsigned (&a)[4][4], const HALF* tile) {
  multiply_tile<1, true>(acc, a, tile);
}
#else
__device__ __forceinline__ void await_products() {}  // mma.sync's are done on return

struct OwnRows {
  unsigned a[4][4];
};

// this warp's fragments of the own rows (read directly; `tile` goes unused)
__device__ __forceinline__ OwnRows own_rows(HALF*, const HALF* plane, int tile_index, int thread) {
  OwnRows rows;
  load_rows(rows.a, plane, tile_index * TILE + 16 * (thread >> 5));
  return rows;
}

// acc[n] (16 x 8, n < 8) = a (16 x 64) times the tile's rows as columns:
// acc = A T^T, T [64 n][64 k] (ldmatrix: the tile's rows are B's columns)
__device__ __forceinline__ void multiply_rows(float (&acc)[8][4], const unsigned (&a)[4][4], const HALF* tile) {
  const int lane = threadIdx.x & 31, matrix = lane >> 3;
  clear(acc);
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

__device__ __forceinline__ void multiply_rows(float (&acc)[8][4], const OwnRows& a, const HALF* tile) {
  multiply_rows(acc, a.a, tile);
}

// acc[n] (16 x 8, n < 8) += a (16 x 64) times the tile: acc += A T, T [64 k][64 n]
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

#endif

// A step of a part's walk begins: its tiles have landed (and are visible to
// the warpgroup products), the products of the step before, left in flight
// until here, are done with the buffers the next copy takes, and every warp
// of the part is here.
__device__ __forceinline__ void begin_step(int part) {
  copy_wait<0>();
  shared_to_async_proxy();
  await_products();
  part_sync(part);
}

// On the diagonal tile, the scores of the keys after each query masked to
// -inf (so that P = 0 there): s is this warp's 16 rows of the tile's scores
// by its 64 columns, the rows queries and the columns keys, or (KEY_ROWS, the
// key image's S^T) the rows keys and the columns queries
template <bool KEY_ROWS>
__device__ __forceinline__ void mask_diagonal(float (&s)[8][4], int warp, int lane) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int column = 8 * n + 2 * (lane & 3) + (e & 1), row = 16 * warp + (lane >> 2) + 8 * (e >> 1);
      if (KEY_ROWS ? column < row : column > row) s[n][e] = -__int_as_float(0x7f800000);
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

// Sums a product accumulates, made opaque to the compiler where they are set
// and where they are final: on sm_90a ptxas serializes every warpgroup
// product of an image (a wait after each) once it finds other instructions
// defining or reading a product's sums while products are in flight, and the
// compiler would otherwise sink the zeroing into the walk, or hoist reads
// above the last wait. (So did the key image's epilogue that read its sums
// one by one rather than in pairs: at 8 x 1024 it took 60.6 us serialized,
// 52.1 not.)
__device__ __forceinline__ void fence_sums(float (&sums)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(sums[n][e])::"memory");
}

// The backward's last step, by the first part: its sums (this warp's 16 of
// the block's 64 rows, columns 8 n + 2 (lane % 4) + e % 2 of one head) times
// `scale`, rounded to the half format and stored transposed: column c of the
// head at to[c TOKENS + t], the block's rows tokens t = 0..63 from `to` on
// (the layout of the qkv gradient the products after it read). A query or
// key head's sums are turned back by the rotary angles on the way
// (store_turned). The tile passes through the part's shared memory
// (`scratch`, its stages done with) so that each column's 64 tokens go as
// 128 bytes; rows PITCH halves apart put a quad's four columns in four banks.
constexpr int PITCH = TILE + 8;

// A thread's halves to store: [n][h] packs columns 8 n + 2 (lane % 4) + 0, 1
// of its row 16 warp + lane / 4 + 8 h, the lower column in the low 16 bits
typedef unsigned Pairs[8][2];

// sums x scale rounded to the half format, a row's two columns rounded
// together (see fence_sums)
__device__ __forceinline__ void round_pairs(Pairs& pairs, const float (&sums)[8][4], float scale) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) pairs[n][h] = pack_halves(sums[n][2 * h] * scale, sums[n][2 * h + 1] * scale);
}

// (once every thread of the part is done with `scratch`: the walk's tiles,
// the parts' sums, a tile before)
__device__ __forceinline__ void store_pairs(const Pairs& pairs, HALF* to, HALF* scratch, int thread) {
  const int warp = thread >> 5, lane = thread & 31;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      HALF* const at = scratch + (8 * n + 2 * (lane & 3)) * PITCH + 16 * warp + (lane >> 2) + 8 * h;
      at[0] = static_cast<HALF>(pairs[n][h] & 0xffffu);
      at[PITCH] = static_cast<HALF>(pairs[n][h] >> 16);
    }
  part_sync(0);
#pragma unroll
  for (int chunk = thread; chunk < HEAD * TILE / 8; chunk += PART_THREADS) {
    const int column = chunk / (TILE / 8), piece = chunk % (TILE / 8);
    *reinterpret_cast<uint4*>(to + static_cast<size_t>(column) * TOKENS + 8 * piece) =
        *reinterpret_cast<const uint4*>(scratch + column * PITCH + 8 * piece);
  }
}

__device__ __forceinline__ void store_transposed(const float (&sums)[8][4], float scale, HALF* to, HALF* scratch,
                                                 int thread) {
  part_sync(0);
  Pairs pairs;
  round_pairs(pairs, sums, scale);
  store_pairs(pairs, to, scratch, thread);
}

// The rotary tables (column-major: cosine[i SEQ + s], i < 32) and the
// position in its sequence of the block's first row
struct Rotary {
  const float *cosine, *sine;
  int first;
};

// A thread's angles: of its columns i = 8 n + 2 (lane % 4) + e % 2 (n < 4)
// at its rows' positions, [n][e] as the sums are
struct Angles {
  float cosine[4][4], sine[4][4];
};

__device__ __forceinline__ Angles angles_of(const Rotary& rotary, int thread) {
  const int warp = thread >> 5, lane = thread & 31;
  Angles angles;
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 8 * n + 2 * (lane & 3) + (e & 1), s = rotary.first + 16 * warp + (lane >> 2) + 8 * (e >> 1);
      angles.cosine[n][e] = rotary.cosine[i * SEQ + s];
      angles.sine[n][e] = rotary.sine[i * SEQ + s];
    }
  return angles;
}

// A head's columns i and i + 32 (i < 32: n-tiles n and n + 4, the same
// thread's) turned back by the angle of rotary column i at the row's
// position, from both as the half format rounds them, in binary32, then
// rounded again:
//   dx_i = d_i cos + d_{i+32} sin, dx_{i+32} = d_{i+32} cos - d_i sin
// (the inverse rotation's launch of its own turned the stored halves with
// these expressions: so the qkv gradient keeps its bits)
__device__ __forceinline__ void turn_back(Pairs& pairs, const Angles& angles) {
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x[2], y[2];
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const int e = 2 * h + odd;
        const float a = odd ? high_float(pairs[n][h]) : low_float(pairs[n][h]);
        const float b = odd ? high_float(pairs[n + 4][h]) : low_float(pairs[n + 4][h]);
        const float c = angles.cosine[n][e], sn = angles.sine[n][e];
        x[odd] = a * c + b * sn;
        y[odd] = b * c - a * sn;
      }
      pairs[n][h] = pack_halves(x[0], x[1]);
      pairs[n + 4][h] = pack_halves(y[0], y[1]);
    }
}

// store_transposed for a query or key head: its gradient turned back by the
// rotary angles (angles_of, which the launches call before their walk's last
// products are done, so that the loads are in flight while those and the
// parts' meeting run; the key launch stores its values first: the update at
// 1 x 1024 2.322 -> 2.304 ms in two rounds, the launches alone the same)
__device__ __forceinline__ void store_turned(const float (&sums)[8][4], float scale, const Angles& angles, HALF* to,
                                             HALF* scratch, int thread) {
  part_sync(0);
  Pairs pairs;
  round_pairs(pairs, sums, scale);
  turn_back(pairs, angles);
  store_pairs(pairs, to, scratch, thread);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
