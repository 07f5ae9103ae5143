"""The tiles a product takes: a heads product's (the context's gradient by
head, with the row terms) serve it whole in one block, and a product the
tile sweep has not measured takes the tile its shape records with a
binary32 C, or the tile of the product over more rows it is a share of, a
tile with warpgroup products and the most blocks the shape allows."""

from __future__ import annotations

from dataclasses import replace

from planner.kernels import manifest
from planner.kernels.manifest import (FILL_BLOCKS, TILE_CANDIDATES, choose_tile, product_key, recorded_tile,
                                      recorded_tiles, spills_beside_copies, tile_of, tile_serves, tiled_image)
from planner.model.config import DEFAULT


def test_a_heads_product_is_stored_by_one_block_a_tile():
    """K split across a cluster's blocks is refused (each block would store
    a share of a tile's heads); K groups serve (the first stores the tile)."""
    m, n, k = 1024, 512, 512
    split = [t for t in TILE_CANDIDATES if t.k_blocks > 1 and tile_serves(t, m, n, k)]
    assert split and not any(tile_serves(t, m, n, k, output="heads") for t in split)
    grouped = [t for t in TILE_CANDIDATES if t.k_groups > 1 and tile_serves(t, m, n, k)]
    assert grouped and all(tile_serves(t, m, n, k, output="heads") for t in grouped)


def test_a_heads_product_walking_tiles_takes_its_row_sums_own_bytes():
    """Where a warp holds part of a head (WARP_N under 64) and the block
    walks tiles (WGMMA 2, 3), the warps' row sums take shared memory past
    the ring; elsewhere they reuse the ring."""
    for t in TILE_CANDIDATES:
        extra = t.shared("heads") - t.shared()
        split = t.block_n // t.warps_n < 64
        assert extra == (t.warps_n * t.block_m * 4 if split and t.wgmma >= 2 else 0), t


def test_a_tile_whose_c_tensor_copies_store_serves_every_output_but_the_heads():
    """Its slabs hold binary32 rows, or rows of halves, and C's map is of
    the same elements; or, where each half of the tile is whole 64-column
    boxes, a gated product's halves of C and its activation, three boxes of
    64 halves; or a rotary product's heads, a box of 64 halves each: C by
    head with its row terms takes the tiles that store from the registers;
    the slabs (a warpgroup's 64 rows of C each) take shared memory past the
    ring. A tile whose binary32 slabs do not fit beside its ring serves the
    other outputs alone."""
    stored = [t for t in TILE_CANDIDATES if t.tensor_store]
    assert stored and all(t.wgmma >= 2 and t.k_groups == t.k_blocks == 1 for t in stored)
    m, n, k = 1024, 1024, 1024
    limit = manifest.shared_limit_of_tiles()
    for t in stored:
        assert not tile_serves(t, m, n, k, output="heads")
        assert tile_serves(t, m, n, k, output="gated") == (t.block_n % 128 == 0)
        assert tile_serves(t, m, n, k, output="rope")
        assert tile_serves(t, m, n, k, output="half")
        assert tile_serves(t, m, n, k) == (t.shared() <= limit)
        unstored = replace(t, tensor_store=0)
        for output, slab in (("binary32", 64 * t.block_n * 4), ("gated", 3 * 64 * 64 * 2),
                             ("rope", 64 * t.block_n * 2), ("half", 64 * t.block_n * 2)):
            slabs = t.warps_m * t.warps_n // 4 * slab
            assert 0 <= t.shared(output) - slabs - unstored.shared(output) < 1024
    assert [t.block_n for t in stored if not tile_serves(t, m, n, k)] == [256]


def test_a_walking_tiles_blocks_fit_a_multiprocessor_together():
    """`per_sm` blocks of a walking tile, each with the 1 KB the card keeps
    a block, fit the shared memory of a multiprocessor of the card the tiles
    were measured on (its opt-in limit a block, and that 1 KB): else its
    grid's second wave would wait for the first. (Each output it serves:
    a tile may serve the gated and rotary products alone.)"""
    per_multiprocessor = manifest.shared_limit_of_tiles() + 1024
    for t in TILE_CANDIDATES:
        served = [o for o in ("binary32", "gated", "rope") if tile_serves(t, 1024, 1024, 1024, output=o)]
        assert served and all(t.per_sm * (t.shared(o) + 1024) <= per_multiprocessor for o in served), t


def _heads_keys() -> dict[int, tuple]:
    """The attention output's data gradient (dY W^T, the context's gradient)
    of the default model at 1 x and 8 x 1024: batch -> its shape (a layout,
    b layout, m, n, k, residual)."""
    s = DEFAULT.shape
    return {batch: ("r", "c", batch * s.seq, s.width, s.width, False) for batch in (1, 8)}


def test_an_unmeasured_heads_product_takes_its_shapes_binary32_tile(monkeypatch):
    # the table as it was before the sweep measured the products by head
    recorded = {key: tile for key, tile in recorded_tiles().items() if not key.endswith("-heads")}
    monkeypatch.setattr(manifest, "recorded_tiles", lambda: recorded)
    for batch, shape in _heads_keys().items():
        plain = recorded[product_key(*shape)]
        assert recorded_tile(*shape, "heads") == plain == choose_tile(*shape, "heads")
        t = TILE_CANDIDATES[plain]
        assert t.wgmma >= 1 and tile_serves(t, *shape[2:5], output="heads")
        m, n = shape[2], shape[3]
        tiles = (m // t.block_m) * (n // t.block_n)
        blocks = min(tiles, t.per_sm * FILL_BLOCKS) if t.wgmma >= 2 else tiles
        most = max((m // c.block_m) * (n // c.block_n) for c in TILE_CANDIDATES
                   if tile_serves(c, *shape[2:5], output="heads"))
        assert blocks >= min(FILL_BLOCKS, most), (batch, plain, blocks)


def test_a_measured_heads_product_takes_its_own_tile(monkeypatch):
    shape = _heads_keys()[1]
    own = next(i for i, t in enumerate(TILE_CANDIDATES)
               if tile_serves(t, *shape[2:5], output="heads") and i != recorded_tiles()[product_key(*shape)])
    table = recorded_tiles() | {product_key(*shape, "heads"): own}
    monkeypatch.setattr(manifest, "recorded_tiles", lambda: table)
    assert choose_tile(*shape, "heads") == own


def test_a_share_of_a_products_rows_takes_the_whole_products_tile_until_measured(monkeypatch):
    """A forward product over a share of the batch's rows (its A read as
    rows) that the table does not record takes the tile recorded for the
    product over twice as many rows, or four times, ...: the nearest; a
    product reading A as columns (M is a weight's rows) does not."""
    s = DEFAULT.shape
    whole = ("r", "r", 8 * s.seq, s.width, s.ffn, True)
    recorded = {key: tile for key, tile in recorded_tiles().items() if "-m4096-" not in key and "-m2048-" not in key}
    monkeypatch.setattr(manifest, "recorded_tiles", lambda: recorded)
    tile = recorded[product_key(*whole)]
    for m in (4 * s.seq, 2 * s.seq):
        assert recorded_tile("r", "r", m, *whole[3:]) == tile == choose_tile("r", "r", m, *whole[3:])
    nearer = next(i for i, t in enumerate(TILE_CANDIDATES) if i != tile and tile_serves(t, 2 * s.seq, *whole[3:5]))
    recorded[product_key("r", "r", 4 * s.seq, *whole[3:])] = nearer
    assert recorded_tile("r", "r", 2 * s.seq, *whole[3:]) == nearer
    columns = ("c", "c", s.width, s.ffn, 8 * s.seq, False)
    recorded[product_key(*columns)] = tile
    assert recorded_tile("c", "c", s.width // 2, *columns[3:]) is None


def test_a_product_image_names_its_tile():
    """The bench's products table names each image's tile: every candidate
    is told apart by its constants (no two alike), whatever the shape."""
    assert len(set(TILE_CANDIDATES)) == len(TILE_CANDIDATES)
    for i in range(len(TILE_CANDIDATES)):
        assert tile_of(tiled_image("r", "c", 1024, 512, 1024, False, "binary16", i)) == i


def test_only_the_walk_of_256_columns_may_take_local_memory_and_only_before_sm_90():
    """The one exception to "no image takes local memory" (the kernel table
    and the sweep hold every other image to it): the sums of tiles 66 and
    67 beside the copying warpgroup on cards with no setmaxnreg."""
    for i in range(len(TILE_CANDIDATES)):
        img = tiled_image("r", "r", 1024, 512, 1024, i % 2 == 0, "binary16", i)
        assert not spills_beside_copies(img, "sm_90")
        assert spills_beside_copies(img, "sm_86") == (i in (66, 67))
