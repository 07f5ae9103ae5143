"""The device images of a model shape, every family and every product, for
the kernel tests."""

from __future__ import annotations

from planner.kernels.manifest import (FAMILIES, FILL_BLOCKS, PRODUCT_FAMILIES, STREAMING_ATTENTION, TILE_CANDIDATES,
                                      Image, image, layernorm_parts, product, tile_serves, tiled_image)
from planner.model.config import Shape

DEFAULT = Shape()
SMALL = Shape(layers=2, width=256, heads=4, kv_heads=4, ffn=512, vocab=512, seq=256, batch=4)
# grouped K/V heads (two query heads a K/V head), for the bfloat16 cases
GROUPED = Shape(layers=2, width=256, heads=4, kv_heads=2, ffn=512, vocab=512, seq=256, batch=2)
# AdamW's bank in the tests: more quads than one pass of its grid covers
ADAMW_ELEMENTS = 1_200_004


def _heads(s: Shape) -> dict[str, int]:
    return {"seq": s.seq, "heads": s.heads, "kv_heads": s.kv_heads}


def _context_heads(s: Shape) -> dict[str, int]:
    return {"seq": s.seq, "heads": s.heads}


def products(s: Shape, half: str) -> list[Image]:
    """The model's products: the forward's X W^T (rows, rows), the data
    gradients' dY W (rows, columns), the weight gradients' dY^T X (columns,
    columns); some add a residual; those the plan rounds to the half format
    (the gated activation's gradient) also with C in it; the queries, keys
    and values as one product with the rotary turn in its epilogue, the up
    and gate projections as one with the gated activation in its; the
    context's gradient by head with the attention backward's row terms in
    its."""
    t, w, q, f, v = s.tokens, s.width, s.qkv_width, s.ffn, s.vocab
    shapes = [("r", "r", t, q, w, False), ("r", "r", t, w, w, True), ("r", "r", t, f, w, False),
              ("r", "r", t, w, f, True), ("r", "r", t, v, w, False),
              ("r", "c", t, w, q, False), ("r", "c", t, w, w, False), ("r", "c", t, w, f, False),
              ("r", "c", t, w, f, True), ("r", "c", t, f, w, False), ("r", "c", t, w, v, False),
              ("c", "c", q, w, t, False), ("c", "c", w, w, t, False), ("c", "c", f, w, t, False),
              ("c", "c", w, f, t, False), ("c", "c", v, w, t, False)]
    return ([product(a, b, m, n, k, r, half) for a, b, m, n, k, r in shapes]
            + [product("r", "r", t, q, w, False, half, "rope", _heads(s)),
               product("r", "r", t, 2 * f, w, False, half, "gated"),
               product("r", "c", t, f, w, False, half, "half"),
               product("r", "c", t, w, w, False, half, "heads", _context_heads(s))])


def family_images(s: Shape, half: str) -> list[Image]:
    """Every family but the products at the shape."""
    heads = dict(batch=s.batch, seq=s.seq, heads=s.heads, kv_heads=s.kv_heads, half=half)
    rows = dict(rows=s.tokens, width=s.width)
    norm = rows | {"parts": layernorm_parts(s.tokens), "half": half}
    out = [
        image("random-normal"), image("rotary-table", seq=s.seq), image("fill"), image("copy"),
        image("cast-down", half=half), image("add"), image("argmax", vocab=s.vocab),
        image("gather", vocab=s.vocab, **rows),
        image("gather", "gather-odd-rows", vocab=s.vocab, rows=s.tokens - 1, width=s.width),
        image("layernorm-forward", half=half, **rows), image("layernorm-backward", **norm),
        # rows that leave the last block's warps short of a row each
        image("layernorm-forward", "layernorm-forward-odd-rows", half=half, rows=s.tokens - 1, width=s.width),
        image("layernorm-backward-add", **norm), image("layernorm-parameters", width=s.width, parts=norm["parts"]),
        # eight times the rows: each warp walks rows in turn, staged a row ahead
        *(image(f, f"{f}-rows8x", rows=8 * s.tokens, width=s.width, parts=layernorm_parts(8 * s.tokens), half=half)
          for f in ("layernorm-backward", "layernorm-backward-add")),
        # each streaming attention image in every part count it may take
        *(image(f, f"{f}-parts{p}", parts=p, **heads)
          for f in STREAMING_ATTENTION for p in (1, 2)),
        *(image(f, rows=s.tokens, vocab=s.vocab, half=half)
          for f in ("loss-target-gather", "cross-entropy", "cross-entropy-backward")),
        image("embedding-scatter", vocab=s.vocab, **rows),
        # a block on every multiprocessor, and on half of them (the pieces beside the backward pass)
        image("adamw", elements=ADAMW_ELEMENTS, half=half, blocks=FILL_BLOCKS),
        image("adamw", "adamw-half-grid", elements=ADAMW_ELEMENTS, half=half, blocks=FILL_BLOCKS // 2),
        image("gated-gelu-backward", half=half, ffn=s.ffn),
        # an odd ffn: rows whose pairs of elements straddle rows
        image("gated-gelu-backward", "gated-gelu-backward-odd-ffn", half=half, ffn=s.ffn + 1),
    ]
    missing = set(FAMILIES) - {i.family for i in out} - set(PRODUCT_FAMILIES)
    assert not missing, f"families without a test image: {sorted(missing)}"
    return out


def all_images(s: Shape, half: str) -> list[Image]:
    """The shape's images, each once (small shapes repeat some products)."""
    return list(dict.fromkeys([*family_images(s, half), *products(s, half)]))


# the families whose bfloat16 images are checked too (those that convert halves)
BFLOAT16_FAMILIES = ("cast-down", "loss-target-gather", "cross-entropy", "cross-entropy-backward",
                     "layernorm-forward", "layernorm-backward-add",
                     "attention-forward", "attention-query", "attention-key", "attention-backward", "adamw",
                     "gated-gelu-backward")


def bfloat16_images() -> list[Image]:
    """At the grouped shape: the families that convert halves, one product of
    each operand layout (with and without a residual), the rotary, gated,
    half and heads products."""
    chosen = [i for i in family_images(GROUPED, "bfloat16") if i.family in BFLOAT16_FAMILIES]
    return chosen + [products(GROUPED, "bfloat16")[i] for i in (0, 1, 5, 8, 11, 16, 17, 18, 19)]


# the operand layouts the tile cases take in turn: rows x rows (the
# forward's), rows x columns (a data gradient's), columns x columns (a
# weight gradient's)
LAYOUTS = ("rr", "rc", "cc")


def _tile_case(i: int, m: int, n: int, k: int, layouts: str, residual: bool, output: str = "binary32") -> Image:
    """Tile i's product of m x n x k, the layouts, residual and output
    given; for a tile that serves no binary32 C there (its slabs of one do
    not fit beside its ring), a gated product's."""
    if tile_serves(TILE_CANDIDATES[i], m, n, k):
        return tiled_image(*layouts, m, n, k, residual, "binary16", i, output)
    return tiled_image("r", "r", m, n, k, False, "binary16", i, "gated")


def tile_images() -> list[Image]:
    """Every candidate tile, whether or not a shape records it: one product of
    each, the operand layouts, the residual and a half C taken in turn (not
    with a tile whose tensor copies store C, whose half C `stored_images`
    takes through its slabs)."""
    return [_tile_case(i, 256, 256, 512, LAYOUTS[i % 3], i % 2 == 1,
                       "half" if i % 4 == 2 and not t.tensor_store else "binary32")
            for i, t in enumerate(TILE_CANDIDATES)]


# m x n x k of a product whose tiles outnumber a walk's blocks
WALKED = (2048, 2304, 128)


def stored_images() -> list[tuple[int, Image]]:
    """Each tile whose C the tensor memory accelerator stores, at a shape
    whose tiles outnumber its blocks, so that each block stores through its
    slabs again once the copies before have read them; the operand layouts,
    and a binary32 C with the residual, a half C and a binary32 C, in turn
    (no residual with a tile whose warpgroups take tiles in turn: holding
    two tiles' sums, R beside them takes local memory, so the sweep never
    chooses it for a residual product; a half C where a binary32 one's
    slabs do not fit beside the ring)."""
    stored = [i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store]
    cases = []
    for n, i in enumerate(stored):
        half = n % 3 == 1 or not tile_serves(TILE_CANDIDATES[i], *WALKED)
        residual = n % 3 == 0 and not half and TILE_CANDIDATES[i].wgmma != 3
        cases.append((i, tiled_image(*LAYOUTS[n % 3], *WALKED, residual, "binary16", i,
                                     "half" if half else "binary32")))
    return cases


# the gated product on tile 60 at the same shape: each warpgroup's slab takes
# its tiles' halves and tiles again once the copies before have read it
def stored_gated_images() -> list[Image]:
    return [tiled_image("r", "r", *WALKED, False, "binary16", 60, "gated")]


# a gated product's tile on each path: the warps (mma.sync), the warpgroups
# fed by cp.async and sharing tensor-copied tiles, a 64-wide tile (its up
# and gate halves 32 columns), and those whose tensor copies store C and the
# activation, the warpgroups sharing each tile (59) or taking tiles in turn
# (60). (Warpgroups taking tiles in turn and storing from the registers
# hold two tiles' sums: with the activation they take local memory on
# sm_90, so the sweep never chooses them for a gated product.)
GATED_TILES = (0, 20, 40, 44, 59, 60)


def gated_images() -> list[tuple[int, Image]]:
    return [(i, tiled_image("r", "r", 256, 256, 512, False, "binary16", i, "gated")) for i in GATED_TILES]


# a rotary product's tile on the same paths (a 64-wide tile holds one
# head; 59 and 60 store the heads by tensor copies), at the grouped shape: a
# tile's heads the queries', the keys' or the values'
def rope_images() -> list[tuple[int, Image]]:
    return [(i, tiled_image("r", "r", GROUPED.tokens, GROUPED.qkv_width, GROUPED.width, False, "binary16", i, "rope",
                            _heads(GROUPED))) for i in GATED_TILES]


# the rotary product on tiles 59 and 60 at 64 of the grouped shape's
# sequences, whose tiles outnumber a walk's blocks: each warpgroup's slab
# takes heads again once the copies before have read it
def stored_rope_images() -> list[tuple[int, Image]]:
    return [(i, tiled_image("r", "r", 64 * GROUPED.seq, GROUPED.qkv_width, 128, False, "binary16", i, "rope",
                            _heads(GROUPED))) for i in (59, 60)]


# a heads product's tile on each path its epilogue takes, at the small shape
# (four heads): the warps' (mma.sync) with a head's columns across two warps
# (2), in K groups (8), a head's columns in one warp (18); the warpgroups'
# (27, and in K groups 28; other cards: the warps' path, a head across two
# warps) and the warpgroups fed by tensor copies sharing tiles (40), taking
# tiles in turn (41) or a tile's K steps in turn (54) (other cards: the
# warps walking the tiles, a head across two warps, their sums past the ring),
# and the walk of 256 columns (66: four heads a tile; on other cards its sums
# spilled as they are made)
HEADS_TILES = (2, 8, 18, 27, 28, 40, 41, 54, 66)


def heads_images() -> list[tuple[int, Image]]:
    return [(i, tiled_image("r", "c", SMALL.tokens, SMALL.width, SMALL.width, False, "binary16", i, "heads",
                            _context_heads(SMALL))) for i in HEADS_TILES]


# the walk of 256 columns (66) adding a residual, whose R each thread reads
# half before the tile's products and half after, at a shape whose tiles
# outnumber its blocks (each block walks two)
def wide_images() -> list[Image]:
    return [tiled_image("r", "r", 16384, 512, 256, True, "binary16", 66)]


# (case name, shape, image): the default shape, the small shape, the bfloat16
# cases, every tile
CASES: list[tuple[str, Shape, Image]] = (
    [(f"default-{i.name}", DEFAULT, i) for i in all_images(DEFAULT, "binary16")]
    + [(f"small-{i.name}", SMALL, i) for i in all_images(SMALL, "binary16")]
    + [(f"bfloat16-{i.name}", GROUPED, i) for i in bfloat16_images()]
    + [(f"tile-{n}-{i.name}", SMALL, i) for n, i in enumerate(tile_images())]
    + [(f"gated-tile-{n}-{i.name}", SMALL, i) for n, i in gated_images()]
    + [(f"rope-tile-{n}-{i.name}", GROUPED, i) for n, i in rope_images()]
    + [(f"heads-tile-{n}-{i.name}", SMALL, i) for n, i in heads_images()]
    + [(f"stored-tile-{n}-{i.name}", SMALL, i) for n, i in stored_images()]
    + [(f"stored-gated-tile-{i.name}", SMALL, i) for i in stored_gated_images()]
    + [(f"stored-rope-tile-{n}-{i.name}", GROUPED, i) for n, i in stored_rope_images()]
    + [(f"wide-tile-{i.name}", SMALL, i) for i in wide_images()]
)
