"""`planner bench`: the certified plan's step time beside PyTorch's, in one
process on one GPU.

Both sides train the same model from the same parameters on the same random
(never zero) batches. The plan's step is an update submission replayed as a
CUDA graph, with the host's waits and reads the certified run makes; the
anchor is the PyTorch reference under bf16 autocast with SDPA attention and
fused AdamW, eager, compiled, and compiled with the whole step captured as
one CUDA graph (the strongest). Warm-up is excluded; the median of the timed
steps is reported, with CUDA events around each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from planner.model.config import Config

WARMUP, TIMED = 10, 50


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--batches", default="1,8", help="sequences per step to measure (default 1,8)")
    p.add_argument("--anchors", default="eager,compile,compile+graph",
                   help="PyTorch setups to measure beside the plan")
    p.add_argument("--json", metavar="FILE", help="write the measurements as JSON")


def _batch(config: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = config.shape
    ids = rng.integers(0, s.vocab, size=(s.batch, s.seq + 1), dtype=np.int64)
    return ids[:, :-1].astype(np.int32), ids[:, 1:].astype(np.int32)


def plan_step_ms(plan, gpu, cubin_hashes: dict[str, str] | None = None) -> tuple[float, list[float], np.ndarray]:
    """Median ms per update of a plan (the caller certifies it); also the
    losses, and the parameters it started from (for the anchor)."""
    from planner.model.config import from_dict
    from planner.runtime.cuda import CudaDevice
    from planner.runtime.session import Session

    config = from_dict(plan.config)
    device = CudaDevice(plan, gpu, graphs=True, cubin_hashes=cubin_hashes)
    try:
        session = Session(plan, device)
        rng = np.random.default_rng(0)
        session.start(_batch(config, rng)[0])
        parameters = np.frombuffer(device.read_arena(plan.plane["parameters"].offset,
                                                     plan.plane["parameters"].bytes), "<f4").copy()
        times, losses = [], []
        for i in range(WARMUP + TIMED):
            ids, targets = _batch(config, rng)
            began = time.perf_counter()
            losses.append(session.update(ids, targets))
            if i >= WARMUP:
                times.append((time.perf_counter() - began) * 1e3)
    finally:
        device.close()
    return statistics.median(times), losses, parameters


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


# The H200's ceilings measured on this workplace's machines (copy bandwidth
# counting bytes read and written; bf16 products on random data).
BANDWIDTH = 4.3e12
MATRIX_RATE = 790e12


def floor_us(plan, index: int) -> float:
    """A launch's floor: its bytes over the bandwidth, or a product's
    operations over the matrix rate, whichever is larger."""
    launch = plan.launches[index]
    img = plan.image[launch.image]
    # a read-write argument moves its bytes twice
    moved = sum((a.stop - a.start) * (2 if a.reads and a.writes else 1) for a in launch.accesses)
    operations = 0
    if img.family.startswith("tiled"):
        c = img.constant_map
        operations = 2 * c["m"] * c["n"] * c["k"]
    return max(moved / BANDWIDTH, operations / MATRIX_RATE) * 1e6


def kernel_times(plan, device, submission: int, repeat: int = 20) -> dict[str, tuple[int, float, float]]:
    """Each launch of one submission timed as a CUDA graph of `repeat` copies
    of it back to back (the gaps a graph has, not Python's): image ->
    (launches, total microseconds, total floor microseconds)."""
    from planner.runtime.cuda import _Graph
    from planner.runtime.driver import call

    start, stop = call("cuEventCreate", 0), call("cuEventCreate", 0)
    out: dict[str, tuple[int, float, float]] = {}
    try:
        for index in plan.submissions[submission].launches():
            graph = call("cuGraphCreate", 0)
            holder = _Graph(graph, None, {})
            previous = None
            for _ in range(repeat):
                deps = [previous] if previous is not None else []
                previous = call("cuGraphAddKernelNode", graph, deps, len(deps), device._node_params(holder, index))
            executable = call("cuGraphInstantiate", graph, 0)
            call("cuGraphLaunch", executable, device.stream)
            call("cuEventRecord", start, device.stream)
            call("cuGraphLaunch", executable, device.stream)
            call("cuEventRecord", stop, device.stream)
            call("cuEventSynchronize", stop)
            us = call("cuEventElapsedTime", start, stop) * 1e3 / repeat
            call("cuGraphExecDestroy", executable)
            call("cuGraphDestroy", graph)
            name = plan.launches[index].image
            count, total, floor = out.get(name, (0, 0.0, 0.0))
            out[name] = (count + 1, total + us, floor + floor_us(plan, index))
    finally:
        call("cuEventDestroy", start)
        call("cuEventDestroy", stop)
    return out


def run(args: argparse.Namespace) -> int:
    from planner.certify import demand_certificate
    from planner.cli import read_config
    from planner.runtime.cuda import NoDevice, open_gpu
    from planner.schedule import build_plan

    base = read_config(args.config)
    try:
        gpu = open_gpu()
    except NoDevice as error:
        print(f"planner bench: {error}", file=sys.stderr)
        return 2
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        config = replace(base, shape=replace(base.shape, batch=batch))
        plan = build_plan(config)
        certificate = demand_certificate(plan)
        ours, losses, parameters = plan_step_ms(plan, gpu, certificate.cubins or None)
        row = {"batch": batch, "tokens": config.shape.tokens, "plan_ms": ours, "plan_losses": losses[:3]}
        for setup in args.anchors.split(","):
            row[f"torch_{setup}_ms"] = torch_step_ms(config, parameters, setup)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'tokens/step':>12} {'plan ms':>9} " + " ".join(f"{s:>16}" for s in args.anchors.split(",")))
    for row in rows:
        cells = []
        for setup in args.anchors.split(","):
            t = row[f"torch_{setup}_ms"]
            cells.append(f"{t:7.2f} ({row['plan_ms'] / t:4.2f}x)")
        print(f"{row['tokens']:>12} {row['plan_ms']:9.2f} " + " ".join(f"{c:>16}" for c in cells))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0
