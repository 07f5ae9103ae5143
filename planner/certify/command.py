"""Decide the plan's safety properties with Z3; report counterexamples; write or check certificates.

Exit status: 0 certified, 1 a property fails (or a stored certificate is
stale), 2 bad input, 3 a property is unknown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from planner.cli import LAYOUTS
from planner.certify import proofs, with_machine_code
from planner.certify.findings import FAIL, PASS
from planner.certify.properties import check
from planner.certify.report import FORMATS, render, summary
from planner.certify.smt import solver_version

CERTIFIED, FAILED, BAD_INPUT, UNKNOWN = 0, 1, 2, 3
# The properties a placement decides: where only these fail in the seed's
# layout, placing the arena again (from launch-level liveness) may hold them.
LIVENESS = frozenset({"declared", "live", "survive"})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="configuration JSON (default: the embedded default)")
    p.add_argument("--plan", metavar="FILE", help="certify this plan file instead ('-': standard input)")
    p.add_argument("--layout", choices=LAYOUTS, default="seed",
                   help="the configuration's plan in the seed's layout (default) or placed again")
    p.add_argument("--format", choices=FORMATS, default="text", help="how to report (default: text)")
    p.add_argument("--limit", type=int, default=5, metavar="N", help="counterexamples per property (default 5)")
    p.add_argument("--proofs", metavar="DIR", default="proofs",
                   help="where certificates are kept (default: proofs/, run from the repository's top)")
    p.add_argument("--write-proofs", action="store_true", help="write the certificate to DIR/<name>/")
    p.add_argument("--check-proofs", action="store_true",
                   help="compare the certificate in DIR/<name>/ with this plan's, and decide its queries again "
                        "(by Z3 and by cvc5)")


def _name(args: argparse.Namespace) -> str:
    """The certificate's directory name: the plan file's or the configuration's stem."""
    source = args.plan or args.config
    if source in (None, "-"):
        name = "default" if source is None else "stdin"
    else:
        name = Path(source).stem
    return name if args.plan or args.layout == "seed" else f"{name}-{args.layout}"


def run(args: argparse.Namespace) -> int:
    from planner.cli import InputError, build, output_directory, read_config, read_plan
    from planner.model.config import ConfigError
    from planner.schedule.plan import PlanError

    out = sys.stdout
    note = sys.stdout if args.format == "text" else sys.stderr
    if args.limit < 1:
        print(f"planner certify: --limit {args.limit}: must be at least 1", file=sys.stderr)
        return BAD_INPUT
    directory = Path(args.proofs) / _name(args)
    try:
        if args.write_proofs:
            output_directory(directory, "--proofs")
        plan = read_plan(args.plan) if args.plan else build(read_config(args.config), args.layout)
        outcome = check(plan, limit=args.limit, machine=with_machine_code())
    except (ConfigError, PlanError, InputError) as error:
        print(f"planner certify: {error}", file=sys.stderr)
        return BAD_INPUT
    out.write(render(outcome, args.format, args.plan or ""))
    failed = {r.property for r in outcome.results if r.verdict == FAIL}
    if not args.plan and args.layout == "seed" and failed and failed <= LIVENESS:
        print("the seed's placement holds at the seed's shape; `--layout placed` places the arena for this one",
              file=note)

    status = {PASS: CERTIFIED, FAIL: FAILED}.get(outcome.verdict, UNKNOWN)
    if args.write_proofs:
        path = proofs.write(outcome, directory)
        print(f"wrote {path} and {outcome.queries} query files", file=note)
    if args.check_proofs:
        found = proofs.check(outcome, directory, resolve=True)
        if found.current:
            print(f"{directory}: the stored certificate is current ({outcome.queries} queries decided again, "
                  f"unsat by {solver_version()} and by {proofs.second_solver_version()})", file=note)
        else:
            for problem in found.problems:
                print(f"{directory}: {problem}", file=sys.stderr)
            if status == CERTIFIED:
                status = FAILED
    if args.format != "text":
        print(summary(outcome), file=sys.stderr)
    return status
