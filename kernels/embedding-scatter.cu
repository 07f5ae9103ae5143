// gradient[id][:] += the sum of dy[p][:] over the positions p naming token id,
// in increasing p: deterministic, with no atomics. A warp per position t; only
// the warp of the first position naming its token adds, the others stop as
// soon as they see an earlier one. The block's warps take WARPS consecutive
// positions and share the ids, staged through shared memory CHUNK at a time
// (the ids lie in the host's staging window: each block reads them once, not
// once per position). A warp compares 32 staged ids a step (a ballot) and adds
// the later rows naming its token in position order; lane i holds columns
// i, i + 32, ... of the row sum. Ids outside the vocabulary are clamped to it,
// so no write leaves the table.
#include "common.cuh"

constexpr int THREADS = BLOCK;
constexpr int WARPS = THREADS / 32;  // positions a block takes
constexpr int PER_LANE = (WIDTH + 31) / 32;
constexpr int CHUNK = ROWS < 4096 ? ROWS : 4096;
constexpr unsigned NO_TOKEN = 0xffffffffu;  // past the last position: names no token

__device__ __forceinline__ unsigned token(const int* ids, int p) {
  return min(static_cast<unsigned>(ids[p]), static_cast<unsigned>(VOCAB - 1));
}

extern "C" __global__ void __launch_bounds__(THREADS)
image(float* __restrict__ gradient, const float* __restrict__ dy, const int* __restrict__ ids) {
  await_previous_launch();
  __shared__ unsigned staged[CHUNK];
  const int lane = threadIdx.x & 31, t = blockIdx.x * WARPS + (threadIdx.x >> 5);
  // warp-uniform: no earlier position names the token (a warp past the last
  // position only helps stage the ids)
  bool first = t < ROWS;
  const unsigned id = first ? token(ids, t) : NO_TOKEN;

  float sum[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int column = lane + 32 * i;
    sum[i] = first && column < WIDTH ? dy[static_cast<size_t>(t) * WIDTH + column] : 0.0f;
  }
  for (int chunk = 0; chunk < ROWS; chunk += CHUNK) {
    __syncthreads();  // every warp is done with the previous chunk
    for (int i = threadIdx.x; i < CHUNK; i += THREADS) staged[i] = chunk + i < ROWS ? token(ids, chunk + i) : NO_TOKEN;
    __syncthreads();
    for (int step = 0; first && step < CHUNK; step += 32) {
      const int p = chunk + step + lane;
      const bool same = step + lane < CHUNK && staged[step + lane] == id;
      if (__ballot_sync(0xffffffffu, same && p < t) != 0) {
        first = false;
        break;
      }
      for (unsigned later = __ballot_sync(0xffffffffu, same && p > t); later != 0; later &= later - 1) {
        const size_t row = static_cast<size_t>(chunk + step + __ffs(later) - 1) * WIDTH;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
          const int column = lane + 32 * i;
          if (column < WIDTH) sum[i] += dy[row + column];
        }
      }
    }
  }
  if (!first) return;
  float* to = gradient + static_cast<size_t>(id) * WIDTH;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int column = lane + 32 * i;
    if (column < WIDTH) to[column] += sum[i];
  }
}
