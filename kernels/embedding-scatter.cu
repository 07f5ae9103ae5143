// gradient[id][:] += the sum of dy[p][:] over the positions p naming token id,
// in increasing p: deterministic, with no atomics. A warp per position t; only
// the warp of the first position naming its token adds, the others stop as soon
// as they see an earlier one. A block's warps take WARPS consecutive positions
// a round, the grid's blocks (a wave) striding over the positions, and share
// the ids, staged through shared memory CHUNK at a time: a block reads them
// once (every round, when they take more than one chunk), all of a thread's
// loads in flight together (the plan copies the ids from the host's staging
// window to the device first: read from there by every block, they would cross
// the bus once a block). A warp looks for its token among 128 staged ids a step
// (four a lane, one 16-byte load) and, where one names it, compares them 32 at
// a time (a ballot) and adds the later rows naming its token in position order,
// LOOKAHEAD rows' loads in flight at a time (a frequent token's chain is then
// not one memory latency a row); lane i holds columns i, i + 32, ... of the row
// sum. Ids outside the vocabulary are clamped to it, so no write leaves the
// table.
#include "common.cuh"

constexpr int THREADS = BLOCK;
constexpr int WARPS = THREADS / 32;  // positions a block takes a round
constexpr int PER_LANE = (WIDTH + 31) / 32;
constexpr int CHUNK = ROWS < 8192 ? ROWS : 8192;
constexpr int STAGED = (CHUNK + 127) / 128 * 128;  // whole steps of 128, NO_TOKEN past the chunk
constexpr int CHUNK_LOADS = (STAGED + THREADS - 1) / THREADS;  // a thread's share of a chunk
constexpr bool ONE_CHUNK = CHUNK == ROWS;  // staged once, for every round
constexpr int LOOKAHEAD = 4;
constexpr unsigned NO_TOKEN = 0xffffffffu;  // past the last position: names no token

__device__ __forceinline__ unsigned token(const int* ids, int p) {
  return min(static_cast<unsigned>(ids[p]), static_cast<unsigned>(VOCAB - 1));
}

// staged[i] = the token at position chunk + i, NO_TOKEN past the chunk or the last
__device__ __forceinline__ void stage(unsigned* staged, const int* ids, int chunk) {
  unsigned loaded[CHUNK_LOADS];
#pragma unroll
  for (int j = 0; j < CHUNK_LOADS; ++j) {
    const int p = chunk + threadIdx.x + j * THREADS;
    loaded[j] = p < ROWS && threadIdx.x + j * THREADS < CHUNK ? token(ids, p) : NO_TOKEN;
  }
#pragma unroll
  for (int j = 0; j < CHUNK_LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < STAGED) staged[i] = loaded[j];
  }
}

// sum += the rows named by `later`'s set bits (positions base + bit), in
// increasing position, up to LOOKAHEAD rows loaded before any is added
__device__ __forceinline__ void add_rows(float (&sum)[PER_LANE], const float* dy, unsigned later, int base, int lane) {
  while (later != 0) {
    const int rows = min(__popc(later), LOOKAHEAD);
    float row[LOOKAHEAD][PER_LANE];
#pragma unroll
    for (int r = 0; r < LOOKAHEAD; ++r) {
      if (r < rows) {
        const size_t at = static_cast<size_t>(base + __ffs(later) - 1) * WIDTH;
        later &= later - 1;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
          const int column = lane + 32 * i;
          if (column < WIDTH) row[r][i] = dy[at + column];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < LOOKAHEAD; ++r)
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i)
        if (r < rows && lane + 32 * i < WIDTH) sum[i] += row[r][i];
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
image(float* __restrict__ gradient, const float* __restrict__ dy, const int* __restrict__ ids) {
  await_previous_launch();
  __shared__ __align__(16) unsigned staged[STAGED];
  const int lane = threadIdx.x & 31;
  if constexpr (ONE_CHUNK) {
    stage(staged, ids, 0);
    __syncthreads();
  }
  for (int round = blockIdx.x * WARPS; round < ROWS; round += gridDim.x * WARPS) {
    const int t = round + (threadIdx.x >> 5);
    // warp-uniform: no earlier position names the token (a warp past the
    // last position only helps stage the ids)
    bool first = t < ROWS;
    const unsigned id = !first ? NO_TOKEN : ONE_CHUNK ? staged[t] : token(ids, t);

    float sum[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int column = lane + 32 * i;
      sum[i] = first && column < WIDTH ? dy[static_cast<size_t>(t) * WIDTH + column] : 0.0f;
    }
    for (int chunk = 0; chunk < ROWS; chunk += CHUNK) {
      if constexpr (!ONE_CHUNK) {
        __syncthreads();  // every warp is done with the previous chunk
        stage(staged, ids, chunk);
        __syncthreads();
      }
      for (int step = 0; first && step < CHUNK; step += 128) {
        const uint4 four = reinterpret_cast<const uint4*>(staged + step)[lane];
        if (!__any_sync(0xffffffffu, four.x == id || four.y == id || four.z == id || four.w == id)) continue;
        for (int part = step; part < step + 128; part += 32) {
          const int p = chunk + part + lane;
          const bool same = staged[part + lane] == id;  // never past the last: those are NO_TOKEN
          if (__ballot_sync(0xffffffffu, same && p < t) != 0) {
            first = false;
            break;
          }
          add_rows(sum, dy, __ballot_sync(0xffffffffu, same && p > t), chunk + part, lane);
        }
      }
    }
    if (first) {
      float* to = gradient + static_cast<size_t>(id) * WIDTH;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) {
        const int column = lane + 32 * i;
        if (column < WIDTH) to[column] += sum[i];
      }
    }
  }
}
