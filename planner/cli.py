"""`planner`: plan, certify and run Coppelius's training.

Bad input (a configuration, a plan file) gets one line naming what is wrong
and exit status 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

from planner.data.batches import DataError
from planner.model.config import DEFAULT, Config, ConfigError, load
from planner.runtime.checkpoint import CheckpointError
from planner.schedule.plan import SCHEMA, Plan, PlanError


class InputError(Exception):
    """Input the user must fix: reported on one line, exit status 2."""


def require_torch():
    """PyTorch, which the reference model and the bench's anchors need (the
    plan itself does not): missing, the command's bad input."""
    try:
        import torch
    except ImportError:
        raise InputError("needs PyTorch (pip install torch)") from None
    return torch


def output_file(path: str, option: str) -> Path:
    """A file a command will write, refused before any work if its
    directory does not exist or a directory stands in its place."""
    if not Path(path).resolve().parent.is_dir():
        raise InputError(f"{option} {path}: its directory does not exist")
    if Path(path).is_dir():
        raise InputError(f"{option} {path}: is a directory")
    return Path(path)


def output_directory(path: Path, option: str) -> Path:
    """A directory a command will make and fill, refused before any work
    where a file stands at it or at a folder above it."""
    for above in (path, *path.parents):
        if above.exists():
            if not above.is_dir():
                raise InputError(f"{option} {path}: {above} is not a directory")
            break
    return path


def read_config(path: str | None) -> Config:
    return DEFAULT if path is None else load(path)


def read_plan(path: str) -> Plan:
    from planner.schedule.plan import loads
    where = "plan on standard input" if path == "-" else f"plan file {path}"
    try:
        # bytes, decoded here: standard input's own decoding depends on the locale
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"{where}: cannot be read ({error.strerror})") from None
    try:
        return loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{where}: is not UTF-8 text") from None
    except PlanError as error:
        raise InputError(f"{where}: {error}") from None


def plan_from(args: argparse.Namespace) -> Plan:
    """The plan the command works on: a plan file, or the configuration's."""
    if getattr(args, "load", None):
        return read_plan(args.load)
    from planner.schedule import build_plan
    return build_plan(read_config(args.config))


LAYOUTS = ("seed", "placed")


def build(config: Config, layout: str = "seed") -> Plan:
    """The configuration's plan in the seed's layout, or placed again from
    launch-level liveness (`planner place`)."""
    from planner.schedule import build_plan
    plan = build_plan(config)
    if layout == "placed":
        from planner.place.placement import place
        plan = place(plan).plan
    return plan


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def summary(plan: Plan) -> str:
    """A readable account of the plan: windows, planes per phase, launches
    per phase, submissions (and how deep their dependencies go), the run,
    parameters."""
    from planner.schedule.urgency import depth
    lines = [f"plan {plan.digest[:16]}  layout {plan.layout}  ({len(plan.launches)} launches, "
             f"{len(plan.submissions)} submissions, {len(plan.run)} run steps, {len(plan.images)} images)"]
    if plan.parameter_count():
        lines.append(f"parameters: {plan.parameter_count():,}")
    for w in plan.windows:
        lines.append(f"window {w.name:8} {w.bytes:>14,} bytes ({mib(w.bytes)}, {w.memory})")
    lines.append(f"globals: {', '.join(plan.globals)}")
    per_phase = Counter(l.phase for l in plan.launches)
    lines.append(f"{'phase':28} {'launches':>8} {'fresh':>6} {'carried':>8} {'fresh bytes':>14}")
    for ph in plan.phases:
        fresh_bytes = sum(plan.plane[p].bytes for p in ph.fresh)
        lines.append(f"{ph.name:28} {per_phase.get(ph.name, 0):>8} {len(ph.fresh):>6} {len(ph.carried):>8} "
                     f"{fresh_bytes:>14,}")
    groups = plan.notes.get("submissions") or {"": range(len(plan.submissions))}
    lines.append(f"{'submission (first of a kind)':28} {'launches':>8} {'depth':>6}   (depth: the longest chain "
                 f"of launches each waiting for the one before)")
    for group, indices in groups.items():
        s = plan.submissions[indices[0]]
        lines.append(f"{group or s.index:<28} {sum(c for _, c in s.ranges):>8} {depth(s):>6}")
    kinds = Counter(s.kind for s in plan.run)
    lines.append("run: " + ", ".join(f"{kinds[k]} {k}" for k in ("submit", "wait", "write", "read")))
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    plan = plan_from(args)
    if args.json:
        from planner.schedule.plan import dumps
        sys.stdout.write(dumps(plan))
    else:
        print(summary(plan))
    return 0


def _add_plan_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--load", metavar="FILE", help="read a plan file ('-' for standard input) instead")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="planner", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="derive the plan and summarise it, or export it as JSON",
                       description="Derive the plan from the configuration; summarise it or write it as JSON.")
    _add_plan_source(p)
    p.add_argument("--json", action="store_true", help=f"write the whole plan as JSON (schema {SCHEMA})")
    p.set_defaults(run=cmd_plan)
    for name, (module, add, run, text) in COMMANDS.items():
        m = __import__(module, fromlist=[add, run])
        p = sub.add_parser(name, help=text, description=m.__doc__)
        getattr(m, add)(p)
        p.set_defaults(run=getattr(m, run))
    return ap


# Further commands: name -> (module, its add-arguments function, its run function, help).
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "certify": ("planner.certify.command", "add_arguments", "run",
                "prove the plan safe with Z3, or report counterexamples"),
    "place": ("planner.schedule.place_command", "add_arguments", "run",
              "place the arena again from launch-level liveness, near LOAD"),
    "explain": ("planner.schedule.explain_command", "add_arguments", "run",
                "draw the arena over the run; a failure report in red"),
    "train": ("planner.runtime.train", "add_arguments", "run",
              "certify the plan, then train on the GPU (or the CPU references)"),
    "bench": ("planner.bench", "add_arguments", "run", "the plan's step time beside PyTorch's on the same GPU"),
    "data": ("planner.data.command", "add_arguments", "run", "prepare a tokenizer and token shards"),
    "export": ("planner.reference.commands", "add_export_arguments", "export",
               "write a checkpoint's parameters as a PyTorch state dict"),
    "sample": ("planner.reference.commands", "add_sample_arguments", "sample",
               "generate text greedily from a checkpoint"),
}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except (ConfigError, PlanError, InputError, CheckpointError, DataError) as error:
        print(f"planner {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
