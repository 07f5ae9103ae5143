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

from collections.abc import Sequence

from planner.schedule.plan import Launch, Submission
from planner.schedule.segments import Segments

WIDTH = 32


def dependencies(launches: Sequence[Launch]) -> tuple[tuple[int, ...], ...]:
    """For each launch, in the order given, the indices of the earlier ones
    it must follow, with none that follows from the others."""
    return follows(launches, last_clashes(launches))


def last_clashes(launches: Sequence[Launch]) -> list[set[int]]:
    """For each launch, the positions of earlier ones it clashes with that
    it must follow: each byte's last writer and, where it writes, the byte's
    readers since. Every other earlier access it clashes with is followed by
    one of those (the last writer follows the writes and reads before it),
    so `follows` makes of these the order every pair of clashing accesses
    gives."""
    # each window's bytes: (the position that last wrote them, -1 for none
    # yet; the positions that read them since)
    windows: dict[str, Segments] = {}
    out = []
    for k, launch in enumerate(launches):
        accesses = [a for a in launch.accesses if a.start < a.stop]
        behind: set[int] = set()
        for a in accesses:
            for _, _, (writer, readers) in windows.setdefault(a.window, Segments((-1, ()))).pieces(a.start, a.stop):
                if writer >= 0:
                    behind.add(writer)
                if a.writes:
                    behind.update(readers)
        for a in accesses:   # after all its own clashes: a launch's accesses never clash with one another
            if a.writes:
                windows[a.window].assign(a.start, a.stop, (k, ()))
            else:
                windows[a.window].update(a.start, a.stop, lambda held: (held[0], held[1] + (k,)))
        out.append(behind)
    return out


def follows(launches: Sequence[Launch], clashes: Sequence[set[int]]) -> tuple[tuple[int, ...], ...]:
    """For each launch, the indices of the earlier ones (at the positions
    `clashes` gives it) it must follow, less any that another of them
    already follows; and where that would leave more than WIDTH launches
    side by side, the earliest of them too."""
    ancestors: list[int] = []   # bit set of positions each launch follows
    ends: list[int] = []        # positions nothing waits for yet, in issue order
    out = []
    for k, clash in enumerate(clashes):
        behind = set(clash)
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
