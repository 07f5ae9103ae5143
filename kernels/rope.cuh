// The rotary image's (qk-rope's) geometry: a block takes
// TOKENS consecutive tokens of one sequence with WARPS warps a token (warp w
// takes token w % TOKENS and every WARPS-th head from w / TOKENS), a lane a
// rotary column i (< 32) of those heads; and the angles of the block's
// positions.
#pragma once
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
