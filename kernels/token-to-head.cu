// heads[b][h][s][d] = the half of merged[b SEQ + s][h 64 + d]: a block per
// token, a thread per pair of columns.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK) image(HALF* __restrict__ heads, const float* __restrict__ merged) {
  await_previous_launch();
  const int t = blockIdx.x, b = t / SEQ, s = t % SEQ;
  const float2* from = reinterpret_cast<const float2*>(merged + static_cast<size_t>(t) * HEADS * 64);
  for (int pair = threadIdx.x; pair < HEADS * 32; pair += BLOCK) {
    const int h = pair / 32, d = 2 * (pair % 32);
    const float2 v = from[pair];
    *reinterpret_cast<unsigned*>(heads + (static_cast<size_t>(b * HEADS + h) * SEQ + s) * 64 + d) =
        pack_halves(v.x, v.y);
  }
}
