"""The optimising search: a best-fit placement improved toward the lower
bound within a time budget.

Large-neighbourhood search with Z3 as the exact core: the blocks that reach
the top (the critical ones) and the highest blocks they meet in time are
freed, every other block stays where it is, and Z3 Optimize places the freed
blocks to minimise their highest top under the current height (each pair
that meets in time is a disjunction: one ends before the other starts, as
OLLA/MODeL state it). A move is kept when it lowers the height, or keeps it
and leaves fewer blocks at the top. When the whole problem fits in one
neighbourhood the search is exact; when the height meets the lower bound
(LOAD, counting alignment) it stops, the placement proved optimal for these
blocks.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import z3

from planner.place.problem import Problem

# Freed blocks per neighbourhood: enough for Z3 to move a critical block and
# its neighbours, few enough that one solve takes well under a second.
NEIGHBOURHOOD = 24
SOLVE_S = 5.0   # at most this long for one solve


@dataclass(frozen=True)
class Result:
    offsets: list[int]
    height: int
    bound: int      # the lower bound it was held to (`Problem.bound`)
    seconds: float
    solves: int
    optimal: bool   # the height meets the bound, or Z3 proved it over all blocks


def _top(p: Problem, offsets: list[int], i: int) -> int:
    return offsets[i] + p.tensors[i].bytes


def _score(p: Problem, offsets: list[int]) -> tuple[int, int]:
    """(height, blocks reaching it): lexicographically smaller is better."""
    height = p.height(offsets)
    return height, sum(1 for i in range(len(offsets)) if _top(p, offsets, i) == height)


def _neighbourhood(p: Problem, offsets: list[int], rng: random.Random, size: int) -> list[int]:
    height = p.height(offsets)
    critical = [i for i in range(len(offsets)) if _top(p, offsets, i) == height]
    rng.shuffle(critical)
    chosen = dict.fromkeys(critical[:size])
    # the highest blocks that meet a chosen one: those in its way down
    near = sorted({j for i in chosen for j in p.conflicts[i]} - set(chosen),
                  key=lambda j: (-_top(p, offsets, j), rng.random()))
    for j in near:
        if len(chosen) >= size:
            break
        chosen[j] = None
    return list(chosen)


def _solve(p: Problem, offsets: list[int], free: list[int], floor: int, limit: int,
           timeout_ms: int) -> tuple[list[int] | None, bool]:
    """Place `free` (the rest fixed) with every top at most `limit`, the
    highest as low as Z3 finds in the time: the offsets (None when it finds
    none) and whether Z3 proved them optimal."""
    freed = set(free)
    opt = z3.Optimize()
    opt.set("timeout", max(1, timeout_ms))
    units = {i: z3.Int(f"k{i}") for i in free}   # offset = alignment x units
    at = {i: p.tensors[i].alignment * units[i] for i in free}
    top = z3.Int("top")
    # no placement goes under the bound or under a fixed block's top:
    # saying so lets Z3 stop as soon as it meets them
    fixed_top = max((offsets[j] + p.tensors[j].bytes for j in range(len(offsets)) if j not in freed), default=0)
    opt.add(top >= max(floor, fixed_top))
    for i in free:
        size = p.tensors[i].bytes
        opt.add(units[i] >= 0, at[i] + size <= top, top <= limit)
        for j in p.conflicts[i]:
            other = p.tensors[j].bytes
            if j in freed:
                if j > i:
                    opt.add(z3.Or(at[i] + size <= at[j], at[j] + other <= at[i]))
            else:
                opt.add(z3.Or(at[i] + size <= offsets[j], offsets[j] + other <= at[i]))
    opt.minimize(top)
    verdict = opt.check()
    if verdict == z3.unsat:
        return None, False
    try:
        model = opt.model()
    except z3.Z3Exception:   # out of time before any model
        return None, False
    new = list(offsets)
    for i in free:
        new[i] = p.tensors[i].alignment * model.eval(units[i], model_completion=True).as_long()
    return (new, verdict == z3.sat) if p.valid(new) else (None, False)


def improve(p: Problem, offsets: list[int], budget_s: float, seed: int = 0) -> Result:
    """Improve `offsets` for at most `budget_s` seconds."""
    start = time.monotonic()
    bound = p.bound()
    best = list(offsets)
    score = _score(p, best)
    solves = 0
    rng = random.Random(seed)
    exact = len(best) <= NEIGHBOURHOOD   # one solve over every block, with all the time there is
    proved = False
    while score[0] > bound and not proved:
        left = budget_s - (time.monotonic() - start)
        if left <= 0 or (exact and solves):
            break
        free = list(range(len(best))) if exact else _neighbourhood(p, best, rng, NEIGHBOURHOOD)
        candidate, optimal = _solve(p, best, free, bound, score[0], int((left if exact else min(left, SOLVE_S)) * 1000))
        solves += 1
        if candidate is not None and _score(p, candidate) < score:
            best, score = candidate, _score(p, candidate)
        proved = exact and optimal   # Z3's optimum over all blocks is the optimum
    return Result(best, score[0], bound, time.monotonic() - start, solves, score[0] <= bound or proved)
