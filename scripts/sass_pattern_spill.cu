// A pattern kernel of scripts/sass_latencies.py, frozen: tensor-core sums
// spilled as they are made. Sixteen n-tiles of m16n8k16 sums a thread (64
// registers of sums) under a bound of 64 registers a thread, so that ptxas
// stores (STL) each HMMA's sums to local memory right after the HMMA, as it
// does in a product image whose sums its registers cannot hold (tile 66's
// walk built for sm_86 beside an epilogue). A spill's store takes its data
// operand late, as a store to global memory (STG) does. Kept apart from
// kernels/ so that the latency model does not move with the images it
// checks.
constexpr int BLOCK = 128;
constexpr int TILES = 16;  // n-tiles of m16n8: 64 sums a thread

__device__ __forceinline__ void mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// eight blocks of 128 threads a multiprocessor: at most 64 registers a thread
extern "C" __global__ void __launch_bounds__(BLOCK, 8)
    p_spill(float* __restrict__ out, const unsigned* __restrict__ a, const unsigned* __restrict__ b, int steps) {
  float d[4 * TILES];
#pragma unroll
  for (int i = 0; i < 4 * TILES; ++i) d[i] = 0.0f;
  for (int k = 0; k < steps; ++k) {
    unsigned f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = a[(k * 4 + i) * BLOCK + threadIdx.x];
#pragma unroll
    for (int j = 0; j < TILES; ++j)
      mma(d + 4 * j, f, b[(k * TILES + j) * 2 * BLOCK + threadIdx.x], b[((k * TILES + j) * 2 + 1) * BLOCK + threadIdx.x]);
  }
#pragma unroll
  for (int i = 0; i < 4 * TILES; ++i) out[i * BLOCK + threadIdx.x] = d[i];
}
