"""The tensor maps of the products fed by tensor copies: placed where the
sm_90 cubin takes them, each over exactly its operand's extent (a map past
it is refused), nothing appended where the cubin takes none (sm_86); and a
plan whose images want more shared memory than the device offers is
refused before anything is allocated."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from planner.kernels import manifest
from planner.kernels.manifest import HALF_BYTES, TILE_CANDIDATES, tensor_maps, tiled_image
from planner.runtime.cubin_info import kernel_info
from planner.runtime.nvrtc import compile_image
from planner.runtime.tensor_maps import MAP_BYTES, launch_parameters

FED = next(i for i, t in enumerate(TILE_CANDIDATES) if t.wgmma >= 2)


def fake_encoder(spec, address):
    """The map's fields as words, so that a test can read back what was encoded."""
    return struct.pack("<5Q", address, spec.inner, spec.outer, spec.box_inner, spec.box_outer).ljust(MAP_BYTES, b"\0")


@pytest.mark.parametrize("layouts", [("r", "r"), ("r", "c"), ("c", "c")])
def test_the_maps_follow_the_block_where_the_cubin_takes_them(layouts):
    img = tiled_image(*layouts, 256, 256, 512, True, "binary16", FED)
    addresses = {"c": 0x10000, "a": 0x20000, "b": 0x40000, "r": 0x80000}
    block = img.parameter_block(addresses, {})
    cubin = compile_image(img, "sm_90")
    out = launch_parameters(img, block, cubin, fake_encoder)
    taken = kernel_info(cubin).parameters[len(img.arguments):]
    assert len(out) == kernel_info(cubin).parameter_bytes and out[:len(block)] == block
    extents = img.extents({})
    for spec, parameter in zip(tensor_maps(img), taken, strict=True):
        address, inner, outer, _, _ = struct.unpack_from("<5Q", out, parameter.offset)
        assert address == addresses[spec.argument]
        assert inner * outer * HALF_BYTES == extents[spec.argument]


def test_a_gated_products_maps_bring_b_in_two_boxes_after_its_scalars():
    """The gated product's B box is half the tile's rows (the up's rows,
    then the gate's, two copies a stage); its maps follow the GELU's
    scalars."""
    tile = TILE_CANDIDATES[FED]
    img = tiled_image("r", "r", 256, 256, 512, False, "binary16", FED, "gated")
    a, b = tensor_maps(img)
    assert (a.box_outer, b.box_outer) == (tile.block_m, tile.block_n // 2)
    plain_b = tensor_maps(tiled_image("r", "r", 256, 256, 512, False, "binary16", FED, "half"))[1]
    assert plain_b.box_outer == tile.block_n and (b.inner, b.outer) == (plain_b.inner, plain_b.outer)
    addresses = {"c": 0x10000, "gated": 0x18000, "a": 0x20000, "b": 0x40000}
    block = img.parameter_block(addresses, img.words({"sqrt_two_over_pi": 0.8, "cubic": 0.04, "half": 0.5}))
    cubin = compile_image(img, "sm_90")
    out = launch_parameters(img, block, cubin, fake_encoder)
    assert out[:len(block)] == block
    taken = kernel_info(cubin).parameters[len(img.arguments):]
    assert [struct.unpack_from("<Q", out, p.offset)[0] for p in taken] == [addresses["a"], addresses["b"]]


def test_a_heads_products_maps_are_its_operands_after_its_pointers():
    """The context gradient's product by head takes the operands' maps a
    product with a half C takes, after its five pointers (the heads, the
    row terms, A, B and the forward's output)."""
    heads = {"seq": 256, "heads": 4}
    img = tiled_image("r", "c", 1024, 256, 512, False, "binary16", FED, "heads", heads)
    assert tensor_maps(img) == tensor_maps(tiled_image("r", "c", 1024, 256, 512, False, "binary16", FED, "half"))
    addresses = {"heads": 0x10000, "row_terms": 0x18000, "a": 0x20000, "b": 0x40000, "out": 0x80000}
    block = img.parameter_block(addresses, {})
    cubin = compile_image(img, "sm_90")
    out = launch_parameters(img, block, cubin, fake_encoder)
    assert out[:len(block)] == block
    taken = kernel_info(cubin).parameters[len(img.arguments):]
    assert [struct.unpack_from("<Q", out, p.offset)[0] for p in taken] == [addresses["a"], addresses["b"]]


def _maps_follow_the_block_on_sm_90_alone(img, block: bytes, addresses: dict, maps) -> None:
    """On sm_90 the launch's parameters past the block are the maps, each
    over its argument's address, as the cubin declares them; sm_86 takes
    the block alone (its warps read and store from their registers)."""
    cubin = compile_image(img, "sm_90")
    out = launch_parameters(img, block, cubin, fake_encoder)
    taken = kernel_info(cubin).parameters[len(img.arguments):]
    assert [struct.unpack_from("<Q", out, p.offset)[0] for p in taken] == [addresses[m.argument] for m in maps]
    assert launch_parameters(img, block, compile_image(img, "sm_86"), fake_encoder) == block


@pytest.mark.parametrize("residual", [False, True])
def test_a_product_whose_c_tensor_copies_store_takes_cs_map_last(residual):
    """C's map is binary32, boxes of 32 columns (128 bytes) by a slab's 64
    rows, over exactly C's extent, after the operands' maps; where the walk
    of WGMMA 2 adds a residual, R's map (the same boxes: R comes through the
    slabs) after C's; sm_86 takes none (its warps read R and store C from
    their registers)."""
    stored = next(i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store and t.wgmma == 2)
    img = tiled_image("r", "r", 256, 256, 512, residual, "binary16", stored)
    maps = tensor_maps(img)
    assert [m.argument for m in maps] == ["a", "b", "c"] + ["r"] * residual
    for m in maps[2:]:
        assert (m.inner, m.outer, m.box_inner, m.box_outer, m.element) == (256, 256, 32, 64, 4)
    assert maps[0].element == maps[1].element == HALF_BYTES
    addresses = {"c": 0x10000, "a": 0x20000, "b": 0x40000} | ({"r": 0x80000} if residual else {})
    block = img.parameter_block(addresses, {})
    _maps_follow_the_block_on_sm_90_alone(img, block, addresses, maps)


def test_a_half_c_whose_tensor_copies_store_it_takes_a_map_of_halves():
    """C's map is of halves, boxes of 64 columns (128 bytes) by a slab's 64
    rows, over exactly C's extent, after the operands' maps; sm_86 takes
    none."""
    stored = next(i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store and t.wgmma == 2)
    img = tiled_image("r", "c", 256, 512, 512, False, "binary16", stored, "half")
    maps = tensor_maps(img)
    assert [m.argument for m in maps] == ["a", "b", "c"]
    assert (maps[2].inner, maps[2].outer, maps[2].box_inner, maps[2].box_outer, maps[2].element) == \
        (512, 256, 64, 64, HALF_BYTES)
    addresses = {"c": 0x10000, "a": 0x20000, "b": 0x40000}
    block = img.parameter_block(addresses, {})
    _maps_follow_the_block_on_sm_90_alone(img, block, addresses, maps)


def test_a_gated_product_whose_tensor_copies_store_it_takes_cs_and_the_activations_maps():
    """C's map and the activation's are of halves, boxes of 64 columns
    (128 bytes) by a slab's 64 rows, each over exactly its extent, after
    the operands' maps; sm_86 takes none."""
    stored = next(i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store and t.wgmma == 2 and t.block_n == 128)
    img = tiled_image("r", "r", 256, 512, 512, False, "binary16", stored, "gated")
    maps = tensor_maps(img)
    assert [m.argument for m in maps] == ["a", "b", "c", "gated"]
    assert [(m.inner, m.outer, m.box_inner, m.box_outer, m.element) for m in maps[2:]] == \
        [(512, 256, 64, 64, HALF_BYTES), (256, 256, 64, 64, HALF_BYTES)]
    addresses = {"c": 0x10000, "gated": 0x18000, "a": 0x20000, "b": 0x40000}
    block = img.parameter_block(addresses, img.words({"sqrt_two_over_pi": 0.8, "cubic": 0.04, "half": 0.5}))
    _maps_follow_the_block_on_sm_90_alone(img, block, addresses, maps)


def test_warpgroups_taking_tiles_in_turn_read_r_from_their_registers():
    """A residual product on a tile whose warpgroups take the tiles in turn
    (WGMMA 3) stores C by tensor copies but takes no map of R: each
    warpgroup holds two 64-row halves of a tile, and reads R as it adds it."""
    alternating = next(i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store and t.wgmma == 3)
    img = tiled_image("r", "r", 256, 256, 512, True, "binary16", alternating)
    assert [m.argument for m in tensor_maps(img)] == ["a", "b", "c"]
    cubin = compile_image(img, "sm_90")
    assert len(kernel_info(cubin).parameters) == len(img.arguments) + 3


def test_a_map_past_c_is_refused(monkeypatch):
    stored = next(i for i, t in enumerate(TILE_CANDIDATES) if t.tensor_store)
    img = tiled_image("r", "r", 256, 256, 512, False, "binary16", stored)
    wider = tuple(replace(s, outer=s.outer + 64) if s.argument == "c" else s for s in tensor_maps(img))
    monkeypatch.setattr("planner.runtime.tensor_maps.tensor_maps", lambda i: wider)
    with pytest.raises(ValueError, match="tensor map over c is not its extent"):
        launch_parameters(img, img.parameter_block({"c": 1 << 16, "a": 2 << 16, "b": 3 << 16}, {}),
                          compile_image(img, "sm_90"), fake_encoder)


def test_a_card_without_tensor_copies_takes_the_block_alone():
    img = tiled_image("r", "c", 256, 256, 512, False, "binary16", FED)
    block = img.parameter_block({"c": 1 << 16, "a": 2 << 16, "b": 3 << 16}, {})
    assert launch_parameters(img, block, compile_image(img, "sm_86"), fake_encoder) == block


def test_a_map_past_its_operand_is_refused(monkeypatch):
    img = tiled_image("r", "r", 256, 256, 512, False, "binary16", FED)
    wider = tuple(replace(s, outer=s.outer + 64) if s.argument == "b" else s for s in tensor_maps(img))
    monkeypatch.setattr("planner.runtime.tensor_maps.tensor_maps", lambda i: wider)
    block = img.parameter_block({"c": 1 << 16, "a": 2 << 16, "b": 3 << 16}, {})
    with pytest.raises(ValueError, match="tensor map over b is not its extent"):
        launch_parameters(img, block, compile_image(img, "sm_90"), fake_encoder)


def test_tiles_fit_the_shared_memory_of_the_card_they_were_measured_on():
    big = next(t for t in TILE_CANDIDATES if t.shared() > manifest.SHARED_LIMIT)
    assert manifest.shared_limit_of_tiles() >= big.shared()  # the H200's table
    assert manifest.tile_serves(big, 1024, 1024, 1024)
    assert not manifest.tile_serves(big, 1024, 1024, 1024, manifest.SHARED_LIMIT)


def test_a_device_with_less_shared_memory_is_refused_first(driver_calls):
    from planner.model.config import DEFAULT
    from planner.runtime import cuda
    from planner.runtime.driver import Device
    from planner.schedule import build_plan

    plan = build_plan(DEFAULT)
    most = max(img.shared_bytes for img in plan.images)
    card = Device(0, None, None, "sm_86", "a smaller card", manifest.SHARED_LIMIT)
    assert most > card.shared_limit
    with pytest.raises(cuda.NoDevice, match="the a smaller card offers 101,376"):
        cuda.CudaDevice(plan, card)
    assert not driver_calls


def test_bench_refuses_a_smaller_card_in_one_line(monkeypatch, capsys):
    from planner import cli
    from planner.runtime import cuda
    from planner.runtime.driver import Device

    monkeypatch.setattr(cuda, "open_gpu", lambda: Device(0, None, None, "sm_86", "a smaller card",
                                                           manifest.SHARED_LIMIT))
    monkeypatch.setattr(cuda, "call", lambda *args: pytest.fail(f"the driver was called: {args[0]}"))
    assert cli.main(["bench", "--batches", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("planner bench: image tiled-") and "offers 101,376" in err[0]
