// Causal attention, backward, the key launch: a block per (64 keys, K/V head g,
// batch b), no atomics. Each warp keeps its 16 keys' K and V rows as A
// fragments and walks, in a fixed order, the group's query heads and, for
// each, the query tiles from the key tile's (the diagonal, masked) to the last:
//   S^T = K Q^T, dP^T = V dO^T, P^T = 2^(S^T stream_scale - L),
//   dS^T = P^T (dP^T - D), d_v += P^T dO, d_k += dS^T Q,
// L the forward's base-2 log-sum-exp and D the row terms the context
// gradient's product forms (tiled-heads).
// The parts take every PARTS-th step of that walk and their sums meet in part
// order at the end. The query and d_out tiles ([b][h][s][64], half) and their
// L and D are double-buffered in each part's shared memory; each tile serves
// both as rows (S^T, dP^T) and as columns (d_v, d_k). d_k = score_scale (the
// sum), turned back by the rotary angles of its positions (the tables cosine
// and sine, [32][SEQ]; store_turned), and d_v are written in the half format,
// transposed, as the key and value rows of the qkv gradient:
// d_k[g 64 + c][b SEQ + s], d_v likewise (store_transposed).
#include "attention.cuh"

struct alignas(1024) Stage {  // its tiles 1024-byte aligned
  HALF queries[TILE_HALVES], gradients[TILE_HALVES];
  float lse[TILE], d[TILE];
};

extern "C" __global__ void __launch_bounds__(THREADS)
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v,
      const HALF* __restrict__ d_out, const float* __restrict__ log_sum_exp, const float* __restrict__ row_terms,
      HALF* __restrict__ d_k, HALF* __restrict__ d_v, const float* __restrict__ cosine,
      const float* __restrict__ sine, float stream_scale, float score_scale) {
  await_previous_launch();
  const WalkPlace block = walk_place();  // the first key tile meets every query tile: the longest walks first
  const int tile = block.rank, g = block.head, b = block.batch;
  const int part = threadIdx.x / PART_THREADS, thread = threadIdx.x % PART_THREADS;
  const int warp = thread >> 5, lane = thread & 31;
  const int query_tiles = TILES - tile, steps = GROUP * query_tiles;
  Stage* const stages = reinterpret_cast<Stage*>(part_stages<2 * sizeof(Stage) / sizeof(HALF)>(part));  // the part's two
  const int walk = steps > part ? (steps - 1 - part) / PARTS + 1 : 0;  // the part's steps part, part + PARTS, ...

  // step i: query head g GROUP + i / query_tiles, query tile tile + i % query_tiles
  auto copy_step = [&](int n) {
    const int i = part + n * PARTS;
    Stage& stage = stages[n & 1];
    const int h = g * GROUP + i / query_tiles, s = (tile + i % query_tiles) * TILE;
    const size_t rows = static_cast<size_t>(b * HEADS + h) * SEQ + s;
    copy_tile(stage.queries, q + rows * HEAD, HEAD, thread);
    copy_tile(stage.gradients, d_out + rows * HEAD, HEAD, thread);
    if (thread < TILE / 4) {
      copy_async(stage.lse + 4 * thread, log_sum_exp + rows + 4 * thread);
    } else if (thread < TILE / 2) {
      copy_async(stage.d + 4 * (thread - TILE / 4), row_terms + rows + 4 * (thread - TILE / 4));
    }
    copy_commit();
  };
  if (walk > 0) copy_step(0);

  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  const int row0 = tile * TILE + 16 * warp;  // the warp's first key
  unsigned fk[4][4], fv[4][4];
  load_rows(fk, k + kv_plane, row0);
  load_rows(fv, v + kv_plane, row0);

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
    if (n + 1 < walk) copy_step(n + 1);
    const Stage& stage = stages[n & 1];
    const bool diagonal = (part + n * PARTS) % query_tiles == 0;

    float s[8][4], dp[8][4];
    multiply_rows(s, fk, stage.queries);     // S^T = K Q^T
    multiply_rows(dp, fv, stage.gradients);  // dP^T = V dO^T
    await_products();
    if (diagonal) mask_diagonal<true>(s, warp, lane);  // the head's first query tile
    // element (key 16 warp + lane / 4 + 8 (e / 2), query 8 c + 2 (lane % 4) + e % 2)
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int query = 8 * c + 2 * (lane & 3);
      const float2 lse = *reinterpret_cast<const float2*>(stage.lse + query);
      const float2 d = *reinterpret_cast<const float2*>(stage.d + query);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = fast_exp2(s[c][e] * stream_scale - ((e & 1) ? lse.y : lse.x));
        s[c][e] = p;                                        // P^T
        dp[c][e] = p * (dp[c][e] - ((e & 1) ? d.y : d.x));  // dS^T
      }
    }
    unsigned fp[4][4], fds[4][4];
    to_fragments(fp, s);
    to_fragments(fds, dp);
    multiply_columns(dv, fp, stage.gradients);  // dV += P^T dO
    multiply_columns(dk, fds, stage.queries);   // dK += dS^T Q
  }
  const Angles angles = angles_of({cosine, sine, tile * TILE}, thread);
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
  HALF* const scratch = reinterpret_cast<HALF*>(stages);
  store_transposed(sums[1], 1.0f, d_v + at, scratch, thread);  // the values first, while the angles land
  store_turned(sums[0], score_scale, angles, d_k + at, scratch, thread);
}
