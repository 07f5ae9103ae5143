// A pattern kernel of scripts/sass_latencies.py, frozen: a half C's epilogue
// as the products' warpgroups store it (kernels/tiled.cu,
// store_tile_words_at), its sums here read from global memory. The lanes of
// a pair trade a word by a shuffle, then each stores four halves side by
// side; ptxas lets the next pair's shuffle overwrite the register a store's
// read barrier still protects, unwaited: the store and the shuffle read their
// operands in issue order. Kept apart from kernels/ so that the latency model
// does not move with the images it checks.
constexpr int BLOCK = 128;
constexpr int N = 1408;       // C's columns
constexpr int BLOCK_N = 128;  // a tile's
typedef unsigned short HALF;

__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

__device__ __forceinline__ void store_tile_words_at(HALF* at, unsigned a, unsigned b) {
  const bool odd = threadIdx.x & 1;
  const unsigned theirs = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
  *reinterpret_cast<uint2*>(at + (odd ? 6 : 0)) = odd ? make_uint2(theirs, b) : make_uint2(a, theirs);
}

extern "C" __global__ void __launch_bounds__(BLOCK) p_store(HALF* __restrict__ c, const float* __restrict__ sums) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float d[BLOCK_N / 2];
#pragma unroll
  for (int i = 0; i < BLOCK_N / 2; ++i) d[i] = sums[(blockIdx.x * (BLOCK_N / 2) + i) * BLOCK + threadIdx.x];
  const int row0 = blockIdx.y * 64 + warp * 16 + (lane >> 2), column0 = blockIdx.x * BLOCK_N + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < BLOCK_N / 8; j += 2)
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row)
      store_tile_words_at(c + static_cast<size_t>(row0 + 8 * half_row) * N + column0 + 8 * j,
                          pack_halves(d[4 * j + 2 * half_row], d[4 * j + 2 * half_row + 1]),
                          pack_halves(d[4 * (j + 1) + 2 * half_row], d[4 * (j + 1) + 2 * half_row + 1]));
}
