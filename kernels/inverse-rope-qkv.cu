// The qkv projection's gradient for one token (a block per token t = b SEQ + s),
// [T][(HEADS + 2 KV_HEADS) 64] in the half format: the query heads' part is
// d_q turned back by the rotary angle (dx_i = dq_i cos + dq_{i+32} sin,
// dx_{i+32} = dq_{i+32} cos - dq_i sin), the key heads' likewise from d_k, the
// value heads' d_v. d_q is [b][h][s][64], d_k and d_v [b][g][s][64], binary32.
#include "common.cuh"

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ qkv_gradient, const float* __restrict__ d_q, const float* __restrict__ d_k,
      const float* __restrict__ cosine, const float* __restrict__ sine, const float* __restrict__ d_v) {
  await_previous_launch();
  static_assert(BLOCK % 32 == 0, "a thread keeps its rotary column across heads");
  const int t = blockIdx.x, b = t / SEQ, s = t % SEQ, i = threadIdx.x % 32;
  // the column's angle, read once: the tables are column-major, so each read
  // touches a line of its own
  const float c = cosine[i * SEQ + s], sn = sine[i * SEQ + s];
  HALF* to = qkv_gradient + static_cast<size_t>(t) * QKV;
  for (int pair = threadIdx.x; pair < (HEADS + KV_HEADS) * 32; pair += BLOCK) {
    const int head = pair / 32;
    const float* from = head < HEADS ? d_q + (static_cast<size_t>(b * HEADS + head) * SEQ + s) * 64
                                     : d_k + (static_cast<size_t>(b * KV_HEADS + head - HEADS) * SEQ + s) * 64;
    const float x0 = from[i], x1 = from[i + 32];
    to[head * 64 + i] = to_half(x0 * c + x1 * sn);
    to[head * 64 + i + 32] = to_half(x1 * c - x0 * sn);
  }
  for (int pair = threadIdx.x; pair < KV_HEADS * 32; pair += BLOCK) {
    const int g = pair / 32, d = 2 * (pair % 32);
    const float2 v = *reinterpret_cast<const float2*>(d_v + (static_cast<size_t>(b * KV_HEADS + g) * SEQ + s) * 64 + d);
    *reinterpret_cast<unsigned*>(to + (HEADS + KV_HEADS + g) * 64 + d) = pack_halves(v.x, v.y);
  }
}
