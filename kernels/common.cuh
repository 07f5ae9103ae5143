// What every image shares: the half format, fixed-order reductions, and the
// warp-level primitives of the tensor-core images (cp.async, ldmatrix, mma).
//
// NVRTC compiles with an empty header search path, so the half formats are
// carried as 16-bit words and converted with PTX. The prelude the compiler
// generates ahead of this header sets HALF_BFLOAT16 when the image names a
// half format, and the image's constants.
#pragma once

typedef unsigned short HALF;

#if defined(HALF_BFLOAT16)
#if HALF_BFLOAT16
__device__ __forceinline__ HALF to_half(float x) {
  HALF h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float to_float(HALF h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }
// {lo, hi} rounded to nearest, lo in the low 16 bits (the element at the lower address)
__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#define MMA_HALF "bf16"
#else
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
#endif

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

// ---- fixed-order reductions (every run adds in the same order) ----

// A butterfly: at each step a lane and its partner add the same two values,
// so every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// the same over the quad of lanes that holds a row of an mma tile's (or a
// warpgroup's) values
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The block's reduction by `combine` (the warp's, then the warps' results
// combined in warp order); every thread gets it. `scratch` holds one word per
// warp; it is free again when this returns.
template <int WARPS, typename Warp, typename Combine>
__device__ __forceinline__ float block_reduce(float v, float (&scratch)[WARPS], Warp warp, Combine combine) {
  v = warp(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = scratch[0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) total = combine(total, scratch[w]);
  __syncthreads();
  return total;
}

template <int WARPS>
__device__ __forceinline__ float block_sum(float v, float (&scratch)[WARPS]) {
  return block_reduce(v, scratch, [](float x) { return warp_sum(x); }, [](float a, float b) { return a + b; });
}

template <int WARPS>
__device__ __forceinline__ float block_max(float v, float (&scratch)[WARPS]) {
  return block_reduce(v, scratch, [](float x) { return warp_max(x); }, [](float a, float b) { return fmaxf(a, b); });
}

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

// every element of a binary32 array, of any rank, set to zero
__device__ __forceinline__ void clear(float& x) { x = 0.0f; }
template <typename T, int N>
__device__ __forceinline__ void clear(T (&values)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) clear(values[i]);
}

// values += theirs: the merge of sums
template <int VALUES>
__device__ __forceinline__ void add_values(float (&values)[VALUES], const float (&theirs)[VALUES]) {
#pragma unroll
  for (int v = 0; v < VALUES; ++v) values[v] += theirs[v];
}

// tanh(sqrt_two_over_pi (x + cubic x^3)), the tanh GELU's inner term: one
// function, so the forward and the backward round it alike. The tanh is the
// multi-function unit's (tanh.approx, sm_75 on; relative error about 2^-11,
// the half format's own rounding): in the up and gate projections' epilogue
// tanhf's instructions stood between the products (on the H200, the gated
// product at 8 x 1024 took 63.3 us with tanhf, 57.9 with it; the update 10.82
// -> 10.71 ms, interleaved)
__device__ __forceinline__ float gelu_tanh(float x, float sqrt_two_over_pi, float cubic) {
  float th;
  // sqrt_two_over_pi (x + cubic x^3) as x (sqrt_two_over_pi + sqrt_two_over_pi cubic x^2): three
  // instructions, the scalars' product once a launch
  asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(x * fmaf(x * x, sqrt_two_over_pi * cubic, sqrt_two_over_pi)));
  return th;
}

// gelu(x) = half x (1 + th), th = gelu_tanh(x), as one multiply-add: the
// forward's and the backward's, one expression
__device__ __forceinline__ float gelu(float x, float th, float half) {
  const float hx = half * x;
  return fmaf(hx, th, hx);
}

// element i (row i / COLUMNS, column i % COLUMNS) of the gated GELU's up or
// gate: its place in a plane of rows of 2 COLUMNS halves, the up
// projection's row then the gate projection's (the gate's is COLUMNS on)
template <int COLUMNS>
__device__ __forceinline__ size_t pair_place(unsigned i) {
  return static_cast<size_t>(i / COLUMNS) * 2 * COLUMNS + i % COLUMNS;
}

// ---- the launch before ----

// On sm_90 a submission's graph links its launches by programmatic
// dependencies, so a launch is set up while the one before it drains: every
// image waits here, before its first memory access, until the launch before
// has completed and its writes are visible. (No image triggers its successor
// early: measured, blocks parked at the wait cost more than they saved.) The
// machine-code check holds every sm_90 image to this (no global memory access,
// and no end, before the wait: the launches after one wait for those before it
// through it). Elsewhere the launches of a submission simply follow one
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

__device__ __forceinline__ void copy_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// ---- mbarriers (a count of arrivals; a phase completes when they are all in) ----

__device__ __forceinline__ void barrier_init(unsigned long long* barrier, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned long long* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// the thread arrives once every cp.async it has issued has landed
__device__ __forceinline__ void barrier_arrive_on_copies(unsigned long long* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// wait until the phase of the given parity (0 for the first, 1 for the next, ...) has completed
// (sm_90 on: try_wait, which parks the thread a while; before: polling with test_wait)
__device__ __forceinline__ void barrier_wait(unsigned long long* barrier, unsigned parity) {
  unsigned done = 0;
  while (!done) {
#if __CUDA_ARCH__ >= 900
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(shared_address(barrier)), "r"(parity)
                 : "memory");
#else
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(shared_address(barrier)), "r"(parity)
                 : "memory");
#endif
  }
}

// What the block wrote to shared memory (stores, cp.async: the generic
// proxy), or saw land there through an mbarrier, made visible to the async
// proxy's reads (warpgroup products). Only sm_90a keeps the two apart.
__device__ __forceinline__ void shared_to_async_proxy() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- warpgroup products (wgmma, sm_90a) ----

#define WGMMA_TYPES ".f32." MMA_HALF "." MMA_HALF

// A shared-memory matrix for wgmma: the byte strides between 64-wide MN
// columns (leading) and between groups of 8 rows (stride), and the swizzle
// of its 16-byte chunks (SWIZZLE_128 or SWIZZLE_64 bytes).
constexpr unsigned long long SWIZZLE_128 = 1, SWIZZLE_64 = 2;
__device__ __forceinline__ unsigned long long matrix(const HALF* p, unsigned leading, unsigned stride,
                                                     unsigned long long swizzle) {
  return ((shared_address(p) & 0x3FFFFu) >> 4) | (static_cast<unsigned long long>(leading >> 4) << 16) |
         (static_cast<unsigned long long>(stride >> 4) << 32) | (swizzle << 62);
}
#endif

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
