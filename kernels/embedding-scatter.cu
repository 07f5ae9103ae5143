// gradient[id][:] += the sum of dy[p][:] over the positions p naming token id,
// in increasing p: deterministic, with no atomics. A block per position t; only
// the block of the first position naming its token adds, the others return.
// That block finds the later positions naming the token BLOCK at a time (a
// ballot per warp, the matches then visited in position order). Ids outside
// the vocabulary are clamped to it, so no write leaves the table.
#include "common.cuh"

constexpr int THREADS = BLOCK;
constexpr int PER_THREAD = (WIDTH + THREADS - 1) / THREADS;

__device__ __forceinline__ unsigned token(const int* ids, int p) {
  return min(static_cast<unsigned>(ids[p]), static_cast<unsigned>(VOCAB - 1));
}

extern "C" __global__ void __launch_bounds__(THREADS)
image(float* __restrict__ gradient, const float* __restrict__ dy, const int* __restrict__ ids) {
  await_previous_launch();
  __shared__ unsigned matches[THREADS / 32];
  const int t = blockIdx.x;
  const unsigned id = token(ids, t);
  bool earlier = false;
  for (int p = threadIdx.x; p < t; p += THREADS) earlier |= token(ids, p) == id;
  if (__syncthreads_or(earlier)) return;

  float sum[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    sum[i] = column < WIDTH ? dy[static_cast<size_t>(t) * WIDTH + column] : 0.0f;
  }
  for (int base = t + 1; base < ROWS; base += THREADS) {
    const int p = base + threadIdx.x;
    const unsigned ballot = __ballot_sync(0xffffffffu, p < ROWS && token(ids, p) == id);
    if ((threadIdx.x & 31) == 0) matches[threadIdx.x >> 5] = ballot;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) {
      for (unsigned m = matches[w]; m != 0; m &= m - 1) {
        const size_t row = static_cast<size_t>(base + 32 * w + __ffs(m) - 1) * WIDTH;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
          const int column = threadIdx.x + i * THREADS;
          if (column < WIDTH) sum[i] += dy[row + column];
        }
      }
    }
    __syncthreads();
  }
  float* to = gradient + static_cast<size_t>(id) * WIDTH;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int column = threadIdx.x + i * THREADS;
    if (column < WIDTH) to[column] += sum[i];
  }
}
