"""What each launch of a submission waits for.

A submission issues its launches in the launch order, but the device need
not run them one after another: a launch has to wait only for the earlier
launches of its submission whose accesses share a byte with its own, one of
the two writing (a read after a write, a write after a read, a write after
a write). Those, less any that another of them already follows, are its
dependencies; launches that touch nothing of one another run side by side,
at most `WIDTH` at a time: a launch that would leave more than that many
launches nothing waits for also waits for the earliest of them (a GPU runs
only so many kernels at once, and the certificate's clocks grow with the
width).

This derives the order; it does not vouch for it. The certificate decides
ordering (property 4) over the run graph these dependencies make, so a plan
file that leaves one out is refused with the two accesses and no path
between them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from planner.schedule.plan import Launch, Submission

WIDTH = 32


class _Bytes:
    """One window's bytes, as the launches so far have left them: segments
    [starts[i], starts[i + 1]), each last written by writers[i] (-1: by none
    yet) and read since by readers[i]."""

    def __init__(self) -> None:
        self.starts, self.writers, self.readers = [0], [-1], [()]

    def clashes(self, start: int, stop: int, writes: bool) -> set[int]:
        """The launches an access of [start, stop) must follow: each byte's
        last writer, and where the access writes, the byte's readers since.
        Every other earlier access it clashes with is followed by one of
        those (the last writer follows the writes and reads before it), so
        what it must follow, less what follows from the rest, is the same."""
        i, out = bisect_right(self.starts, start) - 1, set()
        while i < len(self.starts) and self.starts[i] < stop:
            if self.writers[i] >= 0:
                out.add(self.writers[i])
            if writes:
                out.update(self.readers[i])
            i += 1
        return out

    def _boundary(self, at: int) -> int:
        i = bisect_right(self.starts, at) - 1
        if self.starts[i] != at:
            i += 1
            self.starts.insert(i, at)
            self.writers.insert(i, self.writers[i - 1])
            self.readers.insert(i, self.readers[i - 1])
        return i

    def record(self, start: int, stop: int, writes: bool, k: int) -> None:
        i, j = self._boundary(start), self._boundary(stop)
        if writes:
            self.starts[i:j], self.writers[i:j], self.readers[i:j] = [start], [k], [()]
        else:
            for x in range(i, j):
                self.readers[x] += (k,)


def dependencies(launches: Sequence[Launch]) -> tuple[tuple[int, ...], ...]:
    """For each launch, in the order given, the indices of the earlier ones
    it must follow, with none that follows from the others."""
    windows: dict[str, _Bytes] = {}
    ancestors: list[int] = []   # bit set of positions each launch follows
    ends: list[int] = []        # positions nothing waits for yet, in issue order
    out = []
    for k, launch in enumerate(launches):
        accesses = [a for a in launch.accesses if a.start < a.stop]
        behind: set[int] = set()
        for a in accesses:
            behind |= windows.setdefault(a.window, _Bytes()).clashes(a.start, a.stop, a.writes)
        for a in accesses:   # after all its own clashes: a launch's accesses never clash with one another
            windows[a.window].record(a.start, a.stop, a.writes, k)
        reach = 0
        for j in behind:
            reach |= ancestors[j] | 1 << j
        ends = [j for j in ends if not reach >> j & 1]
        while len(ends) >= WIDTH:                  # too many side by side: follow the earliest
            behind.add(ends.pop(0))
        kept, seen = [], 0
        for j in sorted(behind, reverse=True):     # the latest first: what they follow is not needed
            if not seen >> j & 1:
                kept.append(j)
                seen |= ancestors[j] | 1 << j
        ancestors.append(seen)
        ends.append(k)
        out.append(tuple(launches[j].index for j in sorted(kept)))
    return tuple(out)


def ordered(submissions: Sequence[Submission], launches: Sequence[Launch]) -> tuple[Submission, ...]:
    """The submissions, each with its launches' dependencies derived."""
    out = []
    for s in submissions:
        after = dependencies([launches[i] for i in s.launches()])
        out.append(Submission(s.index, s.ranges, s.semaphore, after))
    return tuple(out)
