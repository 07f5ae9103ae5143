// values_t[b][g][d][s] = value head g's column d at token b SEQ + s, in the half
// format as the product left it. A block per 64 positions of one (batch, K/V
// head): the 64 x 64 tile is read by rows, staged in shared memory as binary32
// (exactly; rows padded to 65 words, so the column reads do not conflict) and
// written by columns, two halves a word.
#include "common.cuh"

constexpr int QKV = (HEADS + 2 * KV_HEADS) * 64;
static_assert(SEQ % 64 == 0, "whole tiles");

extern "C" __global__ void __launch_bounds__(BLOCK) image(HALF* __restrict__ values_t, const HALF* __restrict__ qkv) {
  await_previous_launch();
  __shared__ float tile[64][65];
  const int s0 = blockIdx.x * 64, g = blockIdx.y, b = blockIdx.z;
  const HALF* from = qkv + static_cast<size_t>(b * SEQ + s0) * QKV + (HEADS + KV_HEADS + g) * 64;
  for (int i = threadIdx.x; i < 64 * 64; i += BLOCK) tile[i / 64][i % 64] = to_float(from[static_cast<size_t>(i / 64) * QKV + i % 64]);
  __syncthreads();
  HALF* to = values_t + static_cast<size_t>(b * KV_HEADS + g) * 64 * SEQ + s0;
  for (int i = threadIdx.x; i < 64 * 32; i += BLOCK) {
    const int d = i / 32, s = 2 * (i % 32);
    *reinterpret_cast<unsigned*>(to + static_cast<size_t>(d) * SEQ + s) = pack_halves(tile[s][d], tile[s + 1][d]);
  }
}
