// Kernels whose compiled schedules the SASS checker must accept, for sm_86 and
// sm_90.  They cover the instruction mix of the model's images: elementwise
// work, shuffles, shared-memory tiles, loops, tensor-core products, half and
// bfloat16 conversions, the special-function unit, asynchronous copies,
// atomics, calls and local memory.
//
// No headers: NVRTC's search list is empty, so halves and bfloat16 values are
// carried as 16-bit integers and converted with inline PTX.
typedef unsigned short half_t;
typedef unsigned short bf16_t;
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ half_t f2h(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float h2f(half_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ bf16_t f2bf(float f) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned hfma2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
  unsigned d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ unsigned hmax2(unsigned a, unsigned b) {
  unsigned d;
  asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// {lo, hi} packed, lo in the low half
__device__ __forceinline__ unsigned f2h2(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(d) : "f"(lo), "f"(hi));
  return d;
}
__device__ __forceinline__ unsigned f2bf2(float lo, float hi) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(d) : "f"(lo), "f"(hi));
  return d;
}

extern "C" __global__ void k_saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void k_scale4(const float4* __restrict__ x, float4* __restrict__ y, float s, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float4 v = x[i];
    v.x *= s; v.y *= s; v.z *= s; v.w *= s;
    y[i] = v;
  }
}

extern "C" __global__ void k_add_half2(const unsigned* a, const unsigned* b, unsigned* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = hfma2(a[i], b[i], f2h2(0.5f, 0.5f));
}

extern "C" __global__ void k_cast_down(const float* x, half_t* h, bf16_t* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { h[i] = f2h(x[i]); b[i] = f2bf(x[i] * 3.0f); }
}

extern "C" __global__ void k_cast_up(const half_t* h, const bf16_t* b, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = h2f(h[i]) + bf2f(b[i]);
}

extern "C" __global__ void k_reduce_shfl(const float* x, float* out, int n) {
  __shared__ float partial[32];
  float acc = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += x[i];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
  }
}

extern "C" __global__ void k_shfl_exchange(const float* x, unsigned* y) {
  // more shuffles in flight than barriers: ptxas lets their results retire in order
  const unsigned lane = threadIdx.x & 31;
  unsigned a[12], r[12];
#pragma unroll
  for (int i = 0; i < 12; ++i) a[i] = __float_as_uint(x[i * 32 + threadIdx.x]) + lane;
#pragma unroll
  for (int i = 0; i < 12; ++i) r[i] = __shfl_xor_sync(0xffffffffu, (lane & 1) ? a[i] : a[(i + 5) % 12], 1);
#pragma unroll
  for (int i = 0; i < 12; ++i) y[i * 32 + threadIdx.x] = (lane & 1) ? r[i] : a[i] ^ r[i];
}
extern "C" __global__ void k_argmax(const float* x, int* out, int cols) {
  const float* row = x + (size_t)blockIdx.x * cols;
  float best = NEG_INF; int where = 0;
  for (int c = threadIdx.x; c < cols; c += 32) { float v = row[c]; if (v > best) { best = v; where = c; } }
  for (int o = 16; o > 0; o >>= 1) {
    float b = __shfl_xor_sync(0xffffffffu, best, o);
    int w = __shfl_xor_sync(0xffffffffu, where, o);
    if (b > best || (b == best && w < where)) { best = b; where = w; }
  }
  if (threadIdx.x == 0) out[blockIdx.x] = where;
}

extern "C" __global__ void k_transpose_tile(const float* in, float* out, int w, int h) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) if (x < w && y + j < h) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x; y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) if (x < h && y + j < w) out[(y + j) * h + x] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" __global__ void k_transpose_half(const half_t* in, half_t* out, int w, int h) {
  __shared__ half_t tile[64][66];
  int bx = blockIdx.x * 64, by = blockIdx.y * 64;
  for (int j = threadIdx.y; j < 64; j += blockDim.y)
    for (int i = threadIdx.x; i < 64; i += blockDim.x)
      tile[j][i] = in[(size_t)(by + j) * w + bx + i];
  __syncthreads();
  for (int j = threadIdx.y; j < 64; j += blockDim.y)
    for (int i = threadIdx.x; i < 64; i += blockDim.x)
      out[(size_t)(bx + j) * h + by + i] = tile[i][j];
}

extern "C" __global__ void k_sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[16][16], Bs[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < K; t += 16) {
    As[threadIdx.y][threadIdx.x] = A[row * K + t + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * N + col];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[row * N + col] = acc;
}

extern "C" __global__ void k_sgemm_regtile(const float* A, const float* B, float* C, int N, int K) {
  __shared__ float As[8][64], Bs[8][64];
  float acc[4][4] = {};
  int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  for (int t = 0; t < K; t += 8) {
    for (int i = threadIdx.x; i < 512; i += 256) {
      As[i >> 6][i & 63] = A[(blockIdx.y * 64 + (i & 63)) * K + t + (i >> 6)];
      Bs[i >> 6][i & 63] = B[(t + (i >> 6)) * N + blockIdx.x * 64 + (i & 63)];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) { a[i] = As[k][ty * 4 + i]; b[i] = Bs[k][tx * 4 + i]; }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) C[(blockIdx.y * 64 + ty * 4 + i) * N + blockIdx.x * 64 + tx * 4 + j] = acc[i][j];
}

__device__ __forceinline__ void mma_f16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void k_hmma_f16(const unsigned* A, const unsigned* B, float* C, int ksteps) {
  float d[4] = {};
  int lane = threadIdx.x & 31;
  for (int k = 0; k < ksteps; ++k) {
    unsigned a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = A[(k * 4 + i) * 32 + lane];
    for (int i = 0; i < 2; ++i) b[i] = B[(k * 2 + i) * 32 + lane];
    mma_f16(d, a, b);
  }
  for (int i = 0; i < 4; ++i) C[i * 32 + lane] = d[i];
}

extern "C" __global__ void k_hmma_ldmatrix(const half_t* A, const half_t* B, float* C, int ksteps) {
  __shared__ __align__(16) half_t As[2][16 * 16], Bs[2][16 * 8];
  float d[2][4] = {};
  int lane = threadIdx.x & 31;
  for (int k = 0; k < ksteps; ++k) {
    int s = k & 1;
    for (int i = lane; i < 256; i += 32) As[s][i] = A[k * 256 + i];
    for (int i = lane; i < 128; i += 32) Bs[s][i] = B[k * 128 + i];
    __syncwarp();
    unsigned a[4], b[2];
    unsigned sa = (unsigned)__cvta_generic_to_shared(&As[s][(lane & 15) * 16 + (lane >> 4) * 8]);
    unsigned sb = (unsigned)__cvta_generic_to_shared(&Bs[s][(lane & 7) * 16 + ((lane >> 3) & 1) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(sa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(sb));
    mma_f16(d[0], a, b);
    mma_bf16(d[1], a, b);
    __syncwarp();
  }
  for (int i = 0; i < 4; ++i) C[i * 32 + lane] = d[0][i] + d[1][i];
}

extern "C" __global__ void k_hmma_chain(const unsigned* A, float* C) {
  float d0[4] = {}, d1[4] = {};
  int lane = threadIdx.x & 31;
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = A[i * 32 + lane];
  for (int i = 0; i < 2; ++i) b[i] = A[(4 + i) * 32 + lane];
#pragma unroll
  for (int r = 0; r < 6; ++r) { mma_f16(d0, a, b); mma_bf16(d1, a, b); }
  for (int i = 0; i < 4; ++i) C[i * 32 + lane] = d0[i] * d1[i];
}

extern "C" __global__ void k_softmax_row(const float* x, float* y, int cols) {
  const float* row = x + (size_t)blockIdx.x * cols;
  float m = NEG_INF;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, row[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) s += exp2f((row[c] - m) * 1.4426950408889634f);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  float inv = __frcp_rn(s);
  for (int c = threadIdx.x; c < cols; c += 32)
    y[(size_t)blockIdx.x * cols + c] = exp2f((row[c] - m) * 1.4426950408889634f) * inv;
}

extern "C" __global__ void k_layernorm(const float* x, const float* g, const float* b, float* y, int cols) {
  __shared__ float red[2][32];
  const float* row = x + (size_t)blockIdx.x * cols;
  float s = 0.f, q = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) { float v = row[c]; s += v; q += v * v; }
  for (int o = 16; o > 0; o >>= 1) { s += __shfl_xor_sync(0xffffffffu, s, o); q += __shfl_xor_sync(0xffffffffu, q, o); }
  if ((threadIdx.x & 31) == 0) { red[0][threadIdx.x >> 5] = s; red[1][threadIdx.x >> 5] = q; }
  __syncthreads();
  s = 0.f; q = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) { s += red[0][w]; q += red[1][w]; }
  float mean = s / cols, var = q / cols - mean * mean, r = rsqrtf(var + 1e-5f);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(size_t)blockIdx.x * cols + c] = (row[c] - mean) * r * g[c] + b[c];
}

extern "C" __global__ void k_cross_entropy(const float* logits, const int* targets, float* loss, int vocab) {
  const float* row = logits + (size_t)blockIdx.x * vocab;
  float m = NEG_INF;
  for (int c = threadIdx.x; c < vocab; c += 32) m = fmaxf(m, row[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = threadIdx.x; c < vocab; c += 32) s += expf(row[c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x == 0) loss[blockIdx.x] = logf(s) + m - row[targets[blockIdx.x]];
}

extern "C" __global__ void k_adamw(float* p, const float* g, float* m, float* v, half_t* ph, float lr, float b1,
                                   float b2,
                                   float eps, float wd, float c1, float c2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
  m[i] = mi; v[i] = vi;
  float pi = p[i] * (1.f - lr * wd) - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
  p[i] = pi; ph[i] = f2h(pi);
}

extern "C" __global__ void k_gelu_tanh(const float* x, const float* gate, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    float t = tanhf(0.7978845608f * (v + 0.044715f * v * v * v));
    y[i] = 0.5f * v * (1.f + t) * gate[i];
  }
}

extern "C" __global__ void k_intdiv(const int* a, const int* b, int* q, unsigned* r, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { q[i] = a[i] / b[i]; r[i] = (unsigned)a[i] % (unsigned)(b[i] | 1); }
}

extern "C" __global__ void k_double(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { double v = x[i]; y[i] = fma(v, v, 1.0) * (double)(float)v + v / 3.0; }
}

extern "C" __global__ void k_atomics(const int* idx, const float* val, float* hist, unsigned* count, int n) {
  __shared__ unsigned local[64];
  if (threadIdx.x < 64) local[threadIdx.x] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { atomicAdd(&hist[idx[i] & 1023], val[i]); atomicAdd(&local[idx[i] & 63], 1u); }
  __syncthreads();
  if (threadIdx.x < 64) {
    unsigned old = atomicAdd(&count[threadIdx.x], local[threadIdx.x]);
    if (old > 1000u) atomicCAS(&count[64], 0u, old);
  }
}

extern "C" __global__ void k_cp_async(const float4* src, float4* dst, int tiles) {
  __shared__ __align__(16) float4 buf[3][128];
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < 2 && s < tiles; ++s) {
    unsigned a = (unsigned)__cvta_generic_to_shared(&buf[s][threadIdx.x]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(src + s * 128 + threadIdx.x));
    asm volatile("cp.async.commit_group;");
  }
  for (int t = 0; t < tiles; ++t) {
    if (t + 2 < tiles) {
      unsigned a = (unsigned)__cvta_generic_to_shared(&buf[(t + 2) % 3][threadIdx.x]);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(src + (t + 2) * 128 + threadIdx.x));
    }
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 2;");
    __syncthreads();
    float4 v = buf[t % 3][(threadIdx.x + 1) & 127];
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    __syncthreads();
  }
  dst[blockIdx.x * 128 + threadIdx.x] = acc;
}

extern "C" __global__ void k_bits(const unsigned* x, int* y, float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = x[i];
    y[i] = __popc(v) + __clz(v) + __ffs(v) + (int)__brev(v);
    f[i] = (float)(int)(v >> 3) + (float)__float2int_rn(__int_as_float(v & 0x3fffffff));
  }
}

extern "C" __global__ void k_gather_rows(const long long* ids, const float* table, float* out, int width) {
  long long id = ids[blockIdx.x];
  for (int c = threadIdx.x; c < width; c += blockDim.x) out[(size_t)blockIdx.x * width + c] = table[id * width + c];
}

extern "C" __global__ void k_scatter_ordered(const int* ids, const float* grad, float* table, int rows, int width) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= width) return;
  for (int r = 0; r < rows; ++r) { int id = ids[r]; table[(size_t)id * width + c] += grad[(size_t)r * width + c]; }
}

extern "C" __global__ void k_switch(const int* op, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  switch (op[i] & 7) {
    case 0: v = v + 1.f; break;
    case 1: v = v * 3.f; break;
    case 2: v = __sinf(v); break;
    case 3: v = __cosf(v) * 2.f; break;
    case 4: v = __log2f(v + 2.f); break;
    case 5: v = sqrtf(fabsf(v)); break;
    case 6: v = -v; break;
    default: v = 0.f;
  }
  y[i] = v;
}

__device__ __noinline__ float helper_poly(float x, int k) {
  float r = 1.f;
  for (int i = 0; i < k; ++i) r = r * x + 0.5f;
  return r;
}

extern "C" __global__ void k_call(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = helper_poly(x[i], i & 7) + helper_poly(y[i], 3);
}

extern "C" __global__ void k_vote(const float* x, unsigned* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  bool p = i < n && x[i] > 0.f;
  unsigned b = __ballot_sync(0xffffffffu, p);
  int any = __any_sync(0xffffffffu, p), all = __all_sync(0xffffffffu, p);
  unsigned m = __match_any_sync(0xffffffffu, (unsigned)(i < n ? (int)x[i] : 0));
  if (i < n) y[i] = b ^ (unsigned)any ^ ((unsigned)all << 1) ^ m ^ __activemask();
}

extern "C" __global__ void k_local_array(const int* idx, const float* x, float* y, int n) {
  float a[24];
  for (int k = 0; k < 24; ++k) a[k] = x[(blockIdx.x * 24 + k) % n];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[idx[i] % 24] + a[(idx[i] + 5) % 24];
}

extern "C" __global__ void k_random_normal(unsigned long long seed, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; z ^= z >> 31;
  float u1 = ((unsigned)z >> 8) * (1.f / 16777216.f) + 1e-7f, u2 = (unsigned)(z >> 40) * (1.f / 16777216.f);
  float r = sqrtf(-2.f * logf(u1));
  float s, c;
  sincosf(6.2831853f * u2, &s, &c);
  out[2 * i] = r * c; out[2 * i + 1] = r * s;
}

extern "C" __global__ void k_rotary(const float* x, float* y, int pos0, int dim) {
  int p = blockIdx.x + pos0, j = threadIdx.x;
  if (2 * j + 1 >= dim) return;
  float f = exp2f(-13.287712f * (2.f * j) / dim) * p, s, c;
  __sincosf(f, &s, &c);
  float a = x[(size_t)blockIdx.x * dim + 2 * j], b = x[(size_t)blockIdx.x * dim + 2 * j + 1];
  y[(size_t)blockIdx.x * dim + 2 * j] = a * c - b * s;
  y[(size_t)blockIdx.x * dim + 2 * j + 1] = a * s + b * c;
}

extern "C" __global__ void k_ldg_nc(const float* __restrict__ x, const int* __restrict__ perm, float* __restrict__ y,
                                    int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __ldg(&x[__ldg(&perm[i])]) + __ldg(&x[i]);
}

extern "C" __global__ void k_uniform_loop(const float* x, float* y, int n, int reps) {
  float acc = 0.f;
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < n; k += 4) acc += x[k + (threadIdx.x & 3)] * (float)(r + 1);
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" __global__ void k_int64(const unsigned long long* a, unsigned long long* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned long long v = a[i];
    b[i] = v * 0x100000001b3ull + (v >> 17) + __umul64hi(v, 0xff51afd7ed558ccdull) + v / 7ull;
  }
}

extern "C" __global__ void k_attention_tile(const half_t* Q, const half_t* K, float* O, int keys) {
  // One warp: scores S = Q K^T on tensor cores, a running max and an exp2 sum.
  int lane = threadIdx.x & 31;
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = ((const unsigned*)Q)[i * 32 + lane];
  float m = NEG_INF, l = 0.f, o[4] = {};
  for (int t = 0; t < keys; t += 8) {
    for (int i = 0; i < 2; ++i) b[i] = ((const unsigned*)K)[(t / 8 * 2 + i) * 32 + lane];
    float s[4] = {};
    mma_f16(s, a, b);
    float tm = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
    float nm = fmaxf(m, tm), scale = exp2f(m - nm);
    l *= scale;
    for (int i = 0; i < 4; ++i) { float p = exp2f(s[i] - nm); l += p; o[i] = o[i] * scale + p; }
    m = nm;
  }
  for (int i = 0; i < 4; ++i) O[i * 32 + lane] = o[i] / l;
}

extern "C" __global__ void k_half2_math(const unsigned* x, unsigned* y, unsigned* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = x[i];
    unsigned w = hmul2(v, hfma2(v, f2h2(1.f, 1.f), f2h2(1.f, 1.f)));
    y[i] = hmax2(w, v ^ 0x80008000u);
    float lo = h2f((half_t)(w & 0xffff)), hi = h2f((half_t)(w >> 16));
    z[i] = f2bf2(lo * 0.25f, hi + 2.f);
  }
}

extern "C" __global__ void k_shared_atomic_scan(const int* x, int* y, int n) {
  __shared__ int s[256];
  int t = threadIdx.x;
  s[t] = t < n ? x[blockIdx.x * 256 + t] : 0;
  __syncthreads();
  for (int o = 1; o < 256; o <<= 1) {
    int v = t >= o ? s[t - o] : 0;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  if (t < n) y[blockIdx.x * 256 + t] = s[t];
}

extern "C" __global__ void k_fdiv_precise(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] / b[i] + sqrtf(a[i]) / (b[i] + 1.f);
}

extern "C" __global__ void k_lds_burst(const float* x, float* y) {
  __shared__ float s[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s[i] = x[blockIdx.x * 1024 + i];
  __syncthreads();
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < 32; ++k) acc = acc * 0.5f + s[(threadIdx.x + 33 * k) & 1023];
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" __global__ void k_fence_flag(int* data, volatile int* flag, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    for (int i = 0; i < n; ++i) data[i] = i * 3;
    __threadfence();
    *flag = 1;
  } else if (threadIdx.x == 0) {
    while (*flag == 0) { __nanosleep(32); }
    data[n + blockIdx.x] = data[blockIdx.x % n];
  }
}
