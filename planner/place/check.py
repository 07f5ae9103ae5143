"""Checks of a placed plan, independent of how it was placed.

`overlaps`: the planes a placed plan declares, each with the sites its
notes give it, are live from each of their writes to the last of their own
reads of what it wrote; two planes that share bytes must never be live at
one position. (Planes of the window with no sites listed, the pinned banks,
are live for the whole run.) Each failure is a record a picture can draw.

`uncontained`: every access of the window lies in the plane that lists its
site, or, unlisted, in a plane with no sites listed; else the overlap check
would not see it.

`same_dataflow`: walking both runs, every read of the placed plan reads,
piece by piece, the bytes the same write instance wrote at the same place
within it as the read of the original plan does. With manifests that state
what kernels read and write, the two plans then compute the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from planner.place.liveness import Bytes, Event, Interval, Site, Tensor, host_site, listed_sites, merge, run_order
from planner.schedule.plan import HOST_READ, HOST_WRITE, Plan


@dataclass(frozen=True)
class Overlap:
    """Two planes live at `position` (the run order) sharing [start, stop)."""

    plane_a: str
    plane_b: str
    window: str
    start: int
    stop: int
    position: int
    launch_index: int   # the launch at that position (-1: a host action)
    step: int           # its run step

    def to_json(self) -> dict:
        return {"plane_a": self.plane_a, "plane_b": self.plane_b, "window": self.window, "start": self.start,
                "stop": self.stop, "position": self.position, "launch_index": self.launch_index, "step": self.step}


def _accesses(plan: Plan, ev: Event) -> Iterator[tuple[Site, str, int, int, bool, bool]]:
    """(site, window, start, stop, reads, writes) of one event."""
    if ev.launch >= 0:
        for a in plan.launches[ev.launch].accesses:
            yield (ev.launch, a.argument), a.window, a.start, a.stop, a.reads, a.writes
    else:
        step = plan.run[ev.step]
        yield host_site(ev.step), step.window, step.start, step.stop, step.kind == HOST_READ, \
            step.kind == HOST_WRITE


def declared_tensors(plan: Plan, window: str, events: tuple[Event, ...] | None = None) -> list[Tensor]:
    """The planes of `window` with the live intervals their own sites give."""
    events = run_order(plan) if events is None else events
    sites = listed_sites(plan)
    owner: dict[Site, str] = {site: name for name, listed in sites.items() for site in listed}
    memory = {name: Bytes() for name in sites}
    write_at: list[int] = []
    last_read: list[int] = []
    defs: dict[str, list[int]] = {name: [] for name in sites}
    lone: dict[str, list[int]] = {name: [] for name in sites}   # reads of bytes the plane never wrote
    first_phase: dict[str, str] = {}
    for p, ev in enumerate(events):
        accesses = list(_accesses(plan, ev))
        for site, _, start, stop, reads, _ in accesses:
            name = owner.get(site)
            if name is not None and reads:
                found = False
                for d, _, _ in memory[name].read(start, stop):
                    last_read[d] = p
                    found = True
                if not found:
                    lone[name].append(p)
        for site, _, start, stop, _, writes in accesses:
            name = owner.get(site)
            if name is not None and writes:
                memory[name].write(start, stop, len(write_at))
                defs[name].append(len(write_at))
                write_at.append(p)
                last_read.append(p)
                first_phase.setdefault(name, plan.launches[ev.launch].phase if ev.launch >= 0 else "host")
    whole = ((0, max(len(events) - 1, 0)),)
    out = []
    for plane in plan.planes:
        if plane.window != window:
            continue
        if plane.name in sites:
            intervals = [(write_at[d], last_read[d]) for d in defs[plane.name]] + [(p, p) for p in lone[plane.name]]
            out.append(Tensor(plane.name, window, plane.offset, plane.stop, plane.alignment,
                              tuple(sites[plane.name]), merge(intervals),
                              first_phase.get(plane.name, ""), False))
        else:
            out.append(Tensor(plane.name, window, plane.offset, plane.stop, plane.alignment, (), whole, "", True))
    return out


def uncontained(plan: Plan, window: str) -> list[str]:
    """Accesses of `window` the overlap check would not see: a site outside
    the plane that lists it, or listed by none and inside no unlisted plane."""
    sites = listed_sites(plan)
    owner = {site: name for name, listed in sites.items() for site in listed}
    whole = [p for p in plan.planes if p.window == window and p.name not in sites]
    problems = []
    for launch in plan.launches:
        for a in launch.accesses:
            if a.window != window:
                continue
            name = owner.get((launch.index, a.argument))
            planes = [plan.plane[name]] if name is not None else whole
            if not any(p.offset <= a.start and a.stop <= p.stop for p in planes):
                problems.append(f"launch {launch.index} argument {a.argument} [{a.start:#x}, {a.stop:#x}) lies "
                                + (f"outside its plane {name}" if name else "in no plane"))
    return problems


def overlaps(tensors: list[Tensor], events: tuple[Event, ...]) -> list[Overlap]:
    """Every pair of `tensors` sharing bytes while both are live (the first
    common position of each pair)."""
    found = []
    ordered = sorted(tensors, key=lambda t: t.start)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.start >= a.stop:
                break
            position = _first_common(a.live, b.live)
            if position is not None:
                ev = events[position]
                found.append(Overlap(a.name, b.name, a.window, max(a.start, b.start), min(a.stop, b.stop),
                                     position, ev.launch, ev.step))
    return found


def _first_common(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> int | None:
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            return lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return None


def _reads(plan: Plan, events: tuple[Event, ...]) -> Iterator[tuple[int, Site, tuple]]:
    """Each read: its position, site and pieces (relative start and stop in
    the read, and the writing instance and its site and relative offset;
    bytes nobody wrote have no writer)."""
    memory = {w.name: Bytes() for w in plan.windows}
    writes: list[tuple[int, Site, int]] = []   # (position, site, start)
    for p, ev in enumerate(events):
        accesses = list(_accesses(plan, ev))
        for site, window, start, stop, reads, _ in accesses:
            if reads:
                pieces, cursor = [], start
                for d, a, b in memory[window].read(start, stop):
                    if a > cursor:
                        pieces.append((cursor - start, a - start, None))
                    at, by, origin = writes[d]
                    pieces.append((a - start, b - start, (at, by, a - origin)))
                    cursor = b
                if cursor < stop:
                    pieces.append((cursor - start, stop - start, None))
                yield p, site, tuple(pieces)
        for site, window, start, stop, _, written in accesses:
            if written:
                memory[window].write(start, stop, len(writes))
                writes.append((p, site, start))


def same_dataflow(original: Plan, placed: Plan) -> str | None:
    """None when every read of `placed` reads what it reads in `original`;
    else a line naming the first read that differs."""
    events = run_order(original)
    if run_order(placed) != events:
        return "the run orders differ"
    for (p, site, pieces), (_, _, placed_pieces) in zip(_reads(original, events), _reads(placed, events)):
        if pieces != placed_pieces:
            what = f"launch {site[0]} argument {site[1]}" if site[0] >= 0 else f"run step {-1 - site[0]}"
            return f"position {p}: {what} reads {placed_pieces[:3]} where the original reads {pieces[:3]}"
    return None
