"""A value for every byte offset of a window, kept as segments, never
bytes: the certificate's pass over the run (`planner.certify.sweep`) keeps
each byte's last write and reads since in one, and the launch order
(`planner.schedule.order`) each byte's last writer and readers since."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable


class Segments:
    """A value for every byte offset from 0 up: sorted breakpoints, and the
    value from each breakpoint to the next (the last reaches to infinity)."""

    __slots__ = ("starts", "values")

    def __init__(self, value):
        self.starts: list[int] = [0]
        self.values: list = [value]

    def _cut(self, x: int) -> int:
        i = bisect_right(self.starts, x) - 1
        if self.starts[i] != x:
            i += 1
            self.starts.insert(i, x)
            self.values.insert(i, self.values[i - 1])
        return i

    def pieces(self, lo: int, hi: int) -> list[tuple[int, int, object]]:
        """(start, stop, value) for each segment [lo, hi) meets, clipped."""
        starts = self.starts
        i = bisect_right(starts, lo) - 1
        j = bisect_left(starts, hi, i + 1)
        if j == i + 1:
            return [(lo, hi, self.values[i])]
        bounds = [lo] + starts[i + 1:j] + [hi]
        return list(zip(bounds, bounds[1:], self.values[i:j]))

    def assign(self, lo: int, hi: int, value) -> None:
        i = self._cut(lo)
        j = self._cut(hi)
        del self.starts[i + 1:j], self.values[i + 1:j]
        self.values[i] = value

    def update(self, lo: int, hi: int, change: Callable) -> None:
        i = self._cut(lo)
        j = self._cut(hi)
        for k in range(i, j):
            self.values[k] = change(self.values[k])
