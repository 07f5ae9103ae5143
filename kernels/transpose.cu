// out[g][c][r] = in[g][r][c] for each group's ROWS x COLUMNS matrix of 16-bit
// words. A block per 64 x 64 tile: read by rows two words a thread, staged in
// shared memory (rows padded to 65 words, so the column reads do not
// conflict), written by rows of the transpose two words a thread.
#include "common.cuh"

static_assert(ROWS % 64 == 0 && COLUMNS % 64 == 0, "whole tiles");

extern "C" __global__ void __launch_bounds__(BLOCK) image(HALF* __restrict__ out, const HALF* __restrict__ in) {
  await_previous_launch();
  __shared__ HALF tile[64][65];
  const int c0 = blockIdx.x * 64, r0 = blockIdx.y * 64;
  const size_t group = static_cast<size_t>(blockIdx.z) * ROWS * COLUMNS;
  for (int i = threadIdx.x; i < 64 * 32; i += BLOCK) {
    const int r = i / 32, pair = 2 * (i % 32);
    const unsigned v = *reinterpret_cast<const unsigned*>(in + group + static_cast<size_t>(r0 + r) * COLUMNS + c0 + pair);
    tile[r][pair] = static_cast<HALF>(v & 0xffffu);
    tile[r][pair + 1] = static_cast<HALF>(v >> 16);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 64 * 32; i += BLOCK) {
    const int c = i / 32, pair = 2 * (i % 32);
    *reinterpret_cast<unsigned*>(out + group + static_cast<size_t>(c0 + c) * ROWS + r0 + pair) =
        static_cast<unsigned>(tile[pair][c]) | static_cast<unsigned>(tile[pair + 1][c]) << 16;
  }
}
