// A pattern kernel of scripts/sass_latencies.py, frozen: the rotary
// embedding's launch (qk-rope) reading its 16-bit columns one by one, with
// the header lines it used, as it stood when it was written (SEQ 1024, eight
// heads). ptxas lets a later global load overwrite an address register an
// earlier load's read barrier still protects, unwaited: the loads read their
// operands in issue order. Kept apart from kernels/ so that the latency model
// does not move with the images it checks.
constexpr int BLOCK = 128;
constexpr int SEQ = 1024;
constexpr int HEADS = 8;
constexpr int KV_HEADS = 8;
typedef unsigned short HALF;

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

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;

extern "C" __global__ void __launch_bounds__(BLOCK)
p_rope(HALF* __restrict__ queries, HALF* __restrict__ keys, const HALF* __restrict__ qkv,
       const float* __restrict__ cosine, const float* __restrict__ sine) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int t = blockIdx.x, b = t / SEQ, s = t % SEQ, i = threadIdx.x % 32;
  const float c = cosine[i * SEQ + s], sn = sine[i * SEQ + s];
  const HALF* x = qkv + static_cast<size_t>(t) * QKV;
  for (int pair = threadIdx.x; pair < (HEADS + KV_HEADS) * 32; pair += BLOCK) {
    const int head = pair / 32;
    const float x0 = to_float(x[head * 64 + i]), x1 = to_float(x[head * 64 + i + 32]);
    HALF* to = head < HEADS ? queries + (static_cast<size_t>(b * HEADS + head) * SEQ + s) * 64
                            : keys + (static_cast<size_t>(b * KV_HEADS + head - HEADS) * SEQ + s) * 64;
    to[i] = to_half(x0 * c - x1 * sn);
    to[i + 32] = to_half(x1 * c + x0 * sn);
  }
}
