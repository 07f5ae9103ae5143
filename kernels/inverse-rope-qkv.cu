// The qkv projection's gradient, transposed ([(HEADS + 2 KV_HEADS) 64][T] in
// the half format, a column's tokens t = b SEQ + s consecutive, as the
// products after it read it): the query heads' rows d_q turned back by the
// rotary angle of each position (rows i and i + 32 of a head, i < 32:
// dx_i = dq_i cos + dq_{i+32} sin, dx_{i+32} = dq_{i+32} cos - dq_i sin, in
// binary32), the key heads' likewise from d_k, the value heads' d_v as they
// are. d_q is [HEADS 64][T], d_k and d_v [KV_HEADS 64][T], in the half format,
// as the attention backward wrote them. A thread takes eight consecutive
// tokens (16 bytes of a row) of a pair of rows, or of a value row; the
// tables are column-major (cosine[i SEQ + s]), so its eight angles are one
// sector. Block y takes pair or value row y, its threads the tokens along.
#include "common.cuh"

constexpr int TOKENS = BATCH * SEQ, PAIRS = (HEADS + KV_HEADS) * 32;
static_assert(SEQ % 8 == 0, "a thread's eight tokens in one sequence");

union Chunk {
  uint4 words;
  HALF halves[8];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ qkv_gradient, const HALF* __restrict__ d_q, const HALF* __restrict__ d_k,
      const float* __restrict__ cosine, const float* __restrict__ sine, const HALF* __restrict__ d_v) {
  await_previous_launch();
  const int t = 8 * (blockIdx.x * BLOCK + threadIdx.x), y = blockIdx.y;
  if (t >= TOKENS) return;
  if (y >= PAIRS) {  // a value row, moved
    const int row = y - PAIRS;
    *reinterpret_cast<uint4*>(qkv_gradient + static_cast<size_t>(2 * PAIRS + row) * TOKENS + t) =
        *reinterpret_cast<const uint4*>(d_v + static_cast<size_t>(row) * TOKENS + t);
    return;
  }
  const int head = y / 32, i = y % 32, s = t % SEQ;
  const HALF* from = head < HEADS ? d_q + static_cast<size_t>(head * 64 + i) * TOKENS
                                  : d_k + static_cast<size_t>((head - HEADS) * 64 + i) * TOKENS;
  Chunk x0, x1, out0, out1;
  x0.words = *reinterpret_cast<const uint4*>(from + t);
  x1.words = *reinterpret_cast<const uint4*>(from + 32 * static_cast<size_t>(TOKENS) + t);
  const float4* c4 = reinterpret_cast<const float4*>(cosine + i * SEQ + s);
  const float4* s4 = reinterpret_cast<const float4*>(sine + i * SEQ + s);
  const float4 ca = c4[0], cb = c4[1], sa = s4[0], sb = s4[1];
  const float c[8] = {ca.x, ca.y, ca.z, ca.w, cb.x, cb.y, cb.z, cb.w};
  const float sn[8] = {sa.x, sa.y, sa.z, sa.w, sb.x, sb.y, sb.z, sb.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float a = to_float(x0.halves[e]), b = to_float(x1.halves[e]);
    out0.halves[e] = to_half(a * c[e] + b * sn[e]);
    out1.halves[e] = to_half(b * c[e] - a * sn[e]);
  }
  HALF* to = qkv_gradient + static_cast<size_t>(head * 64 + i) * TOKENS + t;
  *reinterpret_cast<uint4*>(to) = out0.words;
  *reinterpret_cast<uint4*>(to + 32 * static_cast<size_t>(TOKENS)) = out1.words;
}
