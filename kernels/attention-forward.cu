// Causal attention, forward, as a streaming normalised sum (flash attention):
// a block per (64 queries, query head h, batch b), K/V head g = h / GROUP.
// Each warp keeps its 16 queries' fragments in registers and, for every
// 64-key tile up to the diagonal one, forms the scores with the tensor cores
// in base 2 (t = q.k stream_scale, stream_scale = log2(e) / sqrt(64)), folds
// them into a running row maximum m, sum l and weighted sum O (a new maximum
// m' scales the old l and O by 2^(m - m'), once some row of the warp's has
// passed its m by 2^RESCALE_AFTER: until then the terms 2^(t - m) stay on
// the old m, at most 2^RESCALE_AFTER each), and adds the tile's P V with P
// rounded to the half format. The key tile and the value tile (both
// [b][g][s][64], the layout the backward reads them in; the value tile serves
// as columns) are double-buffered in each part's shared memory, the next pair
// copied while the current one is used. The parts' (m, l, O) meet
// at the end: the first part takes each later part's in part order, both
// scaled to their common maximum.
//
// out[b SEQ + s][h 64 + d] = O / l in the half format (token-major, heads side
// by side); log_sum_exp[b][h][s] = m + log2 l, base 2, which the backward
// recomputes the probabilities from.
#include "attention.cuh"

// how far (base 2) a row's largest score may pass its running maximum
// before O, l and m are moved to it: the terms 2^(t - m) stay at most 2^8
constexpr float RESCALE_AFTER = 8.0f;

extern "C" __global__ void __launch_bounds__(THREADS)
image(const HALF* __restrict__ q, const HALF* __restrict__ k, const HALF* __restrict__ v, HALF* __restrict__ out,
      float* __restrict__ log_sum_exp, float stream_scale) {
  await_previous_launch();
  // the last query tile walks every key tile: the longest walks first
  const WalkPlace block = walk_place();
  const int tile = TILES - 1 - block.rank, h = block.head, b = block.batch, g = h / GROUP;
  const int part = part_of(threadIdx.x), thread = threadIdx.x % PART_THREADS;
  const int warp = thread >> 5, lane = thread & 31;
  const size_t kv_plane = static_cast<size_t>(b * KV_HEADS + g) * SEQ * HEAD;
  // the part's stages: keys of buffer 0 and 1, then values of buffer 0 and 1
  HALF* const stages = part_stages<4 * TILE_HALVES>(part);
  const int walk = tile >= part ? (tile - part) / PARTS + 1 : 0;  // the part's key tiles part, part + PARTS, ...

  auto copy_pair = [&](int i) {
    const size_t at = kv_plane + static_cast<size_t>(part + i * PARTS) * TILE * HEAD;
    copy_tile(stages + (i & 1) * TILE_HALVES, k + at, HEAD, thread);
    copy_tile(stages + (2 + (i & 1)) * TILE_HALVES, v + at, HEAD, thread);
    copy_commit();
  };
  if (walk > 0) copy_pair(0);

  const int row0 = tile * TILE + 16 * warp;  // the warp's first query
  unsigned fq[4][4];
  load_rows(fq, q + static_cast<size_t>(b * HEADS + h) * SEQ * HEAD, row0);

  // this thread's rows: row0 + lane / 4 (half 0) and 8 below (half 1); the
  // state a part keeps: m[2], l[2] (this lane's part of the row sums), O[8][4]
  float state[4 + 32];
  float (&m)[2] = reinterpret_cast<float(&)[2]>(state[0]);
  float (&l)[2] = reinterpret_cast<float(&)[2]>(state[2]);
  float (&o)[8][4] = reinterpret_cast<float(&)[8][4]>(state[4]);
  m[0] = m[1] = -__int_as_float(0x7f800000);
  l[0] = l[1] = 0.0f;
  clear(o);

  for (int i = 0; i < walk; ++i) {
    // tile i has landed and every warp of the part is done with tile i - 1,
    // whose buffers the copy of tile i + 1 (overlapping this tile's work) takes
    // (tile i - 1's P V, in flight until here, has read its values)
    begin_step(part);
    const int j = part + i * PARTS;

    float s[8][4];
    multiply_rows(s, fq, stages + (i & 1) * TILE_HALVES);
    if (i + 1 < walk) copy_pair(i + 1);  // issued while the scores are formed
    await_products();

    if (j == tile) mask_diagonal<false>(s, warp, lane);  // the part's last tile (in one part)
    // the scores in base 2 are q.k stream_scale: a row's largest is its
    // largest q.k so scaled (stream_scale > 0, and rounding keeps the order),
    // and each term is 2^(q.k stream_scale - m) with one rounding
    float top[2];
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      top[half_row] = s[0][2 * half_row];
#pragma unroll
      for (int n = 0; n < 8; ++n)
        top[half_row] = fmaxf(top[half_row], fmaxf(s[n][2 * half_row], s[n][2 * half_row + 1]));
      top[half_row] = quad_max(top[half_row]) * stream_scale;
    }
    // O, l and m move to a new maximum only where a row of the warp's grows
    // past 2^RESCALE_AFTER of its m (and on the first tile, m = -inf); else
    // the terms stay on the old m, at most 2^RESCALE_AFTER each, and O / l
    // and m + log2 l come out the same sums
    if (__any_sync(0xffffffffu, top[0] > m[0] + RESCALE_AFTER || top[1] > m[1] + RESCALE_AFTER)) {
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        // finite: every row sees the first key of the part's first tile
        const float grown = fmaxf(m[half_row], top[half_row]);
        const float rescale = fast_exp2(m[half_row] - grown);
        m[half_row] = grown;
        l[half_row] *= rescale;
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 2 * half_row; e < 2 * half_row + 2; ++e) o[n][e] *= rescale;
      }
    }
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 2 * half_row; e < 2 * half_row + 2; ++e) {
          s[n][e] = fast_exp2(fmaf(s[n][e], stream_scale, -m[half_row]));
          sum += s[n][e];
        }
      l[half_row] += sum;  // this lane's part of the row sum
    }

    unsigned fp[4][4];
    to_fragments(fp, s);
    multiply_columns(o, fp, stages + (2 + (i & 1)) * TILE_HALVES);  // O += P V
  }
  await_products();

  // a part without tiles brings m = -inf, l = 0, O = 0: its scale 2^(-inf) is
  // 0, and the first part's m is finite (it has key tile 0)
  const bool first = meet_parts(state, part, thread, [](float (&mine)[4 + 32], const float (&theirs)[4 + 32]) {
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const float top = fmaxf(mine[half_row], theirs[half_row]);
      const float scale_mine = fast_exp2(mine[half_row] - top), scale_theirs = fast_exp2(theirs[half_row] - top);
      mine[half_row] = top;
      mine[2 + half_row] = mine[2 + half_row] * scale_mine + theirs[2 + half_row] * scale_theirs;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 2 * half_row; e < 2 * half_row + 2; ++e)
          mine[4 + 4 * n + e] = mine[4 + 4 * n + e] * scale_mine + theirs[4 + 4 * n + e] * scale_theirs;
    }
  });
  if (!first) return;

  const int s0 = row0 + (lane >> 2);
#pragma unroll
  for (int half_row = 0; half_row < 2; ++half_row) {
    const float total = quad_sum(l[half_row]), inverse = 1.0f / total;
    const int s = s0 + 8 * half_row;
    HALF* to = out + (static_cast<size_t>(b) * SEQ + s) * HEADS * HEAD + h * HEAD + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < 8; ++n)
      *reinterpret_cast<unsigned*>(to + 8 * n) =
          pack_halves(o[n][2 * half_row] * inverse, o[n][2 * half_row + 1] * inverse);
    if ((lane & 3) == 0) log_sum_exp[static_cast<size_t>(b * HEADS + h) * SEQ + s] = m[half_row] + __log2f(total);
  }
}
