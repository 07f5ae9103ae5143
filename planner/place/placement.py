"""A plan placed again: liveness, best-fit, the optimising search, the
placed plan, and the numbers that say how good it is."""

from __future__ import annotations

import time
from dataclasses import dataclass

from planner.place.fit import every_order
from planner.place.liveness import ARENA, BANKS, liveness
from planner.place.problem import problem
from planner.place.relocate import relocate
from planner.place.search import improve
from planner.schedule.plan import Plan

BUDGET_S = 10.0   # the optimising search's default time budget


@dataclass(frozen=True)
class Placement:
    plan: Plan               # the placed plan
    window: str
    tensors: int             # movable tensors placed
    pinned: int              # bytes of the window kept where they were (the banks)
    base: int                # where the movable tensors start
    load: int                # LOAD: the most bytes the movable tensors hold live at once
    bound: int               # LOAD counting alignment (`Problem.bound`): what the search aims at
    seed: int                # the movable part of the original window: its bytes above `base`
    best_fit: int            # best-fit decreasing by size (TFLite's order)
    optimised: int           # the best order's best-fit improved by the search
    optimal: bool            # `optimised` proved optimal (it meets the bound, or Z3 said so)
    order: str               # the best-fit order the search started from
    liveness_s: float
    best_fit_s: float
    search_s: float

    @property
    def seconds(self) -> float:
        return self.liveness_s + self.best_fit_s + self.search_s

    @property
    def window_bytes(self) -> int:
        return self.plan.window[self.window].bytes


def place(plan: Plan, budget_s: float = BUDGET_S, pinned: tuple[str, ...] = BANKS, window: str = ARENA) -> Placement:
    t0 = time.monotonic()
    lv = liveness(plan, pinned, (window,))
    p = problem(lv, window)
    t1 = time.monotonic()
    fits = every_order(p)
    name = min(fits, key=lambda n: p.height(fits[n]))   # XLA keeps the smaller heap of its orders
    t2 = time.monotonic()
    result = improve(p, fits[name], budget_s)
    t3 = time.monotonic()
    offsets = {t.name: p.base + o for t, o in zip(p.tensors, result.offsets)}
    load = p.load()
    notes = {"from": plan.digest, "liveness": "launch", "base": p.base, "load": load, "height": result.height,
             "optimal": result.optimal}
    placed = relocate(lv, window, offsets, notes)
    return Placement(placed, window, len(p.tensors), p.pinned_bytes, p.base, load, result.bound,
                     max(0, plan.window[window].bytes - p.base), p.height(fits["size"]), result.height,
                     result.optimal, name, t1 - t0, t2 - t1, t3 - t2)
