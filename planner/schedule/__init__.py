"""The plan: the arena's planes, the launches, the submissions and the run."""

from planner.schedule.build import build_plan

__all__ = ["build_plan"]
