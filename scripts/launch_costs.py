"""What each family of launches costs the update: every launch of a family
run twice.

    python3 scripts/launch_costs.py [--batch B] [--rounds R] [--json FILE] FAMILY ...

A FAMILY is one or more prefixes of image names joined by commas
(`attention-key,attention-query`). Each launch whose image starts with one
of them gets a second copy with the same parameter block, issued right after
it; the submissions' dependencies are then derived again from the accesses,
as the planner derives every plan's (`planner.schedule.order`), so the copy
waits for the launch and the launch's readers wait for the copy. Every copy
so reads the values the launch read and writes what it wrote again: where
the device's throughput bounds the update, what the copies add is about what
the family costs. (Emptying a family instead runs its readers on stale
values, faster than on real ones, or into NaNs.) A launch that reads what it
writes (AdamW, the embedding's scatter) writes something else the second
time; the table marks a family whose losses differ from the plan's.

Each plan is certified (every property, the machine code for the cards the
images serve) and run with its certificate demanded, as `planner bench` runs
the plan. Rounds take the plans in turn, the plan itself (`base`) first;
each time is the median update by CUDA events, as the bench times the step.
The table gives each family's launches an update, the mean of its rounds
and what it adds to the plan's. Needs a GPU and the planner.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace

from planner.bench import NotFinite, plan_step_ms, require_finite
from planner.certify import Uncertified, demand_certificate
from planner.cli import InputError, output_file
from planner.files import written_whole
from planner.model.config import ConfigError, from_dict
from planner.runtime import driver
from planner.runtime.cuda import NoDevice, open_gpu
from planner.schedule.build import build_plan
from planner.schedule.order import ordered
from planner.schedule.plan import Plan
from planner.schedule.submissions import merge_ranges


def doubled(plan: Plan, prefixes: tuple[str, ...]) -> tuple[Plan, int]:
    """`plan` with each launch whose image starts with one of `prefixes`
    issued twice, its copy (a new launch index, the same parameter block)
    right after it wherever a submission issues it; the dependencies derived
    again. Also how many launches of an update have a copy."""
    launches = list(plan.launches)
    twin = {}
    for launch in plan.launches:
        if launch.image.startswith(prefixes):
            twin[launch.index] = len(launches)
            launches.append(replace(launch, index=len(launches)))
    submissions = [replace(s, ranges=merge_ranges([(j, 1) for i in s.launches()
                                                   for j in (i, twin.get(i)) if j is not None]))
                   for s in plan.submissions]
    update = plan.submissions[plan.notes["submissions"]["update"][0]]
    return (replace(plan, launches=tuple(launches), submissions=ordered(submissions, launches)),
            sum(i in twin for i in update.launches()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="+", metavar="FAMILY",
                        help="image-name prefixes joined by commas, a family each")
    parser.add_argument("--batch", type=int, default=8, help="sequences a step (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the plans in turn (default 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    args = parser.parse_args()
    try:  # every input checked before the GPU is asked for
        config = from_dict({"shape": {"batch": args.batch}})
        if args.json:
            output_file(args.json, "--json")
    except (ConfigError, InputError) as error:
        print(f"launch_costs: {error}", file=sys.stderr)
        return 2
    plan = build_plan(config)
    variants = {"base": (plan, 0)}
    for family in args.families:
        prefixes = tuple(p for p in family.split(",") if p)
        variant, count = doubled(plan, prefixes)
        if not count:
            print(f"launch_costs: no launch of the plan has an image starting with {' or '.join(prefixes)}",
                  file=sys.stderr)
            return 2
        variants[family] = (variant, count)
    try:
        gpu = open_gpu()
    except NoDevice as error:
        print(f"launch_costs: {error}", file=sys.stderr)
        return 2
    medians: dict[str, list[float]] = {name: [] for name in variants}
    changed: set[str] = set()
    try:
        certificates = {name: demand_certificate(variant) for name, (variant, _) in variants.items()}
        base_losses = None
        for r in range(args.rounds):
            for name, (variant, _) in variants.items():
                timing = plan_step_ms(variant, gpu, certificates[name], alone=False)
                require_finite(timing.losses)
                base_losses = timing.losses if name == "base" else base_losses
                if timing.losses != base_losses:
                    changed.add(name)
                medians[name].append(timing.events_ms)
                print(f"round {r + 1} {name}: {timing.events_ms:.4f} ms", flush=True)
    except NoDevice as error:  # a card the plan's images do not fit, as `planner bench` answers it
        print(f"launch_costs: {error}", file=sys.stderr)
        return 2
    except (Uncertified, NotFinite) as error:
        print(f"launch_costs: refused: {error}", file=sys.stderr)
        return 1
    finally:
        driver.close_device(gpu)
    base = statistics.mean(medians["base"])
    rows = [{"family": name, "launches": count, "mean_ms": round(statistics.mean(medians[name]), 4),
             "added_ms": round(statistics.mean(medians[name]) - base, 4), "rounds_ms": medians[name],
             "same_losses": name not in changed} for name, (_, count) in variants.items()]
    print(f"the {config.shape.batch} x {config.shape.seq} update, each family's launches run twice "
          f"({args.rounds} rounds in turn)")
    print(f"{'family':36s} {'launches':>8s} {'mean ms':>9s} {'added':>8s}  rounds")
    for row in rows:
        mark = "" if row["same_losses"] else "  (losses differ: it reads what it writes)"
        print(f"{row['family']:36s} {row['launches']:8d} {row['mean_ms']:9.4f} {row['added_ms']:8.4f}  "
              + " / ".join(f"{t:.4f}" for t in row["rounds_ms"]) + mark)
    if args.json:
        with written_whole(args.json, "w") as f:
            json.dump({"batch": args.batch, "rounds": args.rounds, "families": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
