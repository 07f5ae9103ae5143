// The queries, keys and values of one token (a block per token t = b SEQ + s),
// laid out by head, the queries and keys rotated: qkv is
// [T][(HEADS + 2 KV_HEADS) 64] in the half format (the product rounds it),
// the query heads, then the key heads, then the value heads. Columns i and
// i + 32 of a head (i < 32) turn by the angle of rotary column i at position
// s, in binary32:
//   out_i = x_i cos - x_{i+32} sin,  out_{i+32} = x_{i+32} cos + x_i sin,
// cos = cosine[i SEQ + s], sin = sine[i SEQ + s]. queries[b][h][s][64],
// keys[b][g][s][64] and values[b][g][s][64] are in the half format (the
// values as the product rounded them).
#include "common.cuh"

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;
constexpr int ROTATED = (HEADS + KV_HEADS) * 64;  // the token's query and key columns
static_assert(ROTATED % 8 == 0 && QKV % 8 == 0, "whole 16-byte chunks");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ queries, HALF* __restrict__ keys, HALF* __restrict__ values, const HALF* __restrict__ qkv,
      const float* __restrict__ cosine, const float* __restrict__ sine) {
  await_previous_launch();
  static_assert(BLOCK % 32 == 0, "a thread keeps its rotary column across heads");
  const int t = blockIdx.x, b = t / SEQ, s = t % SEQ, i = threadIdx.x % 32;
  // the token's query and key columns staged in 16-byte chunks (one load a
  // thread at the default shape), then rotated from shared memory
  __shared__ alignas(16) HALF row[ROTATED];
  const uint4* from = reinterpret_cast<const uint4*>(qkv + static_cast<size_t>(t) * QKV);
  for (int chunk = threadIdx.x; chunk < ROTATED / 8; chunk += BLOCK) reinterpret_cast<uint4*>(row)[chunk] = from[chunk];
  // the value heads' 16-byte chunks go straight to their places
  for (int chunk = threadIdx.x; chunk < KV_HEADS * 8; chunk += BLOCK)
    reinterpret_cast<uint4*>(values + (static_cast<size_t>(b * KV_HEADS + chunk / 8) * SEQ + s) * 64)[chunk % 8] =
        from[ROTATED / 8 + chunk];
  // the column's angle, read once: the tables are column-major, so each read
  // touches a line of its own
  const float c = cosine[i * SEQ + s], sn = sine[i * SEQ + s];
  __syncthreads();
  for (int pair = threadIdx.x; pair < (HEADS + KV_HEADS) * 32; pair += BLOCK) {
    const int head = pair / 32;
    const float x0 = to_float(row[head * 64 + i]), x1 = to_float(row[head * 64 + i + 32]);
    HALF* to = head < HEADS ? queries + (static_cast<size_t>(b * HEADS + head) * SEQ + s) * 64
                            : keys + (static_cast<size_t>(b * KV_HEADS + head - HEADS) * SEQ + s) * 64;
    to[i] = to_half(x0 * c - x1 * sn);
    to[i + 32] = to_half(x1 * c + x0 * sn);
  }
}
