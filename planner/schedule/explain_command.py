"""Draw the arena: each tensor's live interval over the run order, at its
addresses; a failure report's planes and launch in red.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from planner.cli import InputError, plan_from
from planner.files import Unreadable, read_json
from planner.place.check import overlaps
from planner.place.liveness import ARENA, listed_sites
from planner.place.placement import place
from planner.schedule.explain import FORMATS, Mark, ReportError, picture, read_report, render
from planner.schedule.plan import Plan


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--load", metavar="FILE", help="draw a plan file ('-' for standard input) instead")
    p.add_argument("--placed", action="store_true", help="place the plan first (as `planner place`) and draw that")
    p.add_argument("--out", metavar="FILE", required=True, help="the picture: .png, .svg or .html")
    p.add_argument("--report", metavar="FILE",
                   help="a failure report (JSON: [{plane_a, plane_b, launch_index, position?}, ...]) to draw in red")
    p.add_argument("--check", action="store_true",
                   help="find the plan's own live overlaps (planes sharing bytes while live) and draw them in red")
    p.add_argument("--window", default=ARENA, help=f"the window to draw (default {ARENA})")
    p.add_argument("--positions", metavar="FIRST:LAST", help="only this stretch of the run order")
    p.add_argument("--movable", action="store_true", help="only the addresses above the pinned banks")


def _positions(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        first, last = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError(f"--positions {text}: must be FIRST:LAST (integers)") from None
    if not 0 <= first <= last:
        raise InputError(f"--positions {text}: must have 0 <= FIRST <= LAST")
    return first, last


def _report(path: str) -> list[Mark]:
    try:
        return read_report(read_json(path))
    except (Unreadable, ReportError) as error:
        raise InputError(f"report {path}: {error}") from None


def run(args: argparse.Namespace) -> int:
    if args.out.rsplit(".", 1)[-1].lower() not in FORMATS:
        raise InputError(f"--out {args.out}: the picture is written as {', '.join('.' + f for f in FORMATS)}")
    plan: Plan = plan_from(args)
    if args.window not in plan.window:
        raise InputError(f"--window {args.window}: the plan has windows {', '.join(plan.window)}")
    if args.placed:
        plan = place(plan).plan
    pic = picture(plan, args.window, _report(args.report) if args.report else [], _positions(args.positions),
                  args.movable)
    for n, mark in enumerate(pic.marks):
        if what := pic.foreign(mark):
            raise InputError(f"report {args.report}: record {n} names {what}, which this plan has not")
    if args.check:
        if not listed_sites(plan):
            raise InputError("--check draws a placed plan's live overlaps; this plan is not placed "
                             "(the certificate checks the seed's declarations)")
        found = overlaps(list(pic.tensors), pic.events)
        for o in found:
            print(f"overlap: {o.plane_a} / {o.plane_b} share [{o.start:#x}, {o.stop:#x}) live at run position "
                  f"{o.position} (launch {o.launch_index})")
        pic = replace(pic, marks=pic.marks + tuple(
            Mark(o.plane_a, o.plane_b, o.launch_index, o.position, f"bytes [{o.start:#x}, {o.stop:#x})")
            for o in found))
    try:
        render(pic, args.out)
    except OSError as error:
        raise InputError(f"--out {args.out}: cannot be written ({error.strerror})") from None
    print(f"{args.out}: {sum(not t.pinned for t in pic.tensors)} tensors over positions {pic.first}..{pic.last}"
          + (f", {len(pic.marks)} failures in red" if pic.marks else ""))
    return 1 if args.check and pic.marks else 0
