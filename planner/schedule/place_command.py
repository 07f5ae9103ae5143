"""Place the arena again from launch-level liveness: a smaller arena near
the lower bound (LOAD), checked, written as a plan like any other.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from planner.certify import certify
from planner.certify.findings import PASS
from planner.cli import InputError, mib, plan_from
from planner.files import Unreadable, read_json, written_whole
from planner.place.placement import BUDGET_S, Placement, place
from planner.place.table import CONFIGS, format_table, rows, table_json, verify
from planner.schedule.plan import SCHEMA, dumps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--load", metavar="FILE", help="place a plan file ('-' for standard input) instead")
    p.add_argument("--out", metavar="FILE",
                   help=f"write the placed plan (JSON, {SCHEMA}; '-' for standard output)")
    p.add_argument("--budget", metavar="SECONDS", type=float, default=BUDGET_S,
                   help=f"time for the optimising search (default {BUDGET_S:g}; it stops at LOAD)")
    p.add_argument("--table", action="store_true",
                   help="the table for the default and two larger configurations instead (each placement certified)")
    p.add_argument("--peaks", metavar="FILE",
                   help="with --table: measured peaks, JSON {configuration name: bytes}, as a column")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")


def summary(original_bytes: int, p: Placement, verified: str) -> str:
    times = lambda n: f"{n / p.load:.3f} x LOAD" if p.load else "LOAD is 0"
    return "\n".join([
        f"placed {p.tensors} tensors of window {p.window} above {mib(p.base)} of pinned banks",
        f"LOAD       {p.load:>14,} bytes ({mib(p.load)}; with alignment {p.bound:,})",
        f"seed       {p.seed:>14,} bytes ({times(p.seed)})",
        f"best-fit   {p.best_fit:>14,} bytes ({times(p.best_fit)})",
        f"optimised  {p.optimised:>14,} bytes ({times(p.optimised)}"
        f"{', optimal' if p.optimal else ''}; best-fit order {p.order})",
        f"arena      {original_bytes:,} -> {p.window_bytes:,} bytes ({mib(original_bytes)} -> {mib(p.window_bytes)})",
        f"time       {p.seconds:.2f} s (liveness {p.liveness_s:.2f}, best-fit {p.best_fit_s:.2f}, "
        f"search {p.search_s:.2f})",
        f"verified   {verified}",
        f"plan       {p.plan.digest[:16]}  layout {p.plan.layout}",
    ])


def _peaks(path: str | None) -> dict[str, int] | None:
    if path is None:
        return None
    try:
        data = read_json(path)
    except Unreadable as error:
        raise InputError(f"peaks file {path}: {error}") from None
    if not isinstance(data, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in data.values()):
        raise InputError(f"peaks file {path}: must be an object {{configuration name: bytes}}")
    return data


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.budget < math.inf:   # NaN fails too
        raise InputError(f"--budget {args.budget:g}: must be a finite number of seconds, 0 or more")
    if args.table:
        peaks = _peaks(args.peaks)
        table = rows(CONFIGS, args.budget, lambda plan: certify(plan).verdict)
        print(json.dumps(table_json(table, peaks), indent=1) if args.json else format_table(table, peaks))
        return 0 if all(r.verified == "yes" and r.certified == PASS for r in table) else 1
    plan = plan_from(args)
    placement = place(plan, args.budget)
    verified = verify(plan, placement)
    if args.out and verified == "yes":   # a placement that fails its own checks is not written
        text = dumps(placement.plan)
        if args.out == "-":
            sys.stdout.write(text)
        else:
            try:
                with written_whole(args.out, "w") as f:
                    f.write(text)
            except OSError as error:
                raise InputError(f"--out {args.out}: cannot be written ({error.strerror})") from None
    report = sys.stderr if args.out == "-" else sys.stdout
    if args.json:
        print(json.dumps({"load": placement.load, "bound": placement.bound, "seed": placement.seed,
                          "best_fit": placement.best_fit, "optimised": placement.optimised,
                          "optimal": placement.optimal,
                          "arena": placement.window_bytes, "seconds": round(placement.seconds, 3),
                          "verified": verified, "digest": placement.plan.digest}), file=report)
    else:
        print(summary(plan.window[placement.window].bytes, placement, verified), file=report)
    return 0 if verified == "yes" else 1
