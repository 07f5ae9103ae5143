"""The device images: every kernel the plan launches, with its manifest.

An image is a kernel family (one `kernels/<family>.cu`) specialised by
constants the planner bakes into its source (shapes, the half format, a
product's tile). Its manifest is what the certificate reads: the argument ABI
(the kernel's parameter list, laid out by the C rules, which is exactly the
byte image `cuLaunchKernel` takes), each pointer argument's access and the
bytes it may touch as a function of the image's constants and the launch's
scalars, the grid that covers the work, the block, the shared memory and the
register bound the source is compiled under.

Every access is one contiguous byte range from the pointer the launch passes:
layouts are chosen so (the rotary tables are column-major for this reason).
A manifest may claim more than the kernel touches (a read it can skip), never
less: the certificate is sound only if the kernel honours the manifest.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from math import ceil, prod
from typing import Callable, Mapping

from planner.model.config import HALF_FORMATS

# The architectures every image is built for: the seeds' card and the card we measure on.
ARCHS = ("sm_86", "sm_90")


def dependent_launch(arch: str) -> bool:
    """Whether a submission's launches are linked by programmatic dependencies
    on `arch` (sm_90 on): a launch may start while the one before it drains,
    so its image must wait (griddepcontrol.wait) before touching global
    memory, which the machine-code check holds it to."""
    return int(arch.removeprefix("sm_")) >= 90

POINTER, U32, F32 = "pointer", "u32", "f32"
READ, WRITE, READ_WRITE = "read", "write", "read-write"
HALF_BYTES = 2

Constants = Mapping[str, "int | str"]
Scalars = Mapping[str, int]  # scalar name -> its 32-bit word


@dataclass(frozen=True)
class Argument:
    """One parameter of an image: its ABI slot is derived from its place."""

    name: str
    kind: str                 # pointer | u32 | f32
    access: str | None = None  # read | write | read-write (pointers only)


@dataclass(frozen=True)
class Family:
    """A kernel source and the rules its manifest follows."""

    name: str
    arguments: tuple[Argument, ...]
    block: Callable[[Constants], int]
    grid: Callable[[Constants, Scalars], tuple[int, int, int]]
    # bytes from each pointer argument the launch may touch
    extents: Callable[[Constants, Scalars], dict[str, int]]
    # bytes of the arguments a launch touches fewer of than it may (a gather's
    # rows of a table it may read anywhere): what its floor counts
    least: Callable[[Constants, Scalars], dict[str, int]] = lambda c, s: {}
    # the operations of the matrix products a launch takes (a multiply and
    # an add, two): its floor's other term, over the device's matrix rate
    operations: Callable[[Constants], int] = lambda c: 0
    registers: int = 64                     # the bound the source is compiled under
    shared: Callable[[Constants], int] = lambda c: 0
    constants: tuple[str, ...] = ()         # the constants the source needs
    per_step: tuple[str, ...] = ()          # scalars the host rewrites every step
    source: str = ""                        # kernels/<source>.cu; the family's name when empty

    @property
    def source_file(self) -> str:
        return f"{self.source or self.name}.cu"


def _args(spec: str) -> tuple[Argument, ...]:
    """'out:w in:r n:u32 s:f32' -> arguments (pointers before scalars)."""
    out = []
    for item in spec.split():
        name, tag = item.split(":")
        if tag in ("r", "w", "rw"):
            out.append(Argument(name, POINTER, {"r": READ, "w": WRITE, "rw": READ_WRITE}[tag]))
        else:
            out.append(Argument(name, tag))
    kinds = [a.kind == POINTER for a in out]
    assert kinds == sorted(kinds, reverse=True), f"pointers first: {spec}"
    return tuple(out)


def _blocks(n: int, per: int) -> int:
    return max(1, ceil(n / per))


def _fixed(n: int) -> Callable[[Constants], int]:
    return lambda c: n


def _elementwise(name: str, spec: str, sizes: dict[str, int], per_thread: int = 1,
                 constants: tuple[str, ...] = ()) -> Family:
    """A thread per `per_thread` elements; `elements` is a scalar; each pointer
    argument spans elements x its element size."""
    return Family(
        name, _args(spec), _fixed(256),
        lambda c, s: (_blocks(s["elements"], 256 * per_thread), 1, 1),
        lambda c, s: {arg: s["elements"] * size for arg, size in sizes.items()},
        registers=64, constants=constants)


_GELU_SCALARS = "sqrt_two_over_pi:f32 cubic:f32 half:f32 one:f32 cubic_slope:f32 elements:u32"


def _gelu_extents(c: Constants, s: Scalars, plain: tuple[str, ...], pairs: tuple[str, ...]) -> dict[str, int]:
    """The gated GELU's: the up and gate projections (and, backward, their
    gradients) in rows of 2 ffn halves, the up projection's then the gate
    projection's. A count of elements that ends inside a row is refused: a
    pair's extent would claim bytes the launch leaves unread or unwritten."""
    n = s["elements"]
    if n % c["ffn"]:
        raise ValueError(f"elements {n} are not whole rows of ffn {c['ffn']}")
    return {k: n * HALF_BYTES for k in plain} | {k: n * 2 * HALF_BYTES for k in pairs}


# The warps of a layer norm backward's block, at every row count. Measured in
# the update on the H200, a launch with the residual: 1 x 1024, 3.0 us with
# four warps against 3.4 with eight; at 8 x 1024, where the warps walk rows
# in turn and stage them (80 KB a block with eight warps, 40 with four), the
# update 9.088 ms with eight against 9.048 with four (medians of four rounds
# in turn; four faster in each of seven rounds over two runs).
LAYERNORM_WARPS = 4


def layernorm_parts(rows: int) -> int:
    """The blocks of a layer norm's backward: a row for each of the block's
    warps in turn, as many turns as keep the blocks at most 256. A block
    takes four rows or more, so its sums (2 width words a block) fill at
    most the first half of x-hat's plane (rows x width binary32 words),
    before the gradient's half copy in the second."""
    return ceil(rows / (LAYERNORM_WARPS * ceil(rows / (256 * LAYERNORM_WARPS))))


def _layernorm_stages(rows32: int) -> Callable[[Constants], int]:
    """A layer norm backward's shared memory: where its warps walk rows in
    turn, each warp's two stages of `rows32` binary32 rows (x, and the
    residual where it adds one) and dy's row in the half format, the next
    row copied while the warp works on one, if a row is whole rounds of the
    warp's 16-byte copies (128 words; dy's 256 halves) and the stages fit
    every card's block (SHARED_LIMIT); none where a warp takes one row. The
    source decides the same (layernorm-backward.cu's AHEAD)."""
    def shared(c: Constants) -> int:
        rows_per_warp = ceil(ceil(c["rows"] / c["parts"]) / LAYERNORM_WARPS)
        stages = LAYERNORM_WARPS * 2 * (rows32 * 4 + HALF_BYTES) * c["width"]
        return stages if rows_per_warp > 1 and c["width"] % 256 == 0 and stages <= SHARED_LIMIT else 0
    return shared


def _layernorm_backward_extents(c: Constants, s: Scalars) -> dict[str, int]:
    """dy in the half format, as the product that makes it rounds it."""
    rows, width = c["rows"], c["width"]
    return {k: rows * width * 4 for k in ("dx", "x")} | {
        "gamma": width * 4, "statistics": rows * 8, "partials": c["parts"] * 2 * width * 4,
        "dy": rows * width * HALF_BYTES, "dx_half": rows * width * HALF_BYTES}


# the rows of C a warpgroup stages in shared memory at once (TENSOR_STORE)
_SLAB_ROWS = 64


def _product_shared(c: Constants, output: str = "binary32") -> int:
    """Each K group's ring of stages; the later groups' (or a cluster's later
    blocks') accumulators reuse it. With WGMMA 2 and 3 one ring, then each
    stage's full and empty mbarriers, then (K groups taking the steps in
    turn) the second group's sums, beside the ring the walk goes on with, or
    (TENSOR_STORE) each multiplying warpgroup's slab of C: its 64 rows of a
    binary32 or half C, of a gated product's three boxes of 64 halves (the
    up, the gate, their activation), which a wider tile fills in passes, or
    of a rotary product's heads in the half format."""
    tile_sums = c["block_m"] * c["block_n"] * 4
    ring = c["stages"] * (c["block_m"] + c["block_n"]) * c["block_k"] * HALF_BYTES
    if c["wgmma"] >= 2:
        barriers = 2 * c["stages"] * 8 + (2 * 8 if _staged_r(c) else 0)
        if c["tensor_store"]:  # each multiplying warpgroup's slab of C, 1024-byte aligned (the swizzle's period)
            slab = (3 * _SLAB_ROWS * 64 * HALF_BYTES if output == "gated"
                    else _SLAB_ROWS * c["block_n"] * _c_element(output))
            slabs = c["warps_m"] * c["warps_n"] // 4 * slab
            return -(-(ring + barriers) // 1024) * 1024 + slabs
        return max(ring, tile_sums if c["k_blocks"] > 1 else 0) + barriers + (c["k_groups"] - 1) * tile_sums
    return max(c["k_groups"] * ring, max(c["k_groups"] - 1, int(c["k_blocks"] > 1)) * tile_sums)


def _c_element(output: str) -> int:
    """The bytes of an element of C as the output writes it (PRODUCT_OUTPUTS):
    binary32, or the half format."""
    return 4 if output == "binary32" else HALF_BYTES


def _staged_r(c: Constants) -> bool:
    """A residual the walk of WGMMA 2 brings through its slabs of C by tensor
    copies (each multiplying warpgroup's own mbarrier for it, after the
    ring's; a Tile's shared memory, asked without its product, counts none:
    they lie in the slabs' alignment either way)."""
    return bool(c["tensor_store"] and c.get("residual") and c["wgmma"] == 2)


def _row_sums_shared(c: Constants) -> int:
    """A heads product's row terms where a warp holds part of a head's
    columns (the warps' path, WARP_N under 64): each warp's partial sums of
    its rows meet in shared memory, a word for each row of the tile and warp
    along N. Where the block walks tiles (WGMMA 2, 3) the copying warpgroup
    still fills the ring, so they take their own bytes past everything else;
    otherwise they reuse the ring."""
    split = c["block_n"] // c["warps_n"] < 64
    return c["warps_n"] * c["block_m"] * 4 if split and c["wgmma"] >= 2 else 0


def _output_shared(c: Constants, output: str = "binary32") -> int:
    """The shared memory of a product's block that writes `output` (a key of
    PRODUCT_OUTPUTS): a heads product's is a binary32 one's and its row
    terms' (`_row_sums_shared`)."""
    return _product_shared(c) + _row_sums_shared(c) if output == "heads" else _product_shared(c, output)


def _product_block(c: Constants) -> int:
    """The warps of every K group, and with WGMMA 2 the warpgroup that copies."""
    return c["warps_m"] * c["warps_n"] * 32 * c["k_groups"] + (128 if c["wgmma"] >= 2 else 0)


def _product_operations(c: Constants) -> int:
    return 2 * c["m"] * c["n"] * c["k"]


def _product_grid(c: Constants, s: Scalars) -> tuple[int, int, int]:
    """A block per tile of C (by its K blocks); with WGMMA 2 and 3 at most
    `per_sm` waves of blocks (as many as a multiprocessor holds at once),
    each walking the tiles t, t + grid, ..., unless K is split across a
    cluster's blocks (then a block per tile and K share)."""
    along_n, along_m = c["n"] // c["block_n"], c["m"] // c["block_m"]
    if c["wgmma"] >= 2:
        tiles = along_n * along_m
        return (tiles, 1, c["k_blocks"]) if c["k_blocks"] > 1 else (min(tiles, c["per_sm"] * FILL_BLOCKS), 1, 1)
    return (along_n, along_m, c["k_blocks"])


def _product_extents(c: Constants, s: Scalars) -> dict[str, int]:
    m, n, k = c["m"], c["n"], c["k"]
    out = {"c": m * n * 4, "a": m * k * HALF_BYTES, "b": n * k * HALF_BYTES}
    if c["residual"]:
        out["r"] = m * n * 4
    return out


def _operand_extents(c: Constants, s: Scalars) -> dict[str, int]:
    """A product's operands' extents, for an output stored elsewhere than C."""
    return {k: v for k, v in _product_extents(c, s).items() if k != "c"}


def _half_product_extents(c: Constants, s: Scalars) -> dict[str, int]:
    return _product_extents(c, s) | {"c": c["m"] * c["n"] * HALF_BYTES}


def _gated_product_extents(c: Constants, s: Scalars) -> dict[str, int]:
    return _half_product_extents(c, s) | {"gated": c["m"] * c["n"] // 2 * HALF_BYTES}


def _heads_product_extents(c: Constants, s: Scalars) -> dict[str, int]:
    """The operands', the heads' layout in place of C, a row term for each
    row and head, and the forward's output (token-major, C's shape)."""
    operands = _operand_extents(c, s)
    halves = c["m"] * c["n"] * HALF_BYTES
    return operands | {"heads": halves, "row_terms": c["m"] * c["heads"] * 4, "out": halves}


def _rope_product_extents(c: Constants, s: Scalars) -> dict[str, int]:
    """The operands', and the heads' layouts in place of C."""
    p = _attention_planes({**c, "batch": c["m"] // c["seq"]})
    operands = _operand_extents(c, s)
    return operands | {"queries": p["q"], "keys": p["kv"], "values": p["kv"], "cosine": p["angles"],
                       "sine": p["angles"]}


_PRODUCT_CONSTANTS = ("a_layout", "b_layout", "m", "n", "k", "residual", "block_m", "block_n", "block_k",
                      "stages", "warps_m", "warps_n", "k_groups", "k_blocks", "wgmma", "per_sm", "tensor_store",
                      "half")
# the constants of the outputs stored by head (kernels/tiled.cu): the
# rotary product's queries', keys' and values' heads (ROPE), the context
# gradient's heads (BY_HEAD)
HEADS_CONSTANTS = {"rope": ("seq", "heads", "kv_heads"), "heads": ("seq", "heads")}


def _product_family(name: str, arguments: str, extents: Callable[[Constants, Scalars], dict[str, int]],
                    constants: tuple[str, ...] = _PRODUCT_CONSTANTS) -> Family:
    """A matrix product of kernels/tiled.cu: its tile's block, grid and
    shared memory (that of the output the family writes), its epilogue's
    arguments and extents."""
    output = _OUTPUT_OF_FAMILY.get(name, "binary32")
    return Family(name, _args(arguments), _product_block, _product_grid, extents, registers=255,
                  shared=lambda c: _output_shared(c, output), constants=constants,
                  operations=_product_operations, source="tiled")


PRODUCT_FAMILIES = ("tiled", "tiled-add", "tiled-half", "tiled-gated", "tiled-rope", "tiled-heads")
# what a product writes (its family, its key's suffix): C in binary32 (with R
# added where it has one), C in the half format, the up and gate projections
# in the half format with the gated activation, the queries, keys and
# values by head in the half format, the queries and keys turned, or C by
# head in the half format with the attention backward's row terms
PRODUCT_OUTPUTS = {"binary32": ("tiled", ""), "half": ("tiled-half", "-half"), "gated": ("tiled-gated", "-gated"),
                   "rope": ("tiled-rope", "-rope"), "heads": ("tiled-heads", "-heads")}
_OUTPUT_OF_FAMILY = {family: output for output, (family, _) in PRODUCT_OUTPUTS.items()}


def product_output(img: Image) -> str:
    """What a product's image writes (a key of PRODUCT_OUTPUTS): tiled-add's
    C is binary32, R added."""
    return _OUTPUT_OF_FAMILY.get(img.family, "binary32")
# outputs whose epilogue pairs C's columns, so that a tile holds whole
# n-tiles (no K split)
PAIRED_OUTPUTS = ("gated", "rope")
# outputs whose epilogue sums each head's columns of a row, so that one
# block stores the whole tile (no K split across a cluster's blocks, which
# each store a share of its n-tiles; K groups meet in the first, which
# stores it all)
SUMMED_OUTPUTS = ("heads",)

_ATTENTION_TILE = 64 * 64 * HALF_BYTES
_ATTENTION_CONSTANTS = ("batch", "seq", "heads", "kv_heads", "parts", "half")


def _attention_block(c: Constants) -> int:
    return 128 * c["parts"]


def _attention_shared(stage: int, own: int = 0, dynamic: bool = False) -> Callable[[Constants], int]:
    """Two stages of `stage` bytes, taking whole kilobytes together (their
    tiles start 1024-byte aligned, the rows' terms after them), and `own`
    bytes of the block's own tiles, for each part (the later parts' sums
    reuse them), dynamic; a block of one part declares them statically,
    unless they are more than a block may so declare (`dynamic`: 48 KB)."""
    return lambda c: c["parts"] * (-(-2 * stage // 1024) * 1024 + own) if c["parts"] > 1 or dynamic else 0


def _attention_planes(c: Constants) -> dict[str, int]:
    """Bytes of the heads' layouts: [batch][head][seq][64] and kin (the
    backward's gradients, [head 64][batch seq] transposed, as many), and of
    a rotary table ([32][seq])."""
    b, s, h, kv = c["batch"], c["seq"], c["heads"], c["kv_heads"]
    return {"q": b * h * s * 64 * HALF_BYTES, "kv": b * kv * s * 64 * HALF_BYTES,
            "rows": b * h * s * 4, "merged": b * s * h * 64 * HALF_BYTES, "angles": s * 32 * 4}


def _attention_operations(products: int) -> Callable[[Constants], int]:
    """A walk's product operations: `products` products of 64 x 64 x 64 a
    step (the forward's S and P V; the query walk's S, dP and dS K; the key
    walk's S, dP, P dO and dS Q; the one-launch backward's both), a step for
    each query head and each pair of a query tile and a key tile up to the
    diagonal (the diagonal's tiles taken whole)."""
    def operations(c: Constants) -> int:
        tiles = c["seq"] // 64
        return products * 2 * 64 ** 3 * c["batch"] * c["heads"] * tiles * (tiles + 1) // 2
    return operations


def _attention_backward_family(name: str, gradients: tuple[str, ...], blocks_by: str,
                               shared: Callable[[Constants], int], products: int) -> Family:
    """A streaming attention backward image: what every walk reads, and the
    rows of the transposed qkv gradient its walks write (`gradients`: d_q a
    query head's, d_k and d_v a K/V head's), a block per 64 rows of each of
    `blocks_by`'s heads."""
    def extents(c: Constants, s: Scalars) -> dict[str, int]:
        p = _attention_planes(c)
        rows = {"d_q": p["q"], "d_k": p["kv"], "d_v": p["kv"]}
        return {"q": p["q"], "k": p["kv"], "v": p["kv"], "d_out": p["q"], "log_sum_exp": p["rows"],
                "row_terms": p["rows"], "cosine": p["angles"], "sine": p["angles"]} | {g: rows[g] for g in gradients}

    writes = " ".join(f"{g}:w" for g in gradients)
    return Family(name, _args(f"q:r k:r v:r d_out:r log_sum_exp:r row_terms:r {writes} cosine:r sine:r "
                              "stream_scale:f32 score_scale:f32"),
                  _attention_block, lambda c, s: (c["seq"] // 64, c[blocks_by], c["batch"]), extents,
                  registers=255, shared=shared, operations=_attention_operations(products),
                  constants=_ATTENTION_CONSTANTS)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    _elementwise("random-normal", "out:w seed:u32 counter:u32 scale:f32 elements:u32", {"out": 4}),
    Family("rotary-table", _args(
        "cosine:w sine:w theta_high:f32 theta_low:f32 inverse_two_pi:f32 two_pi_high:f32 "
        "two_pi_low:f32 rounding_magic:f32"),
        _fixed(256), lambda c, s: (_blocks(c["seq"], 256), 1, 1),
        lambda c, s: {"cosine": c["seq"] * 4, "sine": c["seq"] * 4}, constants=("seq",)),
    _elementwise("fill", "out:w value:f32 elements:u32", {"out": 4}),
    _elementwise("copy", "out:w in:r elements:u32", {"out": 4, "in": 4}),
    _elementwise("cast-down", "out:w in:r elements:u32", {"out": HALF_BYTES, "in": 4}, per_thread=2,
                 constants=("half",)),
    _elementwise("add", "out:w left:r right:r elements:u32", {"out": 4, "left": 4, "right": 4}),
    Family("argmax", _args("out:w in:r"), _fixed(256), lambda c, s: (1, 1, 1),
           lambda c, s: {"out": 4, "in": c["vocab"] * 4}, constants=("vocab",)),
    # a warp a row, eight rows a block
    Family("gather", _args("out:w ids:r table:r"), _fixed(256), lambda c, s: (_blocks(c["rows"], 8), 1, 1),
           lambda c, s: {"out": c["rows"] * c["width"] * 4, "ids": c["rows"] * 4,
                         "table": c["vocab"] * c["width"] * 4},
           least=lambda c, s: {"table": min(c["rows"], c["vocab"]) * c["width"] * 4},
           constants=("rows", "width", "vocab")),
    # a warp a row, four rows a block
    Family("layernorm-forward", _args("out:w in:r gamma:r beta:r statistics:w inverse_width:f32 epsilon:f32"),
           _fixed(128), lambda c, s: (_blocks(c["rows"], 4), 1, 1),
           lambda c, s: {"out": c["rows"] * c["width"] * HALF_BYTES, "in": c["rows"] * c["width"] * 4,
                         "gamma": c["width"] * 4, "beta": c["width"] * 4, "statistics": c["rows"] * 8},
           constants=("rows", "width", "half")),
    Family("layernorm-backward", _args(
        "dx:w x:r dy:r gamma:r partials:w dx_half:w statistics:r inverse_width:f32 epsilon:f32"),
        _fixed(32 * LAYERNORM_WARPS), lambda c, s: (c["parts"], 1, 1), _layernorm_backward_extents,
        registers=128, shared=_layernorm_stages(1), constants=("rows", "width", "parts", "half")),
    Family("layernorm-backward-add", _args(
        "dx:w x:r dy:r gamma:r partials:w dx_half:w statistics:r residual:r inverse_width:f32 epsilon:f32"),
        _fixed(32 * LAYERNORM_WARPS), lambda c, s: (c["parts"], 1, 1),
        lambda c, s: _layernorm_backward_extents(c, s) | {"residual": c["rows"] * c["width"] * 4},
        registers=128, shared=_layernorm_stages(2), constants=("rows", "width", "parts", "half"),
        source="layernorm-backward"),
    Family("layernorm-parameters", _args("gamma_gradient:w beta_gradient:w partials:r"),
           _fixed(256), lambda c, s: (2 * c["width"] // 32, 1, 1),
           lambda c, s: {"gamma_gradient": c["width"] * 4, "beta_gradient": c["width"] * 4,
                         "partials": c["parts"] * 2 * c["width"] * 4},
           constants=("width", "parts")),
    Family("attention-forward", _args("q:r k:r v:r out:w log_sum_exp:w stream_scale:f32"),
           _attention_block, lambda c, s: (c["seq"] // 64, c["heads"], c["batch"]),
           lambda c, s: {"q": _attention_planes(c)["q"], "k": _attention_planes(c)["kv"],
                         "v": _attention_planes(c)["kv"], "out": _attention_planes(c)["merged"],
                         "log_sum_exp": _attention_planes(c)["rows"]},
           registers=255, shared=_attention_shared(2 * _ATTENTION_TILE), operations=_attention_operations(2),
           constants=_ATTENTION_CONSTANTS),
    # the backward's gradients land as the rows of the transposed qkv
    # gradient, the queries' and keys' turned back by the rotary angles
    _attention_backward_family("attention-query", ("d_q",), "heads",
                               _attention_shared(2 * _ATTENTION_TILE, 2 * _ATTENTION_TILE), 3),
    # (the key walk's own tiles are in shared memory on sm_90a alone: the
    # bytes given are that card's, every card's most, 49 KB a part)
    _attention_backward_family("attention-key", ("d_k", "d_v"), "kv_heads",
                               _attention_shared(2 * _ATTENTION_TILE + 2 * 64 * 4, 2 * _ATTENTION_TILE, True), 4),
    # a part's stages are the larger walk's, the key walk's (attention-backward.cuh's PART_HALVES)
    _attention_backward_family("attention-backward", ("d_q", "d_k", "d_v"), "kv_heads",
                               _attention_shared(2 * _ATTENTION_TILE + 2 * 64 * 4, 2 * _ATTENTION_TILE, True), 7),
    # the loss's families read the logits in the half format
    Family("loss-target-gather", _args("correct:w logits:r targets:r"), _fixed(256),
           lambda c, s: (_blocks(c["rows"], 256), 1, 1),
           lambda c, s: {"correct": c["rows"] * 4, "logits": c["rows"] * c["vocab"] * HALF_BYTES,
                         "targets": c["rows"] * 4},
           least=lambda c, s: {"logits": c["rows"] * HALF_BYTES}, constants=("rows", "vocab", "half")),
    Family("cross-entropy", _args("loss:w logits:r correct:r log2e:f32 ln2:f32"), _fixed(256),
           lambda c, s: (c["rows"], 1, 1),
           lambda c, s: {"loss": c["rows"] * 4, "logits": c["rows"] * c["vocab"] * HALF_BYTES,
                         "correct": c["rows"] * 4},
           registers=64, constants=("rows", "vocab", "half")),
    # the loss too, from the same reading of the row (the update's: the
    # seed's cross-entropy and cross-entropy backward in one launch)
    Family("cross-entropy-backward", _args(
        "gradient:w loss:w logits:r correct:r targets:r log2e:f32 ln2:f32 gradient_scale:f32"),
        _fixed(256), lambda c, s: (c["rows"], 1, 1),
        lambda c, s: {"gradient": c["rows"] * c["vocab"] * HALF_BYTES,
                      "logits": c["rows"] * c["vocab"] * HALF_BYTES, "loss": c["rows"] * 4,
                      "correct": c["rows"] * 4, "targets": c["rows"] * 4},
        constants=("rows", "vocab", "half")),
    Family("embedding-scatter", _args("gradient:rw dy:r ids:r"), _fixed(512),
           lambda c, s: (min(_blocks(c["rows"], 16), FILL_BLOCKS), 1, 1),
           lambda c, s: {"gradient": c["vocab"] * c["width"] * 4, "dy": c["rows"] * c["width"] * 4,
                         "ids": c["rows"] * 4},
           least=lambda c, s: {"gradient": min(c["rows"], c["vocab"]) * c["width"] * 4},
           registers=128, constants=("rows", "width", "vocab")),
    Family("adamw", _args(
        "parameters:rw gradients:r first_moments:rw second_moments:rw halves:w beta1:f32 one_minus_beta1:f32 "
        "beta2:f32 one_minus_beta2:f32 decay:f32 step_size:f32 epsilon:f32"),
        # `blocks` blocks at most (each piece's: schedule.launches.adamw),
        # each walking the piece a grid's stride at a time
        _fixed(256), lambda c, s: (min(c["blocks"], _blocks(c["elements"] // 4, 256)), 1, 1),
        lambda c, s: {"parameters": c["elements"] * 4, "gradients": c["elements"] * 4,
                      "first_moments": c["elements"] * 4, "second_moments": c["elements"] * 4,
                      "halves": c["elements"] * HALF_BYTES},
        constants=("elements", "half", "blocks"), per_step=("step_size", "epsilon")),
    Family("gated-gelu-backward", _args(f"pair_gradient:w gated_gradient:r pair:r {_GELU_SCALARS}"),
           _fixed(256), lambda c, s: (_blocks(s["elements"], 256 * (8 if c["ffn"] % 8 == 0 else 1)), 1, 1),
           lambda c, s: _gelu_extents(c, s, ("gated_gradient",), ("pair_gradient", "pair")),
           constants=("half", "ffn")),
    _product_family("tiled", "c:w a:r b:r", _product_extents),
    _product_family("tiled-add", "c:w a:r b:r r:r", _product_extents),
    # C rounded to the half format: a product whose only readers convert it
    # to the half format anyway, or compute from it in binary32 what the
    # half copy loses little of (the queries, keys and values; the up and
    # gate projections), at half the bytes written and read
    _product_family("tiled-half", "c:w a:r b:r", _half_product_extents),
    # the up and gate projections (a half C) with the gated activation
    # gelu(gate) up in the epilogue (kernels/tiled.cu, GATED): the activation
    # takes no launch of its own, nor a reading of C
    _product_family("tiled-gated", "c:w gated:w a:r b:r sqrt_two_over_pi:f32 cubic:f32 half:f32",
                    _gated_product_extents),
    # the queries, keys and values with the rotary turn in the epilogue
    # (kernels/tiled.cu, ROPE), stored by head: the seed's qk-rope takes no
    # launch of its own, nor a reading of C
    _product_family("tiled-rope", "queries:w keys:w values:w a:r b:r cosine:r sine:r", _rope_product_extents,
                    constants=_PRODUCT_CONSTANTS + HEADS_CONSTANTS["rope"]),
    # the context's gradient by head in the half format, with the attention
    # backward's row terms from its rounded halves and the forward's output
    # in the epilogue (kernels/tiled.cu, BY_HEAD): the seed's token-to-head
    # takes no launch of its own, nor a binary32 C's round trip
    _product_family("tiled-heads", "heads:w row_terms:w a:r b:r out:r", _heads_product_extents,
                    constants=_PRODUCT_CONSTANTS + HEADS_CONSTANTS["heads"]),
]}


def parameter_offsets(arguments: tuple[Argument, ...]) -> tuple[tuple[int, ...], int]:
    """Each argument's byte offset in the parameter block, and the block's size,
    by the C rules the kernel's parameter list follows. The size ends with the
    last argument: the driver refuses a raw block longer than the parameters."""
    offsets, cursor = [], 0
    for a in arguments:
        size = 8 if a.kind == POINTER else 4
        cursor = -(-cursor // size) * size
        offsets.append(cursor)
        cursor += size
    return tuple(offsets), cursor


@dataclass(frozen=True)
class Image:
    """A family specialised by its constants: one compiled kernel."""

    name: str
    family: str
    constants: tuple[tuple[str, int | str], ...]
    arguments: tuple[Argument, ...] = field(compare=False)
    offsets: tuple[int, ...] = field(compare=False)
    parameter_bytes: int = field(compare=False)
    block: int = field(compare=False)
    shared_bytes: int = field(compare=False)
    registers: int = field(compare=False)

    @property
    def constant_map(self) -> dict[str, int | str]:
        return dict(self.constants)

    def argument(self, name: str) -> Argument:
        return next(a for a in self.arguments if a.name == name)

    def offset(self, name: str) -> int:
        return self.offsets[[a.name for a in self.arguments].index(name)]

    def grid(self, scalars: Scalars) -> tuple[int, int, int]:
        return FAMILIES[self.family].grid(self.constant_map, scalars)

    def extents(self, scalars: Scalars) -> dict[str, int]:
        return FAMILIES[self.family].extents(self.constant_map, scalars)

    def least(self, scalars: Scalars) -> dict[str, int]:
        """The bytes of each pointer argument a launch must touch: its extent
        but where the manifest says fewer (the launch's floor counts these;
        the certificate, the extents)."""
        return self.extents(scalars) | FAMILIES[self.family].least(self.constant_map, scalars)

    @property
    def operations(self) -> int:
        return FAMILIES[self.family].operations(self.constant_map)

    @property
    def per_step(self) -> tuple[str, ...]:
        return FAMILIES[self.family].per_step

    def words(self, scalars: Mapping[str, float | int]) -> dict[str, int]:
        """Each scalar argument's 32-bit word: an f32 rounded to binary32, a u32 modulo 2^32."""
        out = {}
        for a in self.arguments:
            if a.kind == F32:
                out[a.name] = struct.unpack("<I", struct.pack("<f", scalars[a.name]))[0]
            elif a.kind == U32:
                out[a.name] = int(scalars[a.name]) & 0xFFFFFFFF
        return out

    def parameter_block(self, addresses: Mapping[str, int], words: Mapping[str, int]) -> bytes:
        """The parameter block a launch passes outside a plan (tests, tools):
        the pointers' addresses and the scalars' words at the ABI offsets."""
        block = bytearray(self.parameter_bytes)
        for a, offset in zip(self.arguments, self.offsets):
            if a.kind == POINTER:
                struct.pack_into("<Q", block, offset, addresses[a.name])
            else:
                struct.pack_into("<I", block, offset, words[a.name])
        return bytes(block)


class ImageError(ValueError):
    pass


# The constants that are words, and the words each may be: the half format,
# and a product operand's layout ('c': stored K-major, A^T or B). Every other
# constant is an integer the source takes as a C++ int.
LAYOUTS = ("r", "c")
WORD_CONSTANTS = {"half": HALF_FORMATS, "a_layout": LAYOUTS, "b_layout": LAYOUTS}
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class TensorMapSpec:
    """A tensor map an image takes after its parameter block on a card with
    tensor copies (sm_90): a 2-D box walk over one pointer argument's
    elements (halves, or binary32), `inner` of them contiguous, `outer` rows
    of them (exactly the argument's extent), boxes of box_inner x box_outer,
    128-byte swizzled."""

    argument: str
    inner: int
    outer: int
    box_inner: int
    box_outer: int
    element: int = HALF_BYTES  # bytes: the halves, or (C, TENSOR_STORE) binary32


def tensor_maps(img: Image) -> tuple[TensorMapSpec, ...]:
    """The operands' tensor maps of a product fed by tensor copies (WGMMA 2,
    3): a stage's box of each, K-contiguous operands a box of 64 k by the
    tile's rows, K-strided ones 64-wide columns by BLOCK_K; then, where the
    tensor memory accelerator stores C (TENSOR_STORE), C's: boxes of 128
    bytes a row (32 binary32 columns, or 64 halves) by a slab's rows (a
    gated product's C and activation, and a rotary product's heads by
    plane, boxes of 64 halves); and where the walk of WGMMA 2 adds a
    residual, R's, the same boxes (it comes through the slabs)."""
    c = img.constant_map
    if img.family not in PRODUCT_FAMILIES or c["wgmma"] < 2:
        return ()
    m, n, k, block_k = c["m"], c["n"], c["k"], c["block_k"]
    a = (m, k, 64, block_k) if c["a_layout"] == "c" else (k, m, 64, c["block_m"])
    # a gated product brings B's stage as two boxes, the up's rows and the gate's
    b_rows = c["block_n"] // 2 if img.family == "tiled-gated" else c["block_n"]
    b = (n, k, 64, block_k) if c["b_layout"] == "c" else (k, n, 64, b_rows)
    if c["tensor_store"] and img.family == "tiled-gated":  # C's halves and the activation, 64 halves a box row
        stored = (TensorMapSpec("c", n, m, 64, _SLAB_ROWS), TensorMapSpec("gated", n // 2, m, 64, _SLAB_ROWS))
    elif c["tensor_store"] and img.family == "tiled-rope":  # the planes' rows [batch][head][seq], a head's 64 halves
        stored = tuple(TensorMapSpec(plane, 64, m * c[heads], 64, _SLAB_ROWS)
                       for plane, heads in (("queries", "heads"), ("keys", "kv_heads"), ("values", "kv_heads")))
    else:
        element = _c_element(product_output(img))
        stored = (TensorMapSpec("c", n, m, 128 // element, _SLAB_ROWS, element),) if c["tensor_store"] else ()
        stored += (TensorMapSpec("r", n, m, 32, _SLAB_ROWS, 4),) if _staged_r(c) else ()
    return (TensorMapSpec("a", *a), TensorMapSpec("b", *b)) + stored


def image(family: str, name: str | None = None, **constants: int | str) -> Image:
    """The image of `family` specialised by `constants` (all it needs, no more)."""
    spec = FAMILIES.get(family)
    if spec is None:
        raise ImageError(f"no image family {family!r} ships with planner")
    if set(constants) != set(spec.constants):
        raise ImageError(f"image family {family!r} takes constants {sorted(spec.constants)}, "
                         f"got {sorted(constants)}")
    for key, value in constants.items():
        words = WORD_CONSTANTS.get(key)
        if words is not None and value not in words:
            raise ImageError(f"image {family!r} constant {key!r} = {value!r} is not one of {', '.join(words)}")
        if words is None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX):
            raise ImageError(f"image {family!r} constant {key!r} = {value!r} is not an integer in [0, {INT32_MAX}]")
    offsets, size = parameter_offsets(spec.arguments)
    try:
        block, shared = spec.block(constants), spec.shared(constants)
    except (ArithmeticError, ValueError) as error:  # a tile that divides by zero, say
        raise ImageError(f"image {family!r}: its constants give no block ({error})") from None
    return Image(name or family, family, tuple(sorted(constants.items())), spec.arguments, offsets, size,
                 block, shared, spec.registers)


# ---- the tiled products' tiles (seed 003, coppeliusTiledCandidate) ----

@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    stages: int
    warps_m: int
    warps_n: int
    k_groups: int = 1
    block_k: int = 32
    wgmma: int = 0    # warpgroup products on sm_90 (a warpgroup per 64 rows); 2, 3: fed by a warpgroup
                      # of tensor copies, a wave of blocks walking the tiles (3: a tile a warpgroup)
    k_blocks: int = 1  # a cluster's blocks that split K (sm_90 on)
    per_sm: int = 1  # WGMMA 2, 3: the walking blocks a multiprocessor holds at once (the grid's waves)
    tensor_store: int = 0  # WGMMA 2, 3, a C of any output but heads (tile_serves): C goes through
                           # shared memory, the tensor memory accelerator stores it while the warpgroups
                           # multiply the next tile (WGMMA 2: and brings a residual's R into it while
                           # they multiply R's tile)

    def shared(self, output: str = "binary32") -> int:
        """The shared memory a product's block takes with this tile (a
        heads product's more: `_row_sums_shared`)."""
        c = vars(self)  # the image's constants a tile gives (asdict's deep copy took half of planning)
        return _output_shared(c, output)


# block M x block N x stages, warps along M x N: the seed's candidates 0..7,
# then ours: K groups that split a long K inside the block (8..13), steps of
# 64 along K (half the waits per product), warp tiles of 64 x 64 (18), and
# Hopper's warpgroup products, which other cards run as mma.sync (20..31;
# 28..31 in K groups; 32..37 with K split across a cluster's blocks; 38..45
# fed by tensor copies, with the H200's deeper rings; 46 a ring of five;
# 47..51 fed by tensor copies with K split across a cluster's blocks;
# 52..54 fed by tensor copies, two warpgroups taking a tile's K steps in turn,
# which with a half C the schedule check refuses for 52 and 53 on sm_90;
# 55..58 fed by tensor copies, two or three walking blocks a multiprocessor,
# so that one's products run while another stores its tile; 59..64 walking
# tiles of 38..46, 58 whose C goes through shared memory and is stored by
# tensor copies, so that the warpgroups multiply the next tile while it is
# written; 65 tile 45 with K split across a cluster's two
# blocks, a block per tile and half of K as 47..51, its deep ring for the
# long K of the logits' data gradient; 66 a walking tile of 128 x 256,
# m64n256k16 products, which asks L2 for fewer bytes a product than 128 x 128;
# 67 a walking tile of 128 x 256 whose half C (or gated C and activation,
# in two passes of 64 columns a half) goes through shared memory as 59's of
# 128 x 128, and three stages, so that the slabs fit beside the ring)
TILE_CANDIDATES = (
    Tile(128, 128, 4, 2, 4), Tile(128, 128, 2, 2, 4), Tile(64, 64, 4, 2, 2), Tile(64, 64, 2, 2, 2),
    Tile(128, 64, 4, 4, 2), Tile(64, 128, 4, 2, 4), Tile(256, 128, 2, 4, 2), Tile(128, 256, 2, 2, 4),
    Tile(64, 64, 4, 2, 2, 2), Tile(64, 64, 3, 2, 2, 4), Tile(128, 64, 4, 4, 2, 2), Tile(64, 128, 4, 2, 4, 2),
    Tile(128, 128, 2, 2, 4, 2), Tile(64, 64, 2, 2, 2, 4),
    Tile(128, 128, 3, 2, 4, block_k=64), Tile(64, 64, 4, 2, 2, block_k=64), Tile(128, 64, 4, 4, 2, block_k=64),
    Tile(64, 128, 4, 2, 4, block_k=64), Tile(128, 128, 3, 2, 2), Tile(64, 64, 3, 2, 2, 2, block_k=64),
    Tile(128, 128, 3, 2, 4, block_k=64, wgmma=1), Tile(64, 128, 4, 2, 2, block_k=64, wgmma=1),
    Tile(128, 64, 4, 4, 2, block_k=64, wgmma=1), Tile(64, 64, 4, 2, 2, block_k=64, wgmma=1),
    Tile(128, 128, 6, 2, 4, wgmma=1), Tile(64, 128, 8, 2, 2, wgmma=1), Tile(128, 64, 8, 4, 2, wgmma=1),
    Tile(64, 64, 8, 2, 2, wgmma=1), Tile(64, 64, 6, 2, 2, 2, wgmma=1), Tile(64, 128, 4, 2, 2, 2, wgmma=1),
    Tile(128, 64, 4, 4, 2, 2, wgmma=1), Tile(64, 64, 3, 2, 2, 4, wgmma=1),
    Tile(64, 128, 8, 2, 2, wgmma=1, k_blocks=2), Tile(64, 128, 8, 2, 2, wgmma=1, k_blocks=4),
    Tile(64, 64, 8, 2, 2, wgmma=1, k_blocks=2), Tile(64, 64, 8, 2, 2, wgmma=1, k_blocks=4),
    Tile(128, 128, 6, 2, 4, wgmma=1, k_blocks=2), Tile(128, 64, 8, 4, 2, wgmma=1, k_blocks=2),
    Tile(128, 128, 3, 2, 4, block_k=64, wgmma=2), Tile(128, 128, 3, 2, 4, block_k=64, wgmma=3),
    Tile(128, 128, 4, 2, 4, block_k=64, wgmma=2), Tile(128, 128, 4, 2, 4, block_k=64, wgmma=3),
    Tile(128, 128, 6, 2, 4, block_k=64, wgmma=3), Tile(64, 128, 4, 2, 2, block_k=64, wgmma=2),
    Tile(64, 64, 6, 2, 2, block_k=64, wgmma=2), Tile(64, 128, 8, 2, 2, block_k=64, wgmma=2),
    Tile(128, 128, 5, 2, 4, block_k=64, wgmma=3),
    Tile(128, 128, 4, 2, 4, block_k=64, wgmma=2, k_blocks=2), Tile(128, 128, 4, 2, 4, block_k=64, wgmma=2, k_blocks=4),
    Tile(128, 128, 4, 2, 4, block_k=64, wgmma=2, k_blocks=8), Tile(64, 128, 4, 2, 2, block_k=64, wgmma=2, k_blocks=2),
    Tile(64, 128, 4, 2, 2, block_k=64, wgmma=2, k_blocks=4),
    Tile(64, 128, 6, 2, 2, 2, block_k=64, wgmma=2), Tile(64, 128, 8, 2, 2, 2, block_k=64, wgmma=2),
    Tile(64, 64, 8, 2, 2, 2, block_k=64, wgmma=2),
    Tile(64, 128, 4, 2, 2, block_k=64, wgmma=2, per_sm=2), Tile(64, 64, 6, 2, 2, block_k=64, wgmma=2, per_sm=2),
    Tile(64, 64, 4, 2, 2, block_k=64, wgmma=2, per_sm=3), Tile(64, 128, 3, 2, 2, block_k=64, wgmma=2, per_sm=2),
    Tile(128, 128, 4, 2, 4, block_k=64, wgmma=2, tensor_store=1),
    Tile(128, 128, 4, 2, 4, block_k=64, wgmma=3, tensor_store=1),
    Tile(128, 128, 3, 2, 4, block_k=64, wgmma=2, tensor_store=1),
    Tile(128, 128, 5, 2, 4, block_k=64, wgmma=3, tensor_store=1),
    Tile(64, 128, 3, 2, 2, block_k=64, wgmma=2, per_sm=2, tensor_store=1),
    Tile(64, 128, 8, 2, 2, block_k=64, wgmma=2, tensor_store=1),
    Tile(64, 128, 8, 2, 2, block_k=64, wgmma=2, k_blocks=2),
    Tile(128, 256, 4, 2, 4, block_k=64, wgmma=2),
    Tile(128, 256, 3, 2, 4, block_k=64, wgmma=2, tensor_store=1),
)
# Shared memory a block may take where no tiles table says otherwise: every
# card the images serve has it (sm_86's opt-in limit).
SHARED_LIMIT = 99 * 1024
# Blocks enough to fill the device once (the H200 has 132 multiprocessors).
FILL_BLOCKS = 132


def tile_serves(t: Tile, m: int, n: int, k: int, shared_limit: int | None = None, output: str = "binary32") -> bool:
    """A tile serves a product when it divides C, its K groups take whole
    k-steps of K and its stages fit the shared memory (the seed's
    coppeliusTiledTileServes, with the groups): that of the device the tiles
    were measured on (`shared_limit_of_tiles`) unless another limit is given.
    A gated or rotary product's tiles hold whole n-tiles (no K split): its
    epilogue pairs each up value with its gate, each head's column with its
    partner. A heads product's tiles are stored by one block each (no K
    split across a cluster's blocks): its epilogue sums each head's row. A
    tile that stores C by tensor copies serves the outputs it can stage
    (`_stages_output`)."""
    limit = shared_limit_of_tiles() if shared_limit is None else shared_limit
    return (m % t.block_m == 0 and n % t.block_n == 0 and k % (t.block_k * t.k_groups * t.k_blocks) == 0
            and t.shared(output) <= limit and not (output in PAIRED_OUTPUTS and (t.k_groups > 1 or t.k_blocks > 1))
            and not (t.tensor_store and not _stages_output(t, output))
            and not (output in SUMMED_OUTPUTS and t.k_blocks > 1))


def spills_beside_copies(img: Image, arch: str) -> bool:
    """Whether the image's machine code may take local memory on `arch`: a
    walk of 256 columns (tiles 66, 67) built for a card before sm_90. Its
    128 sums a thread beside the copying warpgroup take more registers than
    such a card leaves a thread of the block (168), and only sm_90 on can
    hand the copying warpgroup's registers over (setmaxnreg). Every other
    image takes none, on every card; these none on sm_90."""
    c = img.constant_map
    return arch != "sm_90" and c.get("wgmma") == 2 and c.get("block_n") == 256


def _stages_output(t: Tile, output: str) -> bool:
    """What a tile whose tensor copies store C (a walk fed by tensor copies,
    WGMMA 2 or 3) stages: a binary32 or half C, a rotary product's heads (a
    box each), a gated product's C and activation where each half of the
    tile is whole boxes of 64 columns; not a heads product's (its epilogue
    sums each head's row from the registers)."""
    return {"gated": t.block_n % 128 == 0, "heads": False}.get(output, True)


# Without a recorded choice: the seed's four-stage tiles, largest first, are
# fastest on the H200 whenever they give the device a full wave.
TILE_PREFERENCE = (0, 4, 5, 2)


def product_key(a_layout: str, b_layout: str, m: int, n: int, k: int, residual: bool,
                output: str = "binary32") -> str:
    return f"{a_layout}{b_layout}-m{m}-n{n}-k{k}" + ("-add" if residual else "") + PRODUCT_OUTPUTS[output][1]


@cache
def _tiles_table() -> dict:
    return json.loads(resources.files("planner.kernels").joinpath("tiles.json").read_text())


def recorded_tiles() -> dict[str, int]:
    """The tile each product shape measured fastest with on the device
    (`scripts/tile_sweep.py` writes kernels/tiles.json; the seed records its
    choices the same way, coppeliusTiledChoiceFor)."""
    return {key: row["tile"] for key, row in _tiles_table()["choices"].items()}


# a share of the rows (A's, of a product reading A as rows) as small as a
# sixteenth of a recorded product's finds its tile
MAX_SHARE_SHIFT = 4


def recorded_tile(a_layout: str, b_layout: str, m: int, n: int, k: int, residual: bool,
                  output: str = "binary32") -> int | None:
    """The tile the table records for the product; for an output the sweep
    has not measured at this shape yet, the tile it records for the same
    shape with a binary32 C (the same operands and walk, another epilogue);
    for a product over a share of the step's rows (the forward's shares,
    launches.forward_shares), the tile it records for the product over
    twice, four times, ... as many rows, the nearest first: until a sweep
    of the key records its own."""
    recorded = recorded_tiles()
    shifts = MAX_SHARE_SHIFT if a_layout == "r" else 0  # A's rows, the tokens: the forward's products
    for rows in (m << shift for shift in range(shifts + 1)):
        for key in (product_key(a_layout, b_layout, rows, n, k, residual, output),
                    product_key(a_layout, b_layout, rows, n, k, residual)):
            if key in recorded:
                return recorded[key]
    return None


def shared_limit_of_tiles() -> int:
    """The shared memory a block may take on the device the tiles table was
    measured on (its opt-in limit, which the sweep records); a plan whose
    images take more than a device offers is refused there."""
    return _tiles_table().get("shared_limit", SHARED_LIMIT)


def choose_tile(a_layout: str, b_layout: str, m: int, n: int, k: int, residual: bool,
                output: str = "binary32") -> int:
    """The candidate a product takes: its recorded choice where one serves it
    (`recorded_tile`); else the first preferred tile that gives the device a
    full wave of blocks; else the serving tile with the most blocks (then
    stages)."""
    serving = [i for i, t in enumerate(TILE_CANDIDATES) if tile_serves(t, m, n, k, output=output)]
    if not serving:
        raise ImageError(f"no tile serves the product m={m} n={n} k={k}")
    recorded = recorded_tile(a_layout, b_layout, m, n, k, residual, output)
    if recorded in serving:
        return recorded
    blocks = lambda i: (m // TILE_CANDIDATES[i].block_m) * (n // TILE_CANDIDATES[i].block_n)
    for i in TILE_PREFERENCE:
        if i in serving and blocks(i) >= FILL_BLOCKS:
            return i
    return max((i for i in serving if TILE_CANDIDATES[i].k_groups == 1),
               key=lambda i: (blocks(i), TILE_CANDIDATES[i].stages))


def product(a_layout: str, b_layout: str, m: int, n: int, k: int, residual: bool, half: str,
            output: str = "binary32", heads: Mapping[str, int] | None = None) -> Image:
    """C (m x n) = A B (+ R): A rows (m x k) or columns (k x m), B rows (n x
    k, i.e. B^T) or columns (k x n); operands in the half format; C written
    as `output` says (PRODUCT_OUTPUTS): gated, B's rows are the up
    projection's, then the gate's; rope, C's columns are the heads' (seq,
    heads, kv_heads in `heads`); heads, C's columns are the heads' (seq,
    heads in `heads`)."""
    tile = choose_tile(a_layout, b_layout, m, n, k, residual, output)
    return tiled_image(a_layout, b_layout, m, n, k, residual, half, tile, output, heads)


def _heads_columns(output: str, heads: Mapping[str, int]) -> int:
    """C's columns of a product stored by head: the queries', keys' and
    values' heads (rope), or the context's (heads)."""
    count = heads["heads"] + 2 * heads["kv_heads"] if output == "rope" else heads["heads"]
    return count * 64


def tiled_image(a_layout: str, b_layout: str, m: int, n: int, k: int, residual: bool, half: str,
                tile: int, output: str = "binary32", heads: Mapping[str, int] | None = None) -> Image:
    """The product's image with one candidate tile (the sweep tries each)."""
    assert not (residual and output != "binary32"), "a residual is added to a binary32 C"
    assert output not in PAIRED_OUTPUTS or b_layout == "r", "a paired product's B rows are K-contiguous"
    assert (output in HEADS_CONSTANTS) == (heads is not None), "the heads are the outputs' stored by head"
    if heads is not None and (n != _heads_columns(output, heads) or m % heads["seq"]):
        raise ImageError(f"a {output} product of m={m} n={n} does not hold whole sequences and heads {dict(heads)}")
    t = TILE_CANDIDATES[tile]
    name = "tiled-" + product_key(a_layout, b_layout, m, n, k, residual, output)
    family = "tiled-add" if residual else PRODUCT_OUTPUTS[output][0]
    return image(family, name, a_layout=a_layout, b_layout=b_layout, m=m, n=n, k=k, residual=int(residual),
                 half=half, **vars(t), **(heads or {}))


def tile_of(img: Image) -> int:
    """The candidate tile a product's image was made with (its constants)."""
    c = img.constant_map
    return next(i for i, t in enumerate(TILE_CANDIDATES) if all(c[f.name] == getattr(t, f.name) for f in fields(Tile)))


# The streaming attention images: each block walks the key (or query) tiles
# in one part or two.
STREAMING_ATTENTION = ("attention-forward", "attention-query", "attention-key", "attention-backward")


def attention_parts(family: str, batch: int, seq: int, heads: int, kv_heads: int) -> int:
    """Two parts when the launch has fewer blocks than two waves of the
    device: then the causal diagonal's walk (SEQ / 64 tiles) sets its time,
    and halving it paid (1 x 1024: forward 16 -> 12.6 us, query 16.5 -> 14.6
    us, key 20.4 -> 17.0 us on the H200); with more blocks the parts' larger
    blocks lose (8 x 1024: one layer's attention 195 -> 226 us). The blocks
    are the family's grid's (a block per 64 rows of each query head, or of
    each K/V head)."""
    grid = FAMILIES[family].grid({"batch": batch, "seq": seq, "heads": heads, "kv_heads": kv_heads}, {})
    return 2 if prod(grid) < 2 * FILL_BLOCKS else 1


def attention_backward(batch: int, seq: int, heads: int, kv_heads: int) -> tuple[str, ...]:
    """The backward's launches: one whose blocks take a key tile's walk and
    then the same tile's query walks, where the key launch would have fewer
    blocks than two waves of the device; the query and the key launch
    elsewhere. With so few blocks each launch's blocks hold a multiprocessor's
    registers, so the two ran one after the other, the longest key walk then
    the longest query walk, where the one launch's blocks walk GROUP (TILES +
    1) tiles each (1 x 1024, the update: 2.344 -> 2.276 ms). With many waves
    the two launches' shorter blocks fill the device better (8 x 1024, the
    update: 9.825 -> 9.872 ms with the one launch). The key launch, the
    longer, is issued first: the device starts a launch's blocks before a
    later one's, so the query launch's blocks fill the multiprocessors its
    last, shortest walks leave (8 x 1024, the update, six rounds: 9.761 ->
    9.729 ms, faster in five)."""
    if attention_parts("attention-key", batch, seq, heads, kv_heads) > 1:
        return ("attention-backward",)
    return ("attention-key", "attention-query")


def attention(family: str, batch: int, seq: int, heads: int, kv_heads: int, half: str) -> Image:
    """A streaming attention image (forward, query, key or the one-launch
    backward) at the shape."""
    return image(family, batch=batch, seq=seq, heads=heads, kv_heads=kv_heads,
                 parts=attention_parts(family, batch, seq, heads, kv_heads), half=half)
