"""Best-fit decreasing: the fast placement (TFLite's arena planner, XLA's
`GlobalDecreasingSizeBestFitHeap`).

Blocks are taken in an order (largest first by default); each goes into the
smallest gap, among the blocks already placed that meet it in time, that
holds it, or on top of them when none does.
"""

from __future__ import annotations

from typing import Callable, Sequence

from planner.place.problem import Problem
from planner.schedule.arena import align


def best_fit(p: Problem, order: Sequence[int]) -> list[int]:
    offsets = [-1] * len(p.tensors)
    sizes = p.sizes
    for i in order:
        size, alignment = sizes[i], p.tensors[i].alignment
        taken = sorted((offsets[j], offsets[j] + sizes[j]) for j in p.conflicts[i] if offsets[j] >= 0)
        best, best_gap, cursor = -1, None, 0
        for start, stop in taken:
            at = align(cursor, alignment)
            gap = start - at
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = at, gap
            cursor = max(cursor, stop)
        offsets[i] = best if best >= 0 else align(cursor, alignment)
    return offsets


# Orders worth trying (XLA runs both the spatial and the temporal one and
# keeps the smaller heap): each a sort key over a block.
def _span(p: Problem, i: int) -> int:
    return sum(b - a + 1 for a, b in p.tensors[i].live)


ORDERS: dict[str, Callable[[Problem, int], tuple]] = {
    "size": lambda p, i: (-p.tensors[i].bytes, -_span(p, i), i),
    "area": lambda p, i: (-p.tensors[i].bytes * _span(p, i), i),
    "span": lambda p, i: (-_span(p, i), -p.tensors[i].bytes, i),
    "conflicts": lambda p, i: (-len(p.conflicts[i]), -p.tensors[i].bytes, i),
}


def order(p: Problem, name: str) -> list[int]:
    key = ORDERS[name]
    return sorted(range(len(p.tensors)), key=lambda i: key(p, i))


def every_order(p: Problem) -> dict[str, list[int]]:
    """The best-fit placement of each order."""
    return {name: best_fit(p, order(p, name)) for name in ORDERS}
