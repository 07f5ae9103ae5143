"""Configuration -> plan: the seed layout, its launches, submissions and run."""

from __future__ import annotations

from planner.model.config import Config, to_dict, validate
from planner.schedule.arena import arena_declarations, seed_layout
from planner.schedule.launches import Builder, Constants, launch_schedule
from planner.schedule.plan import Plan
from planner.schedule.submissions import run_sample, submission_schedule


def build_plan(config: Config) -> Plan:
    """The whole training run of `config`, derived: nothing in it is written
    down that the configuration determines."""
    validate(config)
    layout = seed_layout(config)
    builder = Builder(config, layout, Constants.of(config))
    launch_schedule(builder)
    schedule = submission_schedule(builder)
    windows, planes, globals_, phases = arena_declarations(config, layout)
    notes = {"parameters": sum(e.elements for e in layout.entries),
             "submissions": schedule.groups,
             "stretches": {name: list(mark) for name, mark in builder.marks.items()
                           if "-chunk-" not in name and not name.startswith("loss-record-")}}
    return Plan(to_dict(config), windows, planes, globals_, phases, tuple(builder.images.values()),
                tuple(builder.launches), tuple(schedule.submissions), run_sample(builder, schedule),
                layout="seed", notes=notes)
