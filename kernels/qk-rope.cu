// The queries, keys and values of TOKENS consecutive tokens of one sequence
// (a block per TOKENS tokens t = b SEQ + s, WARPS warps a token), laid out by
// head, the queries and keys rotated: qkv is [T][(HEADS + 2 KV_HEADS) 64] in
// the half format (the product rounds it), the query heads, then the key
// heads, then the value heads. Columns i and i + 32 of a head (i < 32) turn
// by the angle of rotary column i at position s, in binary32:
//   out_i = x_i cos - x_{i+32} sin,  out_{i+32} = x_{i+32} cos + x_i sin,
// cos = cosine[i SEQ + s], sin = sine[i SEQ + s]. queries[b][h][s][64],
// keys[b][g][s][64] and values[b][g][s][64] are in the half format (the
// values as the product rounded them). Warp w takes token w % TOKENS and
// every WARPS-th head from w / TOKENS, a lane a rotary column i of those
// heads.
#include "common.cuh"

static_assert(BLOCK == 32 * TOKENS * WARPS && SEQ % TOKENS == 0, "warps a token, a block's tokens in one sequence");

// the thread's token (in the block), first head and rotary column
struct RopeLane {
  int token, head, i;
};

__device__ __forceinline__ RopeLane rope_lane() {
  const int warp = threadIdx.x / 32;
  return {warp % TOKENS, warp / TOKENS, static_cast<int>(threadIdx.x % 32)};
}

// The rotary angles of positions [s0, s0 + TOKENS), from the column-major
// tables (cosine[i SEQ + s]): a column's TOKENS positions lie side by side,
// so TOKENS lanes read them in one sector together, where a lane per column
// of one token reads a sector for each of its four bytes (a block per token
// took 53.1 us for the 16 qk-rope launches at 1 x 1024 and 281 at 8 x 1024;
// so, 45.8 and 200). Rows padded to 33 so that neither the writes nor the
// reads share banks much.
struct Angles {
  float cosine[TOKENS][33], sine[TOKENS][33];

  // the first 32 TOKENS threads read one of each table; the block waits for
  // them at the caller's barrier
  __device__ __forceinline__ void load(const float* cosines, const float* sines, int s0) {
    if (threadIdx.x >= 32 * TOKENS) return;
    const int i = threadIdx.x / TOKENS, token = threadIdx.x % TOKENS;
    cosine[token][i] = cosines[i * SEQ + s0 + token];
    sine[token][i] = sines[i * SEQ + s0 + token];
  }
};

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;
constexpr int ROTATED = (HEADS + KV_HEADS) * 64;  // a token's query and key columns
static_assert(ROTATED % 8 == 0 && QKV % 8 == 0, "whole 16-byte chunks");

extern "C" __global__ void __launch_bounds__(BLOCK)
image(HALF* __restrict__ queries, HALF* __restrict__ keys, HALF* __restrict__ values, const HALF* __restrict__ qkv,
      const float* __restrict__ cosine, const float* __restrict__ sine) {
  await_previous_launch();
  const int t0 = blockIdx.x * TOKENS, b = t0 / SEQ, s0 = t0 % SEQ;
  // the tokens' query and key columns staged in 16-byte chunks
  __shared__ alignas(16) HALF rows[TOKENS][ROTATED];
  __shared__ Angles angles;
  angles.load(cosine, sine, s0);
  const uint4* from = reinterpret_cast<const uint4*>(qkv + static_cast<size_t>(t0) * QKV);
  for (int chunk = threadIdx.x; chunk < TOKENS * ROTATED / 8; chunk += BLOCK) {
    const int token = chunk / (ROTATED / 8), at = chunk % (ROTATED / 8);
    reinterpret_cast<uint4*>(rows[token])[at] = from[token * QKV / 8 + at];
  }
  // the value heads' 16-byte chunks go straight to their places
  for (int chunk = threadIdx.x; chunk < TOKENS * KV_HEADS * 8; chunk += BLOCK) {
    const int token = chunk / (KV_HEADS * 8), g = chunk / 8 % KV_HEADS;
    reinterpret_cast<uint4*>(values + (static_cast<size_t>(b * KV_HEADS + g) * SEQ + s0 + token) * 64)[chunk % 8] =
        from[token * QKV / 8 + ROTATED / 8 + chunk % (KV_HEADS * 8)];
  }
  __syncthreads();
  // each lane turns its column pair of its warp's heads of its token in
  // place, then the warp stores them in 16-byte chunks
  const RopeLane lane = rope_lane();
  const int s = s0 + lane.token;
  const float c = angles.cosine[lane.token][lane.i], sn = angles.sine[lane.token][lane.i];
  HALF* const row = rows[lane.token];
  for (int head = lane.head; head < HEADS + KV_HEADS; head += WARPS) {
    HALF* const pair = row + head * 64 + lane.i;
    const float x0 = to_float(pair[0]), x1 = to_float(pair[32]);
    pair[0] = to_half(x0 * c - x1 * sn);
    pair[32] = to_half(x1 * c + x0 * sn);
  }
  __syncwarp();
  // a head is eight chunks: lanes 8 k to 8 k + 7 store the warp's k-th head
  // of every four
  for (int head = lane.head + lane.i / 8 * WARPS; head < HEADS + KV_HEADS; head += 4 * WARPS) {
    HALF* to = head < HEADS ? queries + (static_cast<size_t>(b * HEADS + head) * SEQ + s) * 64
                            : keys + (static_cast<size_t>(b * KV_HEADS + head - HEADS) * SEQ + s) * 64;
    reinterpret_cast<uint4*>(to)[lane.i % 8] = reinterpret_cast<const uint4*>(row + head * 64)[lane.i % 8];
  }
}
