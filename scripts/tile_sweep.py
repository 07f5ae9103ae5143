"""Measure every product of the default model (1 and 8 sequences a step)
with every tile that serves it, beside torch.matmul (cuBLAS) on the same
operands, and record the fastest tile per shape in kernels/tiles.json, each
row with the device it was measured on, and the shared memory a block may
take on the device (its tiles fit it; a sweep of some shapes keeps the
other rows, on a device that gives a block as much).

    python3 scripts/tile_sweep.py OUT_DIR [--write kernels/tiles.json] [--keys KEY,...] [--tiles N,...]
        [--step KEY=N,N,... [--rounds R]]

A candidate whose image takes local memory on an architecture the images
serve (sm_86, sm_90; but see `spills_beside_copies`), or whose machine
code the certificate's schedule check refuses there, is timed but never
chosen. Each candidate is checked before it is timed: fresh random
operands (never zeros), C poisoned with NaN, the relative error against a
float64 product on the GPU must be under 1e-4 (1e-3 for a C in the half
format; a gated product's activation, against the activation of its own C,
too; a rotary product's heads, against its C rounded and turned by random
angles; a context gradient's heads, against its C rounded, and its row
terms, against those of its own heads and the random output it reads). A
time is one launch's share of a graph of REPEATS launches back to back
(the plan's own gaps); the anchors are torch.matmul with half output timed
the same way (a captured CUDA graph), and cuBLAS making what the product
makes: C in binary32 where the product's is (torch.mm with out_dtype),
with R added (torch.addmm, beta 1), checked against the float64 product as
the tiles are. A shape keeps the tile the table written before records for
it unless another is more than 5% faster. A shape whose tiles were also
timed inside the whole update (`step_ms` in the table written before: the
update's median, ms, with each tile) takes the tile of the fastest update,
or, among the tiles within 0.3% of it (a tie), the one the 5% rule picks
from their times alone: a tile fastest alone can be slower beside the
update's other launches (one of clusters waits for multiprocessors free
together), and where the update cannot tell tiles apart, their times alone
can. `--step` takes those medians: the update of the plan the shape
belongs to, with each tile given in turn, timed as `planner bench` times
the plan's step (CUDA events, the median of its timed updates), for ROUNDS
rounds, the mean of each tile's medians recorded. Needs a GPU, torch, the
planner and Z3 (the schedule check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import cache
from pathlib import Path
from unittest import mock

import torch

from planner.bench import (batches_argument, matmul_operands, plan_step_ms, require_finite, same_result,
                           torch_graph_us, torch_half)
from planner.kernels import manifest
from planner.certify.machine import unwaited
from planner.certify.sass import check_cubin
from planner.cli import InputError, output_directory, output_file
from planner.files import written_whole
from planner.kernels.manifest import (ARCHS, HEADS_CONSTANTS, PRODUCT_FAMILIES, PRODUCT_OUTPUTS, TILE_CANDIDATES,
                                      product_key, product_output, spills_beside_copies, tile_serves, tiled_image)
from planner.model.config import DEFAULT
from planner.runtime import driver
from planner.runtime.cubin_info import kernel_info
from planner.runtime.cuda import NoDevice, open_gpu
from planner.runtime.nvrtc import compile_image
from planner.runtime.tensor_maps import launch_parameters
from planner.schedule import build_plan
from planner.schedule.launches import Constants, gelu_words

REPEATS = 20
# A recorded tile stays unless another is this much faster alone: runs of the
# same sweep differ by a few per cent, and a tile's cost beside the update's
# other launches can differ from its cost alone (one of clusters waits for
# multiprocessors free together), which a near tie alone does not tell.
MARGIN = 1.05
# Inside the update: tiles whose updates differ by less than the rounds of
# one run do (about 0.3%: one tile's three rounds at 8 x 1024 on an H100,
# 9.4879 / 9.5187 / 9.4921 ms) are a tie, and their times alone decide
# (MARGIN), so that a tie neither takes a tile much slower alone
# (cc-m512-n512-k8192 with K in four shares, tried and not kept: 9.5020
# against tile 48's 9.5066 ms, 23.9 against 14.5 us alone) nor keeps one
# (the rotary product over a share at 8 x 1024 on an H100: tile 66 9.4862
# against tile 60's 9.4791 ms, six rounds, 19.63 against 14.21 us alone)
STEP_MARGIN = 1.003
# the GELU's words of the gated product, as the plan passes them
GELU = gelu_words(Constants.of(DEFAULT))
ANY_SHARED = max(t.shared(output) for t in TILE_CANDIDATES for output in PRODUCT_OUTPUTS)


def bound(output: str) -> float:
    """A binary32 C's relative error, or one rounded to the half format."""
    return 1e-4 if output == "binary32" else 1e-3


def config_of(batch: int):
    return replace(DEFAULT, shape=replace(DEFAULT.shape, batch=batch))


@cache
def _batch_shapes(batch: int) -> dict[str, tuple]:
    """`shapes` of one plan (built once, whoever asks)."""
    out = {}
    for img in build_plan(config_of(batch)).image.values():
        if img.family in PRODUCT_FAMILIES:
            c = img.constant_map
            output = product_output(img)
            heads = {key: c[key] for key in HEADS_CONSTANTS[output]} if output in HEADS_CONSTANTS else None
            shape = (c["a_layout"], c["b_layout"], c["m"], c["n"], c["k"], bool(c["residual"]), c["half"], output,
                     heads)
            out[product_key(*shape[:6], output)] = shape
    return out


def shapes(batches: tuple[int, ...]) -> dict[str, tuple]:
    """key -> (a layout, b layout, m, n, k, residual, half, output, heads) of
    every product the plans launch (heads: the constants of an output stored
    by head, HEADS_CONSTANTS, else None)."""
    return {key: shape for batch in batches for key, shape in _batch_shapes(batch).items()}


def candidates(shape: tuple, shared_limit: int, only: set[int] | None = None) -> list[int]:
    m, n, k = shape[2:5]
    return [i for i, t in enumerate(TILE_CANDIDATES)
            if tile_serves(t, m, n, k, shared_limit, shape[7]) and (only is None or i in only)]


def _image(shape: tuple, tile: int):
    return tiled_image(*shape[:7], tile, shape[7], shape[8])


def _compile(job: tuple) -> None:
    shape, tile, arch = job
    compile_image(_image(shape, tile), arch)


def precompile(all_shapes: list[tuple], arch: str, only: set[int] | None = None) -> None:
    """Every candidate's cubin into the cache, on every core, before CUDA is
    initialised in this process (the workers are forked), whatever shared
    memory the device turns out to offer."""
    jobs = [(shape, tile, arch) for shape in all_shapes for tile in candidates(shape, ANY_SHARED, only)]
    with ProcessPoolExecutor() as pool:
        list(pool.map(_compile, jobs))
    print(f"{len(jobs)} images compiled", flush=True)


def admitted(img, cubin: bytes, arch: str) -> bool:
    """The image uses no local memory (`spills_beside_copies` aside) and its
    machine code passes the certificate's check: the schedule, and the wait
    for the launch before (a refused image would refuse the plan)."""
    report = check_cubin(cubin, arch)
    return ((kernel_info(cubin).frame_bytes == 0 or spills_beside_copies(img, arch))
            and report.status == "pass" and not unwaited(report, arch))


def fits(shape: tuple, row: dict, tile: str) -> bool:
    """The tile computed the product within the error bound, and every
    architecture the images serve admits its image."""
    img = _image(shape, int(tile))
    return row["tiles"][tile]["error"] < bound(shape[7]) and all(admitted(img, compile_image(img, arch), arch)
                                                                 for arch in ARCHS)


def choose(shape: tuple, row: dict, recorded: int | None = None, in_step: dict[str, float] | None = None) -> int:
    """Among the tiles that fit: where some were timed inside the update
    (`in_step`), those whose update is within STEP_MARGIN of the fastest
    update's (a tie the update cannot tell apart); of these (or, with no
    update timed, of all), the fastest alone, or the recorded one, where it
    is among them, unless the fastest beats it alone by more than MARGIN."""
    fit = lambda tile: tile in row["tiles"] and fits(shape, row, tile)
    kept = str(recorded)
    tiles = [tile for tile in row["tiles"] if fit(tile)]
    stepped = [tile for tile in in_step if fit(tile)] if in_step else []
    if stepped:
        fastest_update = min(in_step[tile] for tile in stepped)
        tiles = [tile for tile in stepped if in_step[tile] <= STEP_MARGIN * fastest_update]
    if not tiles:
        raise SystemExit(f"no tile computes {shape} within {bound(shape[7])} with an admitted image")
    fastest = min(tiles, key=lambda tile: row["tiles"][tile]["us"])
    if kept in tiles and row["tiles"][kept]["us"] <= MARGIN * row["tiles"][fastest]["us"]:
        return recorded
    return int(fastest)


def _error(got, want) -> float:
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


class Heads:
    """The rotary product's outputs (poisoned) and tables (random angles),
    and what it should write: C as the half format rounds it, by head, the
    queries and keys turned (qk-rope's rule, kernels/tiled.cu)."""

    def __init__(self, m: int, heads: dict, dtype):
        seq, h, kv = heads["seq"], heads["heads"], heads["kv_heads"]
        self.shape, self.rotated = (m // seq, h + 2 * kv, seq, 64), h + kv
        self.out = {name: torch.full((m * count * 64,), float("nan"), device="cuda", dtype=dtype)
                    for name, count in (("queries", h), ("keys", kv), ("values", kv))}
        angles = torch.rand(32, seq, device="cuda", dtype=torch.float64) * 2 * torch.pi
        self.cosine, self.sine = torch.cos(angles).float(), torch.sin(angles).float()

    def pointers(self) -> dict[str, int]:
        return {name: t.data_ptr() for name, t in self.out.items()} | {"cosine": self.cosine.data_ptr(),
                                                                       "sine": self.sine.data_ptr()}

    def error(self, expected, dtype) -> float:
        b, count, seq, _ = self.shape
        want = expected.to(dtype).double().view(b, seq, count, 64).transpose(1, 2).clone()
        cos, sin = self.cosine.double().t(), self.sine.double().t()  # [seq][32]
        x0, x1 = want[:, : self.rotated, :, :32].clone(), want[:, : self.rotated, :, 32:].clone()
        want[:, : self.rotated, :, :32], want[:, : self.rotated, :, 32:] = x0 * cos - x1 * sin, x1 * cos + x0 * sin
        got = torch.cat([t.view(b, -1, seq, 64) for t in self.out.values()], dim=1)
        return _error(got, want)


class ContextHeads:
    """The context gradient's product's outputs (poisoned) and the forward's
    output it reads (random), and what it should write: C as the half format
    rounds it, by head, and each row's term from its own heads' halves
    times the output (kernels/tiled.cu, BY_HEAD)."""

    def __init__(self, m: int, heads: dict, dtype):
        seq, h = heads["seq"], heads["heads"]
        self.shape = (m // seq, h, seq, 64)
        self.heads = torch.full((m * h * 64,), float("nan"), device="cuda", dtype=dtype)
        self.row_terms = torch.full((m * h,), float("nan"), device="cuda", dtype=torch.float32)
        self.out = torch.randn(m, h * 64, device="cuda").to(dtype)

    def pointers(self) -> dict[str, int]:
        return {"heads": self.heads.data_ptr(), "row_terms": self.row_terms.data_ptr(), "out": self.out.data_ptr()}

    def error(self, expected, dtype) -> float:
        b, h, seq, _ = self.shape
        by_head = lambda tokens: tokens.view(b, seq, h, 64).transpose(1, 2)
        got = self.heads.double().view(b, h, seq, 64)
        terms = (got * by_head(self.out.double())).sum(dim=-1)
        return max(_error(got, by_head(expected.to(dtype).double())), _error(self.row_terms.view(b, h, seq), terms))


# the outputs stored by head: what each writes, and how it is checked
BY_HEAD = {"rope": Heads, "heads": ContextHeads}


def sweep_one(device, a_layout, b_layout, m, n, k, residual, half, output, heads,
              only: set[int] | None = None) -> dict:
    """Every tile that serves the product within the device's shared memory
    (of `only`, where given), timed."""
    dtype = torch_half(half)
    left, right = matmul_operands(a_layout, b_layout, m, n, k, dtype)  # views of A and B as stored
    r = torch.randn((m, n), device="cuda") if residual else None
    expected = left.double() @ right.double() + (r.double() if residual else 0)
    row = {"torch_us": torch_graph_us(lambda: torch.matmul(left, right), REPEATS), "tiles": {}}
    same = same_result(left, right, r, output)
    error = _error(same(), expected)
    if not error < bound(output):
        raise SystemExit(f"cuBLAS's {a_layout}{b_layout} {m}x{n}x{k}: relative error {error:.2e}")
    row["same_us"] = torch_graph_us(same, REPEATS)
    shape = (a_layout, b_layout, m, n, k, residual, half, output, heads)
    for tile in candidates(shape, device.shared_limit, only):
        img = _image(shape, tile)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if output == "binary32" else dtype)
        activation = torch.full((m, n // 2), float("nan"), device="cuda", dtype=dtype)
        by_head = BY_HEAD[output](m, heads, dtype) if output in BY_HEAD else None
        pointers = ({"a": left.data_ptr(), "b": right.data_ptr()} | ({"r": r.data_ptr()} if residual else {})
                    | ({"gated": activation.data_ptr()} if output == "gated" else {})
                    | (by_head.pointers() if by_head else {"c": c.data_ptr()}))
        cubin = compile_image(img, device.arch)
        block = launch_parameters(img, img.parameter_block(pointers, GELU), cubin)
        kernel = driver.load_kernel(cubin, img.shared_bytes)
        try:
            grid = img.grid({})
            driver.launch(kernel, grid, img.block, img.shared_bytes, block)
            driver.synchronize()
            error = by_head.error(expected, dtype) if by_head else _error(c, expected)
            if output == "gated":  # the activation of the product's own rounded up and gate
                up, gate = c[:, : n // 2].double(), c[:, n // 2:].double()
                want = torch.nn.functional.gelu(gate, approximate="tanh") * up
                error = max(error, _error(activation, want))
            us = driver.seconds_per_launch(kernel, grid, img.block, img.shared_bytes, block, REPEATS) * 1e6
        finally:
            driver.unload_kernel(kernel)
        row["tiles"][str(tile)] = {"us": us, "error": error}   # keyed as JSON keys them
        if not error < bound(output):   # never chosen; the sweep goes on so that the table shows every wrong tile
            print(f"tile {tile} on {a_layout}{b_layout} {m}x{n}x{k}: relative error {error:.2e}", flush=True)
    return row


def plan_with(key: str, tile: int, batch: int):
    """The plan of `batch` sequences a step with `tile` for the product `key`
    (the table's tiles for the others)."""
    chosen = manifest.recorded_tiles() | {key: tile}
    with mock.patch.object(manifest, "recorded_tiles", lambda: chosen):
        return build_plan(config_of(batch))


def step_medians(gpu, key: str, batch: int, tiles: list[int], rounds: int) -> dict[str, float]:
    """The update's median ms (CUDA events, as `planner bench` times the
    plan's step) with each tile for the product `key`, in turn for `rounds`
    rounds: tile -> the mean of its medians. The plans are timed as
    measurements of candidates, not certified runs, and only where every
    update's loss is finite (require_finite)."""
    medians: dict[int, list[float]] = {tile: [] for tile in tiles}
    for _ in range(rounds):
        for tile in tiles:
            timing = plan_step_ms(plan_with(key, tile, batch), gpu, alone=False)
            require_finite(timing.losses)
            medians[tile].append(timing.events_ms)
            print(f"{key} tile {tile}: update {medians[tile][-1]:.4f} ms", flush=True)
    return {str(tile): round(statistics.mean(times), 4) for tile, times in medians.items()}


def batch_of(key: str, batches: tuple[int, ...]) -> int:
    """The batch whose plan launches the product `key`."""
    found = next((batch for batch in batches if key in _batch_shapes(batch)), None)
    if found is None:
        raise SystemExit(f"no product of the plans is {key}")
    return found


def tile_numbers(text: str, option: str) -> list[int]:
    """Candidate tiles named on the command line: numbers of TILE_CANDIDATES."""
    try:
        numbers = [int(t) for t in text.split(",")]
    except ValueError:
        raise InputError(f"{option} takes tile numbers joined by commas, not {text!r}") from None
    unknown = [t for t in numbers if not 0 <= t < len(TILE_CANDIDATES)]
    if unknown:
        raise InputError(f"{option}: no tile {unknown[0]} (the candidates are 0..{len(TILE_CANDIDATES) - 1})")
    return numbers


def step_tiles(items: list[str], products: dict[str, tuple]) -> dict[str, list[int]]:
    """--step's KEY=N,N,... for shapes the run sweeps (an unswept shape's
    update medians would go unrecorded)."""
    steps = {}
    for item in items:
        key, _, tiles = item.partition("=")
        if key not in products:
            raise InputError(f"--step {key}: not among the shapes swept")
        steps[key] = tile_numbers(tiles, f"--step {key}")
    return steps


def read_json(path: Path, option: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InputError(f"{option} {path}: {error}") from None


def measure(args, products: dict[str, tuple], only: set[int] | None,
            steps: dict[str, list[int]]) -> tuple[dict, str, int, dict]:
    """Each product's tiles timed alone (or an earlier run's times,
    --measured) and the updates --step asks for: (results, device name,
    shared limit, step medians)."""
    if args.measured:
        measured = read_json(args.measured, "--measured")
        try:
            results, device_name, shared_limit = measured["shapes"], measured["device"], measured["shared_limit"]
        except (KeyError, TypeError):
            raise InputError(f"--measured {args.measured}: not a tile sweep's tile-sweep.json") from None
        unmeasured = [key for key in products if key not in results]
        if unmeasured:
            raise InputError(f"--measured {args.measured}: no times for {unmeasured[0]}")
        if not steps:
            return results, device_name, shared_limit, {}
    else:
        precompile(list(products.values()), "sm_90", only)   # before CUDA: the workers are forked
    device = open_gpu()
    try:
        if device.arch not in ARCHS:
            raise InputError(f"the device is {device.arch}, not one of {ARCHS}")
        if not args.measured:
            torch.cuda.init()
            results = {key: sweep_one(device, *shape, only) for key, shape in products.items()}
            device_name, shared_limit = device.name, device.shared_limit
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "tile-sweep.json").write_text(json.dumps(
                {"device": device_name, "shared_limit": shared_limit, "shapes": results}, indent=1))
        stepped = {key: step_medians(device, key, batch_of(key, args.batches), tiles, args.rounds)
                   for key, tiles in steps.items()}
    finally:
        driver.close_device(device)
    return results, device_name, shared_limit, stepped


def sweep(args) -> int:
    """The sweep main() runs: its arguments checked before anything is
    compiled or the GPU asked for, then measured, then the table chosen."""
    if args.tiles and args.write:
        raise InputError("--tiles times some candidates only: it cannot choose the table's tiles (--write)")
    if args.rounds < 1:
        raise InputError(f"--rounds {args.rounds}: at least one round")
    only = set(tile_numbers(args.tiles, "--tiles")) if args.tiles else None
    output_directory(args.out, "the output directory")
    products = shapes(args.batches)
    if args.keys:
        unknown = set(args.keys.split(",")) - set(products)
        if unknown:
            raise InputError(f"no product of the plans is {sorted(unknown)[0]}")
        products = {key: products[key] for key in args.keys.split(",")}
    steps = step_tiles(args.step, products)
    table_before = {}
    if args.write:
        output_file(str(args.write), "--write")
        table_before = read_json(args.write, "--write") if args.write.exists() else {}
    results, device_name, shared_limit, stepped = measure(args, products, only, steps)
    if only is not None:  # a look at some tiles: their times, no choice
        for key, row in results.items():
            for tile, timed in sorted(row["tiles"].items(), key=lambda item: item[1]["us"]):
                print(f"{key:28s} tile {int(tile):2d} {timed['us']:7.2f} us  matmul {row['torch_us']:7.2f} us  "
                      f"ratio {row['torch_us'] / timed['us']:5.2f}  error {timed['error']:.1e}", flush=True)
        for key, medians in stepped.items():
            print(f"{key:28s} the update, ms by tile: {medians}")
        return 0
    before = table_before.get("choices", {})
    if args.keys and before and table_before.get("shared_limit") != shared_limit:
        raise InputError(f"the table's tiles fit a block's {table_before.get('shared_limit')} bytes of shared "
                         f"memory, this device's {shared_limit}: sweep every shape")
    choices = dict(before) if args.keys else {}   # a sweep of some shapes keeps the others' rows
    for key in products:
        row = results[key]
        in_step = stepped.get(key) or before.get(key, {}).get("step_ms")
        tile = choose(products[key], row, before.get(key, {}).get("tile"), in_step)
        best = row["tiles"][str(tile)]["us"]
        choices[key] = {"tile": tile, "us": round(best, 2), "cublas_us": round(row["torch_us"], 2),
                        "cublas_same_us": round(row["same_us"], 2), "device": device_name}
        if in_step:
            choices[key]["step_ms"] = in_step
        print(f"{key:28s} tile {tile:2d} {best:7.1f} us  matmul {row['torch_us']:7.1f} us  "
              f"ratio {row['torch_us'] / best:5.2f}  same C {row['same_us']:7.1f} us  "
              f"ratio {row['same_us'] / best:5.2f}  ({len(row['tiles'])} tiles)", flush=True)
    if args.write:
        table = {"shared_limit": shared_limit, "method": " ".join(__doc__.split("\n\n")[2].split()),
                 "choices": dict(sorted(choices.items()))}
        with written_whole(args.write, "w") as f:  # the planner reads it: never half a table
            f.write(json.dumps(table, indent=1) + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--batches", type=batches_argument, default=(1, 8), help="sequences per step (default 1,8)")
    p.add_argument("--write", type=Path, help="the tiles table to write")
    p.add_argument("--measured", type=Path, help="choose from an earlier run's tile-sweep.json (no GPU)")
    p.add_argument("--keys", help="sweep these shapes only (comma-separated keys); the table keeps the others")
    p.add_argument("--tiles", help="time these candidates only (comma-separated numbers)")
    p.add_argument("--step", action="append", default=[], metavar="KEY=N,N,...",
                   help="also time the update with each of these tiles for KEY (recorded as step_ms)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of --step's updates, taken in turn")
    args = p.parse_args()
    try:
        return sweep(args)
    except (InputError, NoDevice) as error:  # bad input, or no GPU (or one too small): one line
        print(f"tile_sweep: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
