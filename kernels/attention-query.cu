// Causal attention, backward, the query launch: a block per (64 queries, query
// head h, batch b), K/V head g = h / GROUP, no atomics. With the forward's
// base-2 log-sum-exp L and the row terms D = sum_d d_out O (the context
// gradient's product forms them in its epilogue, tiled-heads, so this launch
// and the key launch run side by side),
// P = 2^(q.k stream_scale - L) is recomputed tile by tile, then
// dP = d_out V^T, dS = P (dP - D) and d_q = score_scale dS K, accumulated in
// registers over the part's key tiles up to the diagonal in increasing order;
// the parts' sums then meet in part order. The key and value tiles
// ([b][g][s][64], half) are double-buffered in each part's shared memory; K
// serves both S = Q K^T (its rows) and dQ = dS K (its columns). d_q is
// turned back by the rotary angles of its positions (the tables cosine and
// sine, [32][SEQ]) and written in the half format, transposed, as the query
// rows of the qkv gradient: d_q[h 64 + c][b SEQ + s] (store_turned).
#include "attention.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms,
      HALF* __restrict__ d_q, const float* __restrict__ cosine, const float* __restrict__ sine, float stream_scale,
      float score_scale) {
  await_previous_launch();
  const WalkPlace block = walk_place();  // the last query tile walks every key tile: the longest walks first
  const int tile = TILES - 1 - block.rank, h = block.head, b = block.batch, g = h / GROUP;
  const int part = threadIdx.x / PART_THREADS, thread = threadIdx.x % PART_THREADS;
  const int warp = thread >> 5, lane = thread & 31;
  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  const size_t q_plane = static_cast<size_t>(b * HEADS + h) * SEQ * HEAD;
  // the part's stages: keys of buffer 0 and 1, values of buffer 0 and 1, then
  // the block's own queries and their d_out rows (OwnRows)
  HALF* const stages = part_stages<6 * TILE_HALVES>(part);
  const int walk = tile >= part ? (tile - part) / PARTS + 1 : 0;  // the part's key tiles part, part + PARTS, ...

  auto copy_pair = [&](int i) {
    const size_t at = kv_plane + static_cast<size_t>(part + i * PARTS) * TILE * HEAD;
    copy_tile(stages + (i & 1) * TILE_HALVES, k + at, HEAD, thread);
    copy_tile(stages + (2 + (i & 1)) * TILE_HALVES, v + at, HEAD, thread);
    copy_commit();
  };
  OwnRows fq, fdo;  // (a part without tiles uses neither, and copies nothing it would not wait for)
  if (walk > 0) {
    fq = own_rows(stages + 4 * TILE_HALVES, q + q_plane, tile, thread);
    fdo = own_rows(stages + 5 * TILE_HALVES, d_out + q_plane, tile, thread);
    copy_pair(0);
  }

  const int row0 = tile * TILE + 16 * warp, s0 = row0 + (lane >> 2);

  // L and D of this thread's rows s0 and s0 + 8
  float lse[2], d[2];
#pragma unroll
  for (int half_row = 0; half_row < 2; ++half_row) {
    const size_t at = static_cast<size_t>(b * HEADS + h) * SEQ + s0 + 8 * half_row;
    lse[half_row] = log_sum_exp[at];
    d[half_row] = row_terms[at];
  }

  float dq[8][4];
  clear(dq);
  fence_sums(dq);
  for (int i = 0; i < walk; ++i) {
    // tile i has landed and every warp of the part is done with tile i - 1,
    // whose buffers the copy of tile i + 1 (overlapping this tile's work) takes
    // (tile i - 1's dQ, in flight until here, has read its keys)
    begin_step(part);
    if (i + 1 < walk) copy_pair(i + 1);
    const int j = part + i * PARTS;
    const HALF* keys = stages + (i & 1) * TILE_HALVES;

    float s[8][4], dp[8][4];
    multiply_rows(s, fq, keys);                                    // S = Q K^T
    multiply_rows(dp, fdo, stages + (2 + (i & 1)) * TILE_HALVES);  // dP = dO V^T
    await_products();
    if (j == tile) mask_diagonal<false>(s, warp, lane);  // the part's last tile (in one part)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = fast_exp2(s[n][e] * stream_scale - lse[e >> 1]) * (dp[n][e] - d[e >> 1]);  // dS
    unsigned fds[4][4];
    to_fragments(fds, s);
    multiply_columns(dq, fds, keys);  // dQ += dS K
  }
  const Angles angles = angles_of({cosine, sine, tile * TILE}, thread);
  await_products();
  fence_sums(dq);

  if (!meet_parts(reinterpret_cast<float(&)[32]>(dq), part, thread, add_values<32>)) return;
  store_turned(dq, score_scale, angles, d_q + static_cast<size_t>(h) * HEAD * TOKENS + b * SEQ + tile * TILE, stages,
               thread);
}
