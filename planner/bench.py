"""`planner bench`: the certified plan's step time beside PyTorch's, in one
process on one GPU.

The plan's step is timed two ways: by CUDA events on its stream, from before
the host's per-step writes to the update's end (how the anchors are timed:
events around the step), and by the host's clock from the call to the loss
in hand (the wait and the read included).

Both sides train the same model from the same parameters on the same random
(never zero) batches. The plan's step is an update submission replayed as a
CUDA graph, with the host's waits and reads the certified run makes; the
anchor is the PyTorch reference under bf16 autocast with SDPA attention and
fused AdamW, eager, compiled, and compiled with the whole step captured as
one CUDA graph (the strongest). Warm-up is excluded; the median of the timed
steps is reported, with CUDA events around each.

Beside the step, each launch of the update is timed alone; the times are
summed by image beside their floors (the bytes a launch must move over the
copy bandwidth, or its matrix products' operations over the matrix rate, both
measured on the device in the same run: `measure_ceilings`), and taken along the
longest chain of the update's dependencies (`longest_chain_us`): where the
step sits between that chain and the launches' sum says whether the chain or
the device's throughput holds it. The same run times each matrix product of
the update alone (its launches as the plan makes them) against torch.matmul
(cuBLAS) on random operands of the same shape, layouts and half format, with
a half C and nothing after it: the stricter anchor for a product that also
adds a residual or applies an activation on the way out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from planner.files import written_whole
from planner.model.config import Config
from planner.schedule.urgency import Ceilings, floor_us, slack

WARMUP, TIMED = 10, 50
# the share of torch.matmul's speed each product is held to (the performance issue's bar)
PRODUCT_BAR = 0.7


# the PyTorch setups the bench can time beside the plan (torch_step_ms)
ANCHORS = ("eager", "compile", "compile+graph")


def batches_argument(text: str) -> tuple[int, ...]:
    """`--batches`: sequences per step, comma-separated positive integers."""
    try:
        batches = tuple(int(b) for b in text.split(","))
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive integers (e.g. 1,8)")
    return batches


def _anchors(text: str) -> tuple[str, ...]:
    """`--anchors`: PyTorch setups, comma-separated, each one of ANCHORS."""
    setups = tuple(text.split(","))
    unknown = [s for s in setups if s not in ANCHORS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{unknown[0]!r} is not a setup the bench times ({', '.join(ANCHORS)})")
    return setups


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--batches", type=batches_argument, default=(1, 8),
                   help="sequences per step to measure (default 1,8)")
    p.add_argument("--anchors", type=_anchors, default=ANCHORS,
                   help=f"PyTorch setups to measure beside the plan (default {','.join(ANCHORS)})")
    p.add_argument("--json", metavar="FILE", help="write the measurements as JSON")


def _batch(config: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = config.shape
    ids = rng.integers(0, s.vocab, size=(s.batch, s.seq + 1), dtype=np.int64)
    return ids[:, :-1].astype(np.int32), ids[:, 1:].astype(np.int32)


@dataclass(frozen=True)
class StepTiming:
    """A plan's update, timed (plan_step_ms)."""
    host_ms: float            # median, from the call to the loss in hand
    events_ms: float          # median, by CUDA events as the anchors are timed
    losses: list[float]
    parameters: np.ndarray    # the banks the timed updates started from (the anchors start there too)
    update: int               # the update submission
    alone: dict[int, float]   # each of its launches' us alone (launch_times; empty where not asked)


class NotFinite(ValueError):
    """A plan's update gave a loss that is not a finite number."""


def require_finite(losses: list[float]) -> None:
    """Refuse a timing whose updates' losses are not all finite: on NaNs the
    update runs faster than on finite numbers (at 8 x 1024 on an H100, 8.68
    against 9.22 ms with the same launches), so such a timing measures the
    NaNs, not the plan."""
    bad = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    if bad is not None:
        raise NotFinite(f"the plan's loss of update {bad + 1} (of the {len(losses)} run) is {losses[bad]}, not a "
                        "finite number: an update on NaNs runs faster, so it is not timed")


def plan_step_ms(plan, gpu, certificate=None, alone: bool = True) -> StepTiming:
    """Median ms per update of a plan, as the host sees it (from the call
    to the loss in hand) and as the anchor is timed (CUDA events on the
    stream, from before the host's per-step writes to the update's end);
    also the losses, the parameters it started from (for the anchor), and,
    with `alone`, the update submission's launches timed alone
    (launch_times). The device demands `certificate` where given (the
    bench's plans); the tile sweep times candidate plans without one."""
    from planner.model.config import from_dict
    from planner.runtime.cuda import CudaDevice
    from planner.runtime.driver import call
    from planner.runtime.session import Session

    config = from_dict(plan.config)
    device = CudaDevice(plan, gpu, graphs=True, certificate=certificate)
    try:
        session = Session(plan, device)
        rng = np.random.default_rng(0)
        session.start(_batch(config, rng)[0])
        parameters = np.frombuffer(device.read_arena(plan.plane["parameters"].offset,
                                                     plan.plane["parameters"].bytes), "<f4").copy()
        start, stop = call("cuEventCreate", 0), call("cuEventCreate", 0)
        times, gpu_times, losses = [], [], []
        for i in range(WARMUP + TIMED):
            ids, targets = _batch(config, rng)
            began = time.perf_counter()
            call("cuEventRecord", start, device.stream)
            losses.append(session.update(ids, targets, issued=lambda: call("cuEventRecord", stop, device.stream)))
            if i >= WARMUP:
                times.append((time.perf_counter() - began) * 1e3)
                gpu_times.append(call("cuEventElapsedTime", start, stop))
        call("cuEventDestroy", start)
        call("cuEventDestroy", stop)
        update = session.groups["update"][0]
        each = launch_times(plan, device, update) if alone else {}
    finally:
        device.close()
    return StepTiming(statistics.median(times), statistics.median(gpu_times), losses, parameters, update, each)


def launches_against_floors(plan, timing: StepTiming, ceilings: Ceilings) -> dict:
    """The update's launches alone beside their floors on a device of these
    ceilings: summed by image (by_image) and along the longest chain."""
    floors = {index: floor_us(plan, index, ceilings) for index in timing.alone}
    return {"kernels": {name: {"launches": n, "us": us, "floor_us": floor}
                        for name, (n, us, floor) in by_image(plan, timing.alone, floors).items()},
            "chain_ms": longest_chain_us(plan, timing.update, timing.alone) / 1e3,
            "floor_chain_ms": longest_chain_us(plan, timing.update, floors) / 1e3}


def measure_ceilings(half: str) -> Ceilings:
    """The ceilings of the device the bench runs on, measured on random
    (never zero) data, the faster of two timings of a graph each: ten copies
    of 256 MiB of binary32 words (far past any L2; bytes read and written
    counted), and three of torch.matmul of two 8192 x 8192 operands in the
    half format (cuBLAS; a millisecond or more each)."""
    import torch

    words = 1 << 26
    source = torch.randn(words, device="cuda")
    target = torch.empty_like(source)
    copy_us = min(torch_graph_us(lambda: target.copy_(source), 10) for _ in range(2))
    size = 8192
    left, right = (torch.randn(size, size, device="cuda").to(torch_half(half)) for _ in range(2))
    product_us = min(torch_graph_us(lambda: torch.matmul(left, right), 3) for _ in range(2))
    del source, target, left, right
    torch.cuda.empty_cache()  # the plan's arena is allocated beside PyTorch's cache
    return Ceilings(bandwidth=2 * words * 4 / (copy_us * 1e-6), matrix_rate=2 * size ** 3 / (product_us * 1e-6))


def torch_step_ms(config: Config, parameters: np.ndarray, setup: str) -> float:
    """Median ms per step of the PyTorch reference in one setup."""
    import torch

    from planner.reference.model import Coppelius, optimizer, parameters_from_bank

    torch.manual_seed(0)
    model = Coppelius(config, parameters_from_bank(config, torch.from_numpy(parameters), device="cuda"))
    opt = optimizer(config, model, fused=True, capturable="graph" in setup)
    forward = torch.compile(model) if "compile" in setup else model
    s = config.shape
    ids = torch.randint(0, s.vocab, (s.batch, s.seq), device="cuda")
    targets = torch.randint(0, s.vocab, (s.batch, s.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            step()
    torch.cuda.current_stream().wait_stream(side)
    run = step
    if "graph" in setup:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run = graph.replay
    times = []
    for _ in range(TIMED):
        ids.random_(0, s.vocab)
        targets.random_(0, s.vocab)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def launch_times(plan, device, submission: int, repeat: int = 20) -> dict[int, float]:
    """Each launch of one submission timed alone, as a CUDA graph of
    `repeat` copies of it back to back (the gaps a graph has, not
    Python's): launch index -> microseconds."""
    from planner.runtime import driver

    out = {}
    for index in plan.submissions[submission].launches():
        launch = plan.launches[index]
        img = plan.image[launch.image]
        out[index] = driver.seconds_per_launch(device.kernels[img.name], launch.grid, launch.block,
                                               img.shared_bytes, bytes(device.blocks[index]), repeat) * 1e6
    return out


def by_image(plan, times: dict[int, float], floors: dict[int, float]) -> dict[str, tuple[int, float, float]]:
    """Launch times and floors summed by image: image -> (launches, total
    microseconds, total floor microseconds)."""
    out: dict[str, tuple[int, float, float]] = {}
    for index, us in times.items():
        name = plan.launches[index].image
        count, total, floor = out.get(name, (0, 0.0, 0.0))
        out[name] = (count + 1, total + us, floor + floors[index])
    return out


def longest_chain_us(plan, submission: int, times: dict[int, float]) -> float:
    """The longest path of `times` through the submission's dependencies:
    what the update would take if every launch ran as fast as alone and
    started the moment those it waits for ended. Beside the step it says
    what holds the step back: a step near its chain waits on the chain; a
    step near the launches' sum, far above the chain, is held by the
    device's throughput (launches side by side share the multiprocessors,
    so only faster launches shorten it)."""
    return slack(plan.submissions[submission].waits(), times)[0]


def torch_graph_us(work, repeats: int) -> float:
    """One call's share, in microseconds, of a CUDA graph of `repeats` calls
    of `work` (PyTorch work), captured after a warm-up on a side stream and
    replayed once before it is timed."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            work()
    graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3 / repeats


def torch_half(half: str):
    """torch's type of a half format (the configuration's `half`)."""
    import torch

    return {"binary16": torch.float16, "bfloat16": torch.bfloat16}[half]


def matmul_operands(a_layout: str, b_layout: str, m: int, n: int, k: int, dtype):
    """Random (never zero) half operands laid out as a product's ("r": K
    contiguous, "c": K strided), as torch.matmul takes them: m x k, k x n."""
    import torch

    a = torch.randn((k, m) if a_layout == "c" else (m, k), device="cuda").to(dtype)
    b = torch.randn((k, n) if b_layout == "c" else (n, k), device="cuda").to(dtype)
    return (a.t() if a_layout == "c" else a), (b if b_layout == "c" else b.t())


def same_result(left, right, r, output: str):
    """cuBLAS making what the product makes: a half C (the gated product's
    too), or a binary32 C (with R added where the product adds it)."""
    import torch

    if output != "binary32":
        return lambda: torch.matmul(left, right)
    if r is not None:
        return lambda: torch.addmm(r, left, right, out_dtype=torch.float32)
    return lambda: torch.mm(left, right, out_dtype=torch.float32)


def products_vs_matmul(plan, kernels: dict[str, dict], repeats: int = 20) -> dict[str, dict]:
    """Each product image of the update (a launch's mean time alone, from
    launches_against_floors' kernels) beside torch.matmul with a half C on
    random operands of its shape, layouts and half format (the faster of two
    graphs), and beside cuBLAS making the same C (same_result: a binary32 C
    where the product's is, R added where it adds one), each timed as a
    graph of `repeats` calls: image -> {tile, us, torch_us, ratio, same_us,
    same_ratio, floor_us, reach} (ratios: cuBLAS's time over ours, 1 as
    fast). `reach` is the ratio a launch at its floor (launches_against_floors'
    floor_us, over the ceilings measured on the device) would have against
    torch.matmul: under PRODUCT_BAR, no tile brings that product to the bar on
    this device, since its own bytes (a residual's R and binary32 C, a gated
    product's activation) take longer at the measured copy rate than the
    anchor takes with a half C."""
    import torch

    from planner.kernels.manifest import PRODUCT_FAMILIES, product_output, tile_of

    out = {}
    for name, k in sorted(kernels.items()):
        img = plan.image[name]
        if img.family not in PRODUCT_FAMILIES:
            continue
        c = img.constant_map
        left, right = matmul_operands(c["a_layout"], c["b_layout"], c["m"], c["n"], c["k"], torch_half(c["half"]))
        r = torch.randn((c["m"], c["n"]), device="cuda") if c["residual"] else None
        # the anchor's faster of two timings: one replay of a graph of short
        # launches moved by a fifth from one timing to the next, and a slow
        # one must not count for us
        torch_us = min(torch_graph_us(lambda: torch.matmul(left, right), repeats) for _ in range(2))
        # a half C is torch.matmul's own (same_result), not timed again
        output = product_output(img)
        same_us = torch_graph_us(same_result(left, right, r, output), repeats) if output == "binary32" else torch_us
        out[name] = product_row(tile_of(img), k, torch_us, same_us)
    return out


def product_row(tile: int, kernel: dict, torch_us: float, same_us: float) -> dict:
    """One product's row of products_vs_matmul from its image's entry of
    launches_against_floors' kernels (totals over its launches) and the
    anchors' times: a launch's mean time and floor, and the ratios."""
    us, floor = kernel["us"] / kernel["launches"], kernel["floor_us"] / kernel["launches"]
    return {"tile": tile, "us": us, "torch_us": torch_us, "ratio": torch_us / us, "same_us": same_us,
            "same_ratio": same_us / us, "floor_us": floor, "reach": torch_us / floor}


def attention_vs_sdpa(config: Config, gpu, repeats: int = 20) -> dict[str, float]:
    """One layer's streaming attention (the forward and the backward
    launches the plan takes at the shape) beside PyTorch's SDPA forward +
    backward (causal) on the same random operands, each timed as a graph of
    `repeats` rounds; with the two outputs' relative difference, to show it
    is the same computation."""
    import math

    import torch
    import torch.nn.functional as F

    from planner.kernels.manifest import attention, attention_backward
    from planner.runtime import driver
    from planner.runtime.nvrtc import compile_image

    s, half = config.shape, config.learner.half
    dtype = torch_half(half)
    b, h, kv, t = s.batch, s.heads, s.kv_heads, s.seq
    q, k, v, d_out = (torch.randn(b, n, t, 64, device="cuda").to(dtype) for n in (h, kv, kv, h))
    planes = {"q": q, "k": k, "v": v, "d_out": d_out,
              "out": torch.empty(b, t, h * 64, device="cuda", dtype=dtype),
              "log_sum_exp": torch.empty(b, h, t, device="cuda"), "row_terms": torch.empty(b, h, t, device="cuda"),
              "d_q": torch.empty(b, h, t, 64, device="cuda"), "d_k": torch.empty(b, kv, t, 64, device="cuda"),
              "d_v": torch.empty(b, kv, t, 64, device="cuda")}
    # the rotary tables the backward turns its query and key gradients back with ([32][t])
    angles = torch.rand(32, t, device="cuda") * (2 * math.pi)
    planes |= {"cosine": torch.cos(angles), "sine": torch.sin(angles)}
    addresses = {name: x.data_ptr() for name, x in planes.items()}
    scalars = {"stream_scale": math.log2(math.e) / math.sqrt(64), "score_scale": 1 / math.sqrt(64)}
    launches, kernels = [], []
    try:
        for family in ("attention-forward", *attention_backward(b, t, h, kv)):
            img = attention(family, b, t, h, kv, half)
            kernel = driver.load_kernel(compile_image(img, gpu.arch), img.shared_bytes)
            kernels.append(kernel)
            parameters = img.parameter_block(addresses, img.words(scalars))
            launches.append((kernel, img.grid({}), img.block, img.shared_bytes, parameters))
        for launch in launches:
            driver.launch(*launch)
        driver.synchronize()
        ours_us = driver.seconds_per_round(launches, repeats) * 1e6
    finally:
        for kernel in kernels:
            driver.unload_kernel(kernel)

    # SDPA's flash kernels, forward and backward, called as SDPA calls them
    # for these operands (causal, no mask, half precision); K and V repeated
    # for grouped heads as SDPA's enable_gqa does
    k_full, v_full = (x.repeat_interleave(h // kv, dim=1) for x in (k, v))
    flash = torch.ops.aten._scaled_dot_product_flash_attention
    flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_backward

    def sdpa():
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = flash(q, k_full, v_full, 0.0, True, False,
                                                                     scale=1 / math.sqrt(64))
        flash_backward(d_out, q, k_full, v_full, out, lse, cum_q, cum_k, max_q, max_k, 0.0, True, seed, offset,
                       scale=1 / math.sqrt(64))
        return out

    reference = F.scaled_dot_product_attention(q, k_full, v_full, is_causal=True).float()
    ours = planes["out"].view(b, t, h, 64).transpose(1, 2).float()
    difference = float(torch.linalg.norm(ours - reference) / torch.linalg.norm(reference))
    sdpa_us = torch_graph_us(sdpa, repeats)
    return {"attention_us": ours_us, "sdpa_us": sdpa_us, "output_difference": difference}


def by_kind(plan, kernels: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """launches_against_floors' kernels summed by their images' kind (the
    matrix products, the streaming attention walks, which multiply and move
    their tiles, and the launches that only move memory): kind -> (total
    microseconds, total floor microseconds)."""
    from planner.kernels.manifest import PRODUCT_FAMILIES, STREAMING_ATTENTION

    out: dict[str, tuple[float, float]] = {}
    for name, k in kernels.items():
        family = plan.image[name].family
        kind = "products" if family in PRODUCT_FAMILIES else "attention" if family in STREAMING_ATTENTION else "memory"
        us, floor = out.get(kind, (0.0, 0.0))
        out[kind] = (us + k["us"], floor + k["floor_us"])
    return out


def _print_kernels(plan, row: dict, top: int = 12) -> None:
    kernels = row["kernels"]
    total, floor = sum(k["us"] for k in kernels.values()), sum(k["floor_us"] for k in kernels.values())
    print(f"{row['tokens']} tokens/step: {sum(k['launches'] for k in kernels.values())} launches, kernels "
          f"{total / 1e3:.2f} ms against floors of {floor / 1e3:.2f} ms, their longest chain "
          f"{row['chain_ms']:.2f} ms against {row['floor_chain_ms']:.2f}; step {row['plan_ms']:.2f} ms", flush=True)
    print("  " + "; ".join(f"{name} {us / 1e3:.2f} ms against {floor / 1e3:.2f}"
                           for name, (us, floor) in sorted(by_kind(plan, kernels).items())), flush=True)
    # the images furthest over their floors first: where the update's time over its floors goes
    for name, k in sorted(kernels.items(), key=lambda kv: kv[1]["floor_us"] - kv[1]["us"])[:top]:
        print(f"  {name:36s} {k['launches']:4d} x {k['us'] / k['launches']:8.1f} us  floor "
              f"{k['floor_us'] / k['launches']:7.1f}  ({k['us'] / max(k['floor_us'], 1e-9):4.1f}x, "
              f"{(k['us'] - k['floor_us']) / 1e3:5.2f} ms over)", flush=True)


def _print_step(row: dict, setups: tuple[str, ...]) -> None:
    # a row's step beside its anchors, and its attention beside SDPA's, as
    # soon as they are timed (the table at the end gives them again)
    anchors = "; ".join(f"{s} {row[f'torch_{s}_ms']:.3f} ms ({row['plan_events_ms'] / row[f'torch_{s}_ms']:.3f}x)"
                        for s in setups)
    print(f"{row['tokens']} tokens/step: step {row['plan_events_ms']:.3f} ms by events ({row['plan_ms']:.3f} by the "
          f"host's clock) against {anchors}; a layer's attention {row['attention_us']:.1f} us against SDPA's "
          f"{row['sdpa_us']:.1f} ({row['sdpa_us'] / row['attention_us']:.2f}x)", flush=True)


def _print_products(row: dict) -> None:
    products = row["products"]
    print(f"{row['tokens']} tokens/step: products alone beside torch.matmul (half C, no epilogue) and cuBLAS "
          "making the same C (binary32 where ours is, R added where ours adds it); its floor over the ceilings (and "
          "the ratio to torch.matmul there)", flush=True)
    for name, p in sorted(products.items(), key=lambda kv: kv[1]["ratio"]):
        print(f"  {name:36s} tile {p['tile']:2d} {p['us']:8.1f} us  torch {p['torch_us']:8.1f} us  "
              f"{p['ratio']:5.2f}x  same C {p['same_us']:8.1f} us  {p['same_ratio']:5.2f}x  floor "
              f"{p['floor_us']:7.1f} us ({p['reach']:4.2f}x)", flush=True)
    met = sum(p["ratio"] >= PRODUCT_BAR for p in products.values())
    same = sum(p["same_ratio"] >= 1 for p in products.values())
    beyond = sorted(name for name, p in products.items() if p["reach"] < PRODUCT_BAR)
    print(f"  {met} of {len(products)} at {PRODUCT_BAR}x of torch.matmul or more; {same} as fast as cuBLAS making "
          "the same C or faster", flush=True)
    if beyond:
        print(f"  at its floor over these ceilings, still under {PRODUCT_BAR}x: {', '.join(beyond)}", flush=True)


def run(args: argparse.Namespace) -> int:
    from planner.certify import Uncertified, demand_certificate
    from planner.cli import output_file, read_config, require_torch
    from planner.model.config import validate
    from planner.runtime.cuda import NoDevice, open_gpu
    from planner.schedule import build_plan

    # every input checked before the GPU is asked for and minutes are spent
    base = read_config(args.config)
    configs = [validate(replace(base, shape=replace(base.shape, batch=batch))) for batch in args.batches]
    if args.json:
        output_file(args.json, "--json")
    require_torch()  # the anchors'
    try:
        gpu = open_gpu()
    except NoDevice as error:
        print(f"planner bench: {error}", file=sys.stderr)
        return 2
    rows, ceilings = [], None
    for config in configs:
        batch = config.shape.batch
        plan = build_plan(config)
        try:
            certificate = demand_certificate(plan)
            timing = plan_step_ms(plan, gpu, certificate)
            require_finite(timing.losses)
        except NoDevice as error:
            print(f"planner bench: {error}", file=sys.stderr)
            return 2
        except (Uncertified, NotFinite) as error:
            print(f"planner bench: refused: {error}", file=sys.stderr)
            return 1
        if ceilings is None:  # once the device has taken a plan (a card it refuses is named before)
            ceilings = measure_ceilings(config.learner.half)
            print(f"this device's ceilings, measured here: copies {ceilings.bandwidth / 1e12:.2f} TB/s (bytes read "
                  f"and written), products {ceilings.matrix_rate / 1e12:.0f} TFLOP/s ({config.learner.half}, "
                  "torch.matmul of 8192 x 8192); the floors below are over them", flush=True)
        row = {"batch": batch, "tokens": config.shape.tokens, "plan_ms": timing.host_ms,
               "plan_events_ms": timing.events_ms, "plan_losses": timing.losses[:3],
               "ceilings": asdict(ceilings)}
        # each part printed as soon as it is timed: a run cut short (a time
        # limit) keeps in its log what it measured
        row |= launches_against_floors(plan, timing, ceilings)
        _print_kernels(plan, row)
        row["products"] = products_vs_matmul(plan, row["kernels"])
        _print_products(row)
        row |= attention_vs_sdpa(config, gpu)
        for setup in args.anchors:
            row[f"torch_{setup}_ms"] = torch_step_ms(config, timing.parameters, setup)
        _print_step(row, args.anchors)
        rows.append(row)
    setups = args.anchors
    print(f"\n{'tokens/step':>12} {'plan ms':>8} {'(host)':>8} " + " ".join(f"{s:>18}" for s in setups)
          + "   (anchor ms, plan / anchor by events)")
    for row in rows:
        cells = [f"{row[f'torch_{s}_ms']:8.2f} ({row['plan_events_ms'] / row[f'torch_{s}_ms']:5.2f}x)" for s in setups]
        print(f"{row['tokens']:>12} {row['plan_events_ms']:8.2f} {row['plan_ms']:8.2f} " + " ".join(f"{c:>18}" for c in cells))
    print(f"\n{'tokens/step':>12} {'attention us':>13} {'SDPA us':>9} {'speed-up':>9} {'out. diff.':>10}  (a layer, "
          "forward + backward)")
    for row in rows:
        print(f"{row['tokens']:>12} {row['attention_us']:13.1f} {row['sdpa_us']:9.1f} "
              f"{row['sdpa_us'] / row['attention_us']:8.2f}x {row['output_difference']:10.1e}")
    if args.json:
        with written_whole(args.json, "w") as f:
            f.write(json.dumps(rows, indent=1))
    return 0
