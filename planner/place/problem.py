"""The placement problem: blocks with live intervals, and which pairs meet.

Offsets are relative to `base`, the first byte past the pinned tensors of
the window; every movable tensor is placed at or above it. A placement is a
list of offsets (one per block); it is valid when no two blocks that meet in
time share a byte and every offset keeps its block's alignment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from planner.place.liveness import Liveness, Tensor
from planner.schedule.arena import align


@dataclass(frozen=True)
class Problem:
    tensors: tuple[Tensor, ...]            # the movable tensors of the window
    window: str
    base: int                              # the first byte they may take
    pinned_bytes: int                      # bytes the pinned tensors hold below `base`
    positions: int
    conflicts: tuple[tuple[int, ...], ...]  # for each block, the blocks it meets

    @property
    def sizes(self) -> list[int]:
        return [t.bytes for t in self.tensors]

    def load(self) -> int:
        """The lower bound: the most bytes the movable tensors hold live at once."""
        return max_live(self.tensors, self.positions)

    def bound(self) -> int:
        """A lower bound on the height that counts alignment: every block
        starts at a multiple of the smallest alignment A, so the blocks live
        at one position take at least their sizes rounded up to A, less the
        rounding of whichever is on top."""
        unit = min((t.alignment for t in self.tensors), default=1)
        events = sorted((x, kind, i) for i, t in enumerate(self.tensors) for a, b in t.live
                        for x, kind in ((a, 1), (b + 1, -1)))
        padding = Counter()
        live = best = 0
        for k, (x, kind, i) in enumerate(events):
            size = self.tensors[i].bytes
            pad = align(size, unit) - size
            live += kind * (size + pad)
            padding[pad] += kind
            if padding[pad] == 0:
                del padding[pad]
            if k + 1 == len(events) or events[k + 1][0] != x:   # all changes at x made
                best = max(best, live - max(padding, default=0))
        return max(best, self.load())

    def height(self, offsets: list[int]) -> int:
        """Bytes from `base` to the top of the highest block."""
        return max((o + t.bytes for o, t in zip(offsets, self.tensors)), default=0)

    def valid(self, offsets: list[int]) -> bool:
        for i, t in enumerate(self.tensors):
            if offsets[i] % t.alignment or offsets[i] < 0:
                return False
            for j in self.conflicts[i]:
                if j > i and offsets[i] < offsets[j] + self.tensors[j].bytes and \
                        offsets[j] < offsets[i] + t.bytes:
                    return False
        return True


def max_live(tensors: tuple[Tensor, ...] | list[Tensor], positions: int) -> int:
    change = [0] * (positions + 1)
    for t in tensors:
        for a, b in t.live:
            change[a] += t.bytes
            change[b + 1] -= t.bytes
    best = live = 0
    for c in change:
        live += c
        best = max(best, live)
    return best


def meeting_pairs(tensors: tuple[Tensor, ...]) -> list[list[int]]:
    """For each tensor, the others live at a common position.

    Two intervals meet exactly when one starts inside the other, so a sweep
    in order of position records, at each start, the set of tensors live
    there (a bit set); the relation is that, made symmetric."""
    n = len(tensors)
    if n == 0:
        return []
    events = sorted((x, kind, i) for i, t in enumerate(tensors) for a, b in t.live
                    for x, kind in ((a, 1), (b + 1, 0)))   # at one position, ends before starts
    live = 0
    started = [0] * n
    for _, kind, i in events:
        if kind:
            started[i] |= live
            live |= 1 << i
        else:
            live &= ~(1 << i)
    width = (n + 7) // 8
    rows = np.frombuffer(b"".join(m.to_bytes(width, "little") for m in started), dtype=np.uint8)
    meets = np.unpackbits(rows.reshape(n, width), axis=1, count=n, bitorder="little").astype(bool)
    meets |= meets.T
    return [np.flatnonzero(row).tolist() for row in meets]


def of(tensors: tuple[Tensor, ...], positions: int, window: str, base: int = 0, pinned_bytes: int = 0) -> Problem:
    return Problem(tensors, window, base, pinned_bytes, positions, tuple(tuple(m) for m in meeting_pairs(tensors)))


def problem(lv: Liveness, window: str) -> Problem:
    """The movable tensors of `window`, above its pinned ones."""
    pinned = [t for t in lv.tensors if t.window == window and t.pinned]
    movable = tuple(t for t in lv.tensors if t.window == window and not t.pinned)
    top = max((t.stop for t in pinned), default=0)
    alignment = max((t.alignment for t in movable), default=1)
    return of(movable, lv.positions, window, align(top, alignment), sum(t.bytes for t in pinned))

