"""Every image compiles with NVRTC for sm_86 and sm_90, and its cubin honours
the manifest: registers within the bound, the block, the shared memory, the
parameter layout, and no local memory (no spills, no stack; only a walk of
256 columns on other cards than sm_90, `spills_beside_copies`); the streaming
attention's warpgroup products stay in flight together."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.kernels.manifest import (POINTER, PRODUCT_FAMILIES, SHARED_LIMIT, STREAMING_ATTENTION, image,
                                      layernorm_parts, spills_beside_copies, tensor_maps)
from planner.runtime import nvrtc
from planner.certify.sass.disasm import run_nvdisasm
from planner.runtime.cubin_info import kernel_info
from tests.kernel_images import CASES

ARCHITECTURES = ("sm_86", "sm_90")
# the products take all their shared memory dynamically, as the manifest
# gives it; so do these families' images where the manifest gives any (the
# attention's parts and the key walk's stages, the layer norm backward's
# rows a row ahead)
DYNAMIC_SHARED = PRODUCT_FAMILIES
DYNAMIC_WHERE_GIVEN = (*STREAMING_ATTENTION, "layernorm-backward", "layernorm-backward-add")
STATIC_SHARED_LIMIT = 48 * 1024
# the most shared memory a block may take on any card the images serve
# (sm_90's opt-in limit); a plan's products take at most what the card the
# tiles were measured on offers (`tile_serves`)
HOPPER_SHARED_LIMIT = 227 * 1024


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("img", [c[2] for c in CASES], ids=[c[0] for c in CASES])
def test_cubin_honours_the_manifest(img, arch):
    info = kernel_info(nvrtc.compile_image(img, arch))
    assert info.registers <= img.registers, f"{info.registers} registers over the bound {img.registers}"
    assert info.max_threads == (img.block, 1, 1)
    assert info.frame_bytes == 0 or spills_beside_copies(img, arch), \
        f"{info.frame_bytes} bytes of local memory a thread"
    expected = [(offset, 8 if a.kind == POINTER else 4) for a, offset in zip(img.arguments, img.offsets)]
    declared = [(p.offset, p.size) for p in info.parameters]
    assert declared[:len(expected)] == expected
    # past the block, only the tensor maps the runtime appends where there are tensor copies
    maps = len(tensor_maps(img)) if arch == "sm_90" else 0
    assert [size for _, size in declared[len(expected):]] == [128] * maps
    if not maps:
        assert expected[-1][0] + expected[-1][1] == info.parameter_bytes <= img.parameter_bytes
    if img.family in DYNAMIC_SHARED or (img.family in DYNAMIC_WHERE_GIVEN and img.shared_bytes):
        assert info.static_shared == 0 and img.shared_bytes <= HOPPER_SHARED_LIMIT
    else:
        assert info.static_shared <= STATIC_SHARED_LIMIT
        assert img.shared_bytes in (0, info.static_shared), "the manifest's shared memory is the kernel's"


@pytest.mark.parametrize("img", [c[2] for c in CASES if c[2].family in STREAMING_ATTENTION],
                         ids=[c[0] for c in CASES if c[2].family in STREAMING_ATTENTION])
def test_the_attention_keeps_its_products_in_flight(img):
    """ptxas issues an image's warpgroup products one at a time, a wait
    (WARPGROUP.DEPBAR) after each, once it finds their sums touched while
    products are in flight (kernels/attention.cuh, fence_sums): so were the
    key image's, 60.6 us a launch at 8 x 1024 against 52.1."""
    listing = run_nvdisasm(nvrtc.compile_image(img, "sm_90"))
    products, waits = listing.count("HGMMA."), listing.count("WARPGROUP.DEPBAR")
    assert products >= 8 and waits < products / 2, f"{waits} waits for {products} warpgroup products"


@pytest.mark.parametrize("family", ["layernorm-backward", "layernorm-backward-add"])
@pytest.mark.parametrize("rows,width", [(1024, 512), (8192, 512), (8192, 1024), (8192, 2048), (8192, 192)])
def test_a_layer_norm_backward_stages_rows_where_the_manifest_gives_them(family, rows, width):
    """The source and the manifest agree on whether a layer norm backward
    copies its warps' rows a row ahead into shared memory: where the
    manifest gives the stages the cubin declares no shared memory of its own
    (the warps' sums take the stages' first words), elsewhere only those
    sums; and the stages fit every card (a warp of one row, stages too wide
    for sm_86 (rows of 2048 with the residual's: 160 KB), or a row that is
    no whole rounds of a warp's copies, three heads of 64, take none)."""
    img = image(family, rows=rows, width=width, parts=layernorm_parts(rows), half="binary16")
    info = kernel_info(nvrtc.compile_image(img, "sm_86"))
    assert img.shared_bytes <= SHARED_LIMIT
    staged = {(8192, 512), (8192, 1024)} | ({(8192, 2048)} if family == "layernorm-backward" else set())
    assert (img.shared_bytes > 0) == ((rows, width) in staged)
    assert info.static_shared == (0 if img.shared_bytes else 2 * width * 4)


def test_the_prelude_bakes_the_constants():
    text = nvrtc.prelude(image("tiled", a_layout="c", b_layout="r", m=128, n=64, k=32, residual=0, block_m=64,
                               block_n=64, block_k=32, stages=2, warps_m=2, warps_n=2, k_groups=1, k_blocks=1, wgmma=0,
                               per_sm=1, tensor_store=0, half="bfloat16"))
    for line in ("#define IMAGE_FAMILY_TILED 1", "constexpr int BLOCK = 128;", "constexpr bool A_COLUMNS = true;",
                 "constexpr bool B_COLUMNS = false;", "#define HALF_BFLOAT16 1", "constexpr int BLOCK_M = 64;",
                 "constexpr int M = 128;"):
        assert line in text.splitlines()


def test_the_cache_is_keyed_and_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_VARIABLE, str(tmp_path))
    img = image("fill")
    cubin = nvrtc.compile_image(img, "sm_86")
    cached = tmp_path / "cubin" / f"{nvrtc.cache_key(img, 'sm_86')}.cubin"
    assert cached.read_bytes() == cubin
    assert nvrtc.cache_key(img, "sm_90") != nvrtc.cache_key(img, "sm_86")
    cached.write_bytes(b"from the cache")
    assert nvrtc.compile_image(img, "sm_86") == b"from the cache"


def _case(name: str):
    """The image of the kernel case `name` (tests/kernel_images.py)."""
    return next(img for case, _, img, *_ in CASES if case == name)


@pytest.mark.parametrize("img,says", [
    pytest.param(image("attention-forward", batch=1, seq=1024, heads=8, kv_heads=8, parts=2, half="binary16"),
                 "the manifest gives every part its stages", id="forward-two-parts"),
    pytest.param(image("attention-key", batch=1, seq=1024, heads=8, kv_heads=8, parts=1, half="binary16"),
                 "the manifest gives every part its stages", id="key-walk"),
    pytest.param(image("layernorm-backward", rows=8192, width=512, parts=layernorm_parts(8192), half="binary16"),
                 "the manifest gives the rows' stages", id="layernorm-backward-ahead"),
    pytest.param(_case("tile-40-tiled-rc-m256-n256-k512"), "the manifest gives the ring and its mbarriers",
                 id="product-ring"),
    pytest.param(_case("stored-tile-60-tiled-rc-m2048-n2304-k128-half"),
                 "the manifest gives every multiplying warpgroup its slab", id="product-slabs"),
    pytest.param(_case("heads-tile-54-tiled-rc-m1024-n256-k256-heads"), "the manifest gives the row sums their bytes",
                 id="heads-row-sums"),
    pytest.param(_case("tile-52-tiled-rc-m256-n256-k512"),
                 "the manifest gives the second warpgroup's sums past the ring", id="product-turns"),
    pytest.param(_case("tile-8-tiled-cc-m256-n256-k512"), "the manifest gives every K group its ring",
                 id="product-k-groups"),
    pytest.param(_case("tile-12-tiled-rr-m256-n256-k512"), "the manifest gives the later K groups' or blocks' sums",
                 id="product-k-group-sums"),
])
def test_a_manifest_giving_less_shared_memory_than_the_source_lays_out_does_not_compile(img, says):
    """A source that carves the dynamic shared memory itself asserts that
    the manifest gives what it carves (IMAGE_SHARED_BYTES), so that a
    manifest short of it is refused when the image is compiled, not found
    by a launch writing past it (a forward of two parts whose stages grew
    by a tile: CUDA_ERROR_ILLEGAL_ADDRESS). The image as the manifest
    makes it compiles; with 1 KB less it does not."""
    assert img.shared_bytes > 0
    nvrtc._compile(img, "sm_90")
    short = replace(img, shared_bytes=img.shared_bytes - 1024)
    with pytest.raises(nvrtc.CompileError, match=says):
        nvrtc._compile(short, "sm_90")


def test_a_refused_image_carries_the_log(monkeypatch):
    monkeypatch.setattr(nvrtc, "source", lambda img: "this is not C++;")
    with pytest.raises(nvrtc.CompileError, match="does not compile:\n.*error"):
        nvrtc._compile(image("fill"), "sm_86")
