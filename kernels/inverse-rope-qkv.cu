// The qkv projection's gradient for TOKENS consecutive tokens of one sequence
// (a block per TOKENS tokens t = b SEQ + s, WARPS warps a token),
// [T][(HEADS + 2 KV_HEADS) 64] in the half format: the query heads' part is
// d_q turned back by the rotary angle (dx_i = dq_i cos + dq_{i+32} sin,
// dx_{i+32} = dq_{i+32} cos - dq_i sin), the key heads' likewise from d_k, the
// value heads' d_v. d_q is [b][h][s][64], d_k and d_v [b][g][s][64], binary32.
#include "rope.cuh"

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ qkv_gradient, const float* __restrict__ d_q, const float* __restrict__ d_k,
      const float* __restrict__ cosine, const float* __restrict__ sine, const float* __restrict__ d_v) {
  await_previous_launch();
  const int t0 = blockIdx.x * TOKENS, b = t0 / SEQ, s0 = t0 % SEQ;
  __shared__ Angles angles;
  angles.load(cosine, sine, s0);
  __syncthreads();
  const RopeLane lane = rope_lane();
  const int s = s0 + lane.token, i = lane.i;
  const float c = angles.cosine[lane.token][i], sn = angles.sine[lane.token][i];
  HALF* to = qkv_gradient + static_cast<size_t>(t0 + lane.token) * QKV;
  for (int head = lane.head; head < HEADS + KV_HEADS; head += WARPS) {
    const float* from = head < HEADS ? d_q + (static_cast<size_t>(b * HEADS + head) * SEQ + s) * 64
                                     : d_k + (static_cast<size_t>(b * KV_HEADS + head - HEADS) * SEQ + s) * 64;
    const float x0 = from[i], x1 = from[i + 32];
    to[head * 64 + i] = to_half(x0 * c + x1 * sn);
    to[head * 64 + i + 32] = to_half(x1 * c - x0 * sn);
  }
  for (int g = lane.head; g < KV_HEADS; g += WARPS) {
    const float* const from = d_v + (static_cast<size_t>(b * KV_HEADS + g) * SEQ + s) * 64;
    const float2 v = *reinterpret_cast<const float2*>(from + 2 * i);
    *reinterpret_cast<unsigned*>(to + (HEADS + KV_HEADS + g) * 64 + 2 * i) = pack_halves(v.x, v.y);
  }
}
