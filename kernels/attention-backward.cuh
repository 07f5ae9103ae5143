// The streaming attention backward's two walks, which the query and key
// images each take alone and the backward image takes one after the other
// (attention-backward.cu). A part's walk reads and writes only the part's
// stages it is given; the parts' sums meet in the first part's, which then
// stores the walk's gradients through its stages, while the later parts
// return.
//
// The key walk, a block per (64 keys, K/V head g, batch b): the block's K
// and V rows are the A operand of its score products (OwnRows: on sm_90a
// tiles in the part's shared memory, elsewhere each warp's fragments of its
// 16 keys), and each part walks, in a fixed order, the
// group's query heads and, for each, the query tiles from the key tile's
// (the diagonal, masked) to the last:
//   S^T = K Q^T, dP^T = V dO^T, P^T = 2^(S^T stream_scale - L),
//   dS^T = P^T (dP^T - D), d_v += P^T dO, d_k += dS^T Q,
// L the forward's base-2 log-sum-exp and D the row terms the context
// gradient's product forms (tiled-heads). The parts take every PARTS-th step
// of that walk. The query and d_out tiles ([b][h][s][64], half) and their L
// and D are double-buffered in each part's stages; each tile serves both as
// rows (S^T, dP^T) and as columns (d_v, d_k). d_k = score_scale (the sum),
// turned back by the rotary angles of its positions (the tables cosine and
// sine, [32][SEQ]; store_turned), and d_v are written in the half format,
// transposed, as the key and value rows of the qkv gradient:
// d_k[g 64 + c][b SEQ + s], d_v likewise (store_transposed).
//
// The query walk, a block per (64 queries, query head h, batch b), K/V head
// g = h / GROUP: P = 2^(q.k stream_scale - L) is recomputed tile by tile,
// then dP = d_out V^T, dS = P (dP - D) and d_q = score_scale dS K,
// accumulated in registers over the part's key tiles up to the diagonal in
// increasing order. The key and value tiles ([b][g][s][64], half) are
// double-buffered in each part's stages; K serves both S = Q K^T (its rows)
// and dQ = dS K (its columns). d_q is turned back by the rotary angles of its
// positions and written in the half format, transposed, as the query rows of
// the qkv gradient: d_q[h 64 + c][b SEQ + s] (store_turned).
#pragma once
#include "attention.cuh"

// the key walk's two stages: a query tile and its d_out rows each (tiles
// 1024-byte aligned), then their L and D, so that together they take whole
// kilobytes
struct alignas(1024) KeyStages {
  HALF queries[2][TILE_HALVES], gradients[2][TILE_HALVES];
  float lse[2][TILE], d[2][TILE];
};
// the query walk's stages: keys of buffer 0 and 1, values of buffer 0 and 1,
// then the block's own queries and their d_out rows (OwnRows)
constexpr int QUERY_HALVES = 6 * TILE_HALVES;
// the key walk's: its stages, then on sm_90a the block's own keys and values
// (OwnRows; elsewhere each warp's fragments)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int KEY_HALVES = sizeof(KeyStages) / sizeof(HALF) + 2 * TILE_HALVES;
#else
constexpr int KEY_HALVES = sizeof(KeyStages) / sizeof(HALF);
#endif
// a part's stages in the backward image, which gives both walks the same
constexpr int PART_HALVES = QUERY_HALVES > KEY_HALVES ? QUERY_HALVES : KEY_HALVES;

// the inputs both walks read
struct Inputs {
  const HALF *q, *k, *v, *d_out;
  const float *log_sum_exp, *row_terms, *cosine, *sine;
  float stream_scale, score_scale;
};

__device__ __forceinline__ void key_walk(const Inputs& in, HALF* d_k, HALF* d_v, HALF* part_halves, int tile, int g,
                                         int b, int part, int thread) {
  const int warp = thread >> 5, lane = thread & 31;
  const int query_tiles = TILES - tile, steps = GROUP * query_tiles;
  KeyStages& stages = *reinterpret_cast<KeyStages*>(part_halves);  // the part's
  const int walk = steps > part ? (steps - 1 - part) / PARTS + 1 : 0;  // the part's steps part, part + PARTS, ...

  // step i: query head g GROUP + i / query_tiles, query tile tile + i %
  // query_tiles, kept as that pair and moved PARTS steps on at a time rather
  // than divided out at each step
  struct Step {
    int head, tile;  // in the group; from the key tile's
  };
  auto advance = [&](Step& at, int by) {
    at.tile += by;
    while (at.tile >= query_tiles) at.tile -= query_tiles, ++at.head;
  };
  Step now{0, 0};  // the step the walk is at
  advance(now, part);
  auto copy_step = [&](int n, const Step& at) {
    const int buffer = n & 1;
    const size_t rows = static_cast<size_t>(b * HEADS + g * GROUP + at.head) * SEQ + (tile + at.tile) * TILE;
    copy_tile(stages.queries[buffer], in.q + rows * HEAD, HEAD, thread);
    copy_tile(stages.gradients[buffer], in.d_out + rows * HEAD, HEAD, thread);
    if (thread < TILE / 4) {
      copy_async(stages.lse[buffer] + 4 * thread, in.log_sum_exp + rows + 4 * thread);
    } else if (thread < TILE / 2) {
      copy_async(stages.d[buffer] + 4 * (thread - TILE / 4), in.row_terms + rows + 4 * (thread - TILE / 4));
    }
    copy_commit();
  };
  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  HALF* const own = part_halves + sizeof(KeyStages) / sizeof(HALF);
  OwnRows fk, fv;  // (a part without steps uses neither, and copies nothing it would not wait for)
  if (walk > 0) {
    fk = own_rows(own, in.k + kv_plane, tile, thread);
    fv = own_rows(own + TILE_HALVES, in.v + kv_plane, tile, thread);
    copy_step(0, now);
  }

  float dk[8][4], dv[8][4];
  clear(dk);
  clear(dv);
  fence_sums(dk);
  fence_sums(dv);
  for (int n = 0; n < walk; ++n) {
    // step n's tiles have landed and every warp of the part is done with step
    // n - 1's, whose buffers the copy of step n + 1 (overlapping this step's
    // work) takes
    // (step n - 1's d_v and d_k products, in flight until here, have read
    // its tiles)
    begin_step(part);
    const bool diagonal = now.tile == 0;
    advance(now, PARTS);
    const int buffer = n & 1;

    float s[8][4], dp[8][4];
    multiply_rows(s, fk, stages.queries[buffer]);     // S^T = K Q^T
    multiply_rows(dp, fv, stages.gradients[buffer]);  // dP^T = V dO^T
    if (n + 1 < walk) copy_step(n + 1, now);  // issued while S^T and dP^T are formed
    await_products();
    if (diagonal) mask_diagonal<true>(s, warp, lane);  // the head's first query tile
    // element (key 16 warp + lane / 4 + 8 (e / 2), query 8 c + 2 (lane % 4) + e % 2)
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int query = 8 * c + 2 * (lane & 3);
      const float2 lse = *reinterpret_cast<const float2*>(stages.lse[buffer] + query);
      const float2 d = *reinterpret_cast<const float2*>(stages.d[buffer] + query);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = fast_exp2(s[c][e] * in.stream_scale - ((e & 1) ? lse.y : lse.x));
        s[c][e] = p;                                        // P^T
        dp[c][e] = p * (dp[c][e] - ((e & 1) ? d.y : d.x));  // dS^T
      }
    }
    unsigned fp[4][4], fds[4][4];
    to_fragments(fp, s);
    to_fragments(fds, dp);
    multiply_columns(dv, fp, stages.gradients[buffer]);  // dV += P^T dO
    multiply_columns(dk, fds, stages.queries[buffer]);   // dK += dS^T Q
  }
  const Angles angles = angles_of({in.cosine, in.sine, tile * TILE}, thread);
  await_products();
  fence_sums(dk);
  fence_sums(dv);

  float sums[2][8][4];  // d_k's, then d_v's
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) sums[0][c][e] = dk[c][e], sums[1][c][e] = dv[c][e];
  if (!meet_parts(reinterpret_cast<float(&)[64]>(sums), part, thread, add_values<64>)) return;
  const size_t at = static_cast<size_t>(g) * HEAD * TOKENS + b * SEQ + tile * TILE;
  store_transposed(sums[1], 1.0f, d_v + at, part_halves, thread);  // the values first, while the angles land
  store_turned(sums[0], in.score_scale, angles, d_k + at, part_halves, thread);
}

__device__ __forceinline__ void query_walk(const Inputs& in, HALF* d_q, HALF* stages, int tile, int h, int b,
                                           int part, int thread) {
  const int warp = thread >> 5, lane = thread & 31, g = h / GROUP;
  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  const size_t q_plane = static_cast<size_t>(b * HEADS + h) * SEQ * HEAD;
  const int walk = tile >= part ? (tile - part) / PARTS + 1 : 0;  // the part's key tiles part, part + PARTS, ...

  auto copy_pair = [&](int i) {
    const size_t at = kv_plane + static_cast<size_t>(part + i * PARTS) * TILE * HEAD;
    copy_tile(stages + (i & 1) * TILE_HALVES, in.k + at, HEAD, thread);
    copy_tile(stages + (2 + (i & 1)) * TILE_HALVES, in.v + at, HEAD, thread);
    copy_commit();
  };
  OwnRows fq, fdo;  // (a part without tiles uses neither, and copies nothing it would not wait for)
  if (walk > 0) {
    fq = own_rows(stages + 4 * TILE_HALVES, in.q + q_plane, tile, thread);
    fdo = own_rows(stages + 5 * TILE_HALVES, in.d_out + q_plane, tile, thread);
    copy_pair(0);
  }

  const int row0 = tile * TILE + 16 * warp, s0 = row0 + (lane >> 2);

  // L and D of this thread's rows s0 and s0 + 8
  float lse[2], d[2];
#pragma unroll
  for (int half_row = 0; half_row < 2; ++half_row) {
    const size_t at = static_cast<size_t>(b * HEADS + h) * SEQ + s0 + 8 * half_row;
    lse[half_row] = in.log_sum_exp[at];
    d[half_row] = in.row_terms[at];
  }

  float dq[8][4];
  clear(dq);
  fence_sums(dq);
  for (int i = 0; i < walk; ++i) {
    // tile i has landed and every warp of the part is done with tile i - 1,
    // whose buffers the copy of tile i + 1 (overlapping this tile's work) takes
    // (tile i - 1's dQ, in flight until here, has read its keys)
    begin_step(part);
    const int j = part + i * PARTS;
    const HALF* keys = stages + (i & 1) * TILE_HALVES;

    float s[8][4], dp[8][4];
    multiply_rows(s, fq, keys);                                    // S = Q K^T
    multiply_rows(dp, fdo, stages + (2 + (i & 1)) * TILE_HALVES);  // dP = dO V^T
    if (i + 1 < walk) copy_pair(i + 1);  // issued while S and dP are formed
    await_products();
    if (j == tile) mask_diagonal<false>(s, warp, lane);  // the part's last tile (in one part)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = fast_exp2(s[n][e] * in.stream_scale - lse[e >> 1]) * (dp[n][e] - d[e >> 1]);  // dS
    unsigned fds[4][4];
    to_fragments(fds, s);
    multiply_columns(dq, fds, keys);  // dQ += dS K
  }
  const Angles angles = angles_of({in.cosine, in.sine, tile * TILE}, thread);
  await_products();
  fence_sums(dq);

  if (!meet_parts(reinterpret_cast<float(&)[32]>(dq), part, thread, add_values<32>)) return;
  store_turned(dq, in.score_scale, angles, d_q + static_cast<size_t>(h) * HEAD * TOKENS + b * SEQ + tile * TILE,
               stages, thread);
}
