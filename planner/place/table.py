"""The placement table: LOAD, the seed layout, best-fit and the optimised
placement for a few configurations, side by side.

Bytes are the movable part of the arena (everything but the pinned banks,
which every layout keeps alike); ratios are to LOAD. The whole arena is
the pinned bytes plus that part. A measured peak (PyTorch's, from a JSON
file {configuration name: bytes}) goes in its own column when given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from planner.model.config import DEFAULT, Config
from planner.place.check import declared_tensors, overlaps, same_dataflow, uncontained
from planner.place.liveness import run_order
from planner.place.placement import Placement, place
from planner.schedule import build_plan
from planner.schedule.plan import Plan

CONFIGS: dict[str, Config] = {
    "default (1 x 1024, 16 layers)": DEFAULT,
    "batch 4 x 1024": replace(DEFAULT, shape=replace(DEFAULT.shape, batch=4)),
    "32 layers": replace(DEFAULT, shape=replace(DEFAULT.shape, layers=32)),
}


@dataclass(frozen=True)
class Row:
    name: str
    placement: Placement
    seconds: float          # building the plan excluded: liveness, best-fit, search, relocation
    verified: str           # "yes", or what the checks found
    certified: str = ""     # the certificate's verdict, when asked


def verify(original: Plan, placed: Placement) -> str:
    """The placed plan's own checks: every access lies in its plane, planes
    live together share no byte, and every read reads what it read in the
    original."""
    outside = uncontained(placed.plan, placed.window)
    if outside:
        return f"{len(outside)} accesses outside their planes (first: {outside[0]})"
    events = run_order(placed.plan)
    found = overlaps(declared_tensors(placed.plan, placed.window, events), events)
    if found:
        return f"{len(found)} live overlaps (first: {found[0].plane_a} / {found[0].plane_b})"
    differs = same_dataflow(original, placed.plan)
    return "yes" if differs is None else differs


def rows(configs: dict[str, Config], budget_s: float, certify: Callable[[Plan], str] | None = None) -> list[Row]:
    """A row per configuration; `certify` gives the placed plan's verdict."""
    out = []
    for name, config in configs.items():
        plan = build_plan(config)
        start = time.monotonic()
        placement = place(plan, budget_s)
        seconds = time.monotonic() - start
        verdict = certify(placement.plan) if certify is not None else ""
        out.append(Row(name, placement, seconds, verify(plan, placement), verdict))
    return out


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f}"


def format_table(table: list[Row], peaks: dict[str, int] | None = None) -> str:
    head = ["configuration", "LOAD MiB", "seed MiB (x)", "best-fit MiB (x)", "optimised MiB (x)",
            "arena seed -> placed MiB", "time s (best-fit, search)", "verified", "certified"]
    if peaks is not None:
        head.append("PyTorch peak MiB")
    lines = [head]
    for r in table:
        p = r.placement
        ratio = lambda n: f"{_mib(n)} ({n / p.load:.3f})" if p.load else _mib(n)
        line = [r.name, _mib(p.load), ratio(p.seed), ratio(p.best_fit),
                ratio(p.optimised) + (" opt" if p.optimal else ""),
                f"{_mib(p.base + p.seed)} -> {_mib(p.window_bytes)}",
                f"{r.seconds:.1f} ({p.best_fit_s:.2f}, {p.search_s:.2f})", r.verified, r.certified]
        if peaks is not None:
            line.append(_mib(peaks[r.name]) if r.name in peaks else "")
        lines.append(line)
    widths = [max(len(row[c]) for row in lines) for c in range(len(head))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def table_json(table: list[Row], peaks: dict[str, int] | None = None) -> list[dict]:
    return [{"configuration": r.name, "load": r.placement.load, "seed": r.placement.seed,
             "best_fit": r.placement.best_fit, "optimised": r.placement.optimised, "optimal": r.placement.optimal,
             "pinned": r.placement.pinned, "base": r.placement.base, "arena_seed": r.placement.base + r.placement.seed,
             "arena_placed": r.placement.window_bytes, "seconds": round(r.seconds, 3),
             "best_fit_seconds": round(r.placement.best_fit_s, 3), "search_seconds": round(r.placement.search_s, 3),
             "verified": r.verified, "certified": r.certified,
             "pytorch_peak": (peaks or {}).get(r.name)} for r in table]
