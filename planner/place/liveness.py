"""Tensors and their live intervals, from a plan's accesses over the run.

The run order is the host's program with every submit step expanded into its
submission's launches: one event per launch instance and per host action,
in the order the host issues them. A position is an index into that order.

A tensor is what the launches pass between each other. Walking the run
order, every read joins the writes whose bytes it reads (for each byte, the
write last to touch it), and a read-write access is its own read's write.
Accesses are static sites, one (launch, argument) serving every issue of the
launch, so a tensor is a set of sites: moving all of them by the same amount
keeps every read reading what its writes wrote. Its footprint is the byte
range its sites' accesses span. A manifest's write is taken to write every
byte it claims (the certificate's own assumption); a read that claims more
than was written joins only the writes it does find.

A tensor is live from each write to the last read of what that write wrote
(a write nothing reads is live at its own position): a set of closed
intervals of positions. Two tensors may share bytes only if no interval of
one meets an interval of the other.

Pinned planes (the banks the runtime reads and writes as whole blocks: the
checkpoint, AdamW) are single tensors live for the whole run; tensors in a
window that is not placed keep their bytes as well.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterator

from planner.schedule.arena import ARENA
from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, Plan

# The banks and the half copies: the runtime's checkpoint and AdamW treat
# each as one block at a fixed place.
BANKS = ("parameters", "gradients", "first-moments", "second-moments", "half-copies")
# The strongest alignment a moved tensor keeps (a page, as the seed's planes).
MAX_ALIGNMENT = 0x1000

Site = tuple[int, str]   # (launch index, pointer argument); a host step is (-1 - run position, "host")
PIN = -(1 << 40)         # the launch index of the site that stands for a pinned plane
Interval = tuple[int, int]  # closed: [first position, last position]


def host_site(step: int) -> Site:
    return (-1 - step, "host")


def listed_sites(plan: Plan) -> dict[str, list[Site]]:
    """A placed plan's planes and their sites (notes["placement"]["planes"]:
    {plane: [[launch index, argument], ...]}, a host step as [-1 - run
    position, "host"], which the plan's reader and check_consistent hold to
    the plan); nothing for a plan not placed."""
    listed = plan.notes.get("placement", {}).get("planes", {})
    return {name: [(index, argument) for index, argument in sites] for name, sites in listed.items()}


@dataclass(frozen=True)
class Event:
    """One entry of the run order: a launch instance (`launch` >= 0) or a
    host action (`launch` = -1) at run position `step`."""

    step: int
    launch: int


def run_order(plan: Plan) -> tuple[Event, ...]:
    events = []
    for n, step in enumerate(plan.run):
        if step.kind == SUBMIT:
            events.extend(Event(n, i) for i in plan.submissions[step.submission].launches())
        elif step.kind in (HOST_WRITE, HOST_READ):
            events.append(Event(n, -1))
    return tuple(events)


class Bytes:
    """Which write last wrote each byte of a window: disjoint [start, stop)
    ranges, each with the id of its write."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []
        self.owners: list[int] = []

    def _first(self, start: int) -> int:
        i = bisect_right(self.starts, start) - 1
        return i if i >= 0 and self.stops[i] > start else i + 1

    def read(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(owner, start, stop) of each written piece of [start, stop)."""
        i = self._first(start)
        while i < len(self.starts) and self.starts[i] < stop:
            yield self.owners[i], max(start, self.starts[i]), min(stop, self.stops[i])
            i += 1

    def write(self, start: int, stop: int, owner: int) -> None:
        i = self._first(start)
        j = i
        while j < len(self.starts) and self.starts[j] < stop:
            j += 1
        starts, stops, owners = [start], [stop], [owner]
        if i < j and self.starts[i] < start:      # the piece left of the write survives
            starts.insert(0, self.starts[i]), stops.insert(0, start), owners.insert(0, self.owners[i])
        if i < j and self.stops[j - 1] > stop:    # and the piece right of it
            starts.append(stop), stops.append(self.stops[j - 1]), owners.append(self.owners[j - 1])
        self.starts[i:j], self.stops[i:j], self.owners[i:j] = starts, stops, owners


@dataclass(frozen=True)
class Tensor:
    name: str
    window: str
    start: int            # its footprint in the plan it was found in
    stop: int
    alignment: int
    sites: tuple[Site, ...]
    live: tuple[Interval, ...]
    phase: str            # the phase of its first write (for pictures)
    pinned: bool          # kept where it is

    @property
    def bytes(self) -> int:
        return self.stop - self.start

    def meets(self, other: "Tensor") -> bool:
        """Live at some common position."""
        a, b = self.live, other.live
        i = j = 0
        while i < len(a) and j < len(b):
            if a[i][0] <= b[j][1] and b[j][0] <= a[i][1]:
                return True
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return False


@dataclass(frozen=True)
class Liveness:
    plan: Plan
    events: tuple[Event, ...]
    tensors: tuple[Tensor, ...]

    @property
    def positions(self) -> int:
        return len(self.events)

    def movable(self) -> list[Tensor]:
        return [t for t in self.tensors if not t.pinned]

    def tensor_of(self) -> dict[Site, Tensor]:
        return {s: t for t in self.tensors for s in t.sites}


class _Sets:
    """Union-find over sites."""

    def __init__(self) -> None:
        self.parent: dict[Site, Site] = {}

    def find(self, x: Site) -> Site:
        root = x
        while self.parent.setdefault(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def join(self, a: Site, b: Site) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def merge(intervals: list[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _lowbit(x: int) -> int:
    return x & -x if x else MAX_ALIGNMENT


def _site_accesses(plan: Plan) -> dict[Site, tuple[str, int, int]]:
    """Every site's bytes: launch sites from the plan, host sites from the run."""
    access = {(launch.index, a.argument): (a.window, a.start, a.stop) for launch in plan.launches
              for a in launch.accesses}
    for n, step in enumerate(plan.run):
        if step.kind in (HOST_WRITE, HOST_READ):
            access[host_site(n)] = (step.window, step.start, step.stop)
    return access


@dataclass
class _Flow:
    """The run walked once: each write instance's site, position and last
    read, and the reads that found nothing written."""

    write_site: list[Site]
    write_at: list[int]
    last_read: list[int]
    lone_reads: list[tuple[Site, int]]


def _walk(plan: Plan, events: tuple[Event, ...], sets: _Sets) -> _Flow:
    memory = {w.name: Bytes() for w in plan.windows}
    flow = _Flow([], [], [], [])
    for p, ev in enumerate(events):
        if ev.launch >= 0:
            launch = plan.launches[ev.launch]
            reads = [((ev.launch, a.argument), a.window, a.start, a.stop) for a in launch.accesses if a.reads]
            writes = [((ev.launch, a.argument), a.window, a.start, a.stop) for a in launch.accesses if a.writes]
        else:
            step = plan.run[ev.step]
            item = [(host_site(ev.step), step.window, step.start, step.stop)]
            reads, writes = (item, []) if step.kind == HOST_READ else ([], item)
        for site, window, start, stop in reads:
            found = False
            for w, _, _ in memory[window].read(start, stop):
                sets.join(site, flow.write_site[w])
                flow.last_read[w] = p
                found = True
            if not found:
                flow.lone_reads.append((site, p))
        for site, window, start, stop in writes:
            memory[window].write(start, stop, len(flow.write_site))
            flow.write_site.append(site)
            flow.write_at.append(p)
            flow.last_read.append(p)
    return flow


def liveness(plan: Plan, pinned: tuple[str, ...] = BANKS, windows: tuple[str, ...] = (ARENA,)) -> Liveness:
    """The tensors of `plan` and their live intervals over its run; tensors
    in `windows` that meet none of the `pinned` planes may be moved."""
    events = run_order(plan)
    access = _site_accesses(plan)
    sets = _Sets()
    pins = {(PIN, n): plan.plane[n] for n in pinned if n in plan.plane}   # one site stands for a whole plane
    for site, (window, start, stop) in access.items():
        sets.find(site)
        for pin, p in pins.items():
            if p.window == window and start < p.stop and p.offset < stop:
                sets.join(site, pin)
    flow = _walk(plan, events, sets)

    groups: dict[Site, list[Site]] = {}
    for site in access:
        groups.setdefault(sets.find(site), []).append(site)
    pinned_root = {sets.find(pin): p for pin, p in pins.items()}
    live: dict[Site, list[Interval]] = {}
    first: dict[Site, tuple[int, Site]] = {}   # the first write (or lone read) and its site
    for w, site in enumerate(flow.write_site):
        root = sets.find(site)
        live.setdefault(root, []).append((flow.write_at[w], flow.last_read[w]))
        first.setdefault(root, (flow.write_at[w], site))
    for site, p in flow.lone_reads:
        root = sets.find(site)
        live.setdefault(root, []).append((p, p))
        if root not in first or first[root][0] > p:
            first[root] = (p, site)

    # a placed plan lists its planes' sites: its tensors keep those names
    listed = {site: name for name, sites in listed_sites(plan).items() for site in sites}
    whole_run = ((0, max(len(events) - 1, 0)),)
    tensors = []
    names: set[str] = set()
    for root, sites in groups.items():
        sites.sort()
        window = access[sites[0]][0]
        start = min(access[s][1] for s in sites)
        stop = max(access[s][2] for s in sites)
        pin = pinned_root.get(root)
        _, by = first.get(root, (0, sites[0]))
        phase = "host" if by[0] < 0 else plan.launches[by[0]].phase
        given = {listed.get(s) for s in sites}
        if pin is not None:
            name, start, stop, intervals = pin.name, min(start, pin.offset), max(stop, pin.stop), whole_run
        else:
            intervals = merge(live.get(root, []))
            if len(given) == 1 and None not in given and not given <= names:
                name = given.pop()
                names.add(name)
            else:
                name = _name(plan, window, start, stop, phase, by, names)
        tensors.append(Tensor(name, window, start, stop, min(MAX_ALIGNMENT, _lowbit(start)), tuple(sites),
                              intervals, phase, pin is not None or window not in windows))
    tensors.sort(key=lambda t: (t.window, t.start, t.live[:1], t.name))
    return Liveness(plan, events, tuple(tensors))


def _name(plan: Plan, window: str, start: int, stop: int, phase: str, by: Site, taken: set[str]) -> str:
    """The named plane that holds the tensor (its offset in it when it does
    not start there; the writing phase's own plane where several could),
    and the launch or run step that first writes it."""
    declared = plan.phase[phase].fresh + plan.phase[phase].carried if phase in plan.phase else ()
    holders = [p for p in plan.planes if p.window == window and p.offset <= start and stop <= p.stop]
    if holders:
        p = min(holders, key=lambda p: (p.offset != start or p.stop != stop, p.name not in declared,
                                        p.bytes, p.name))
        name = p.name if p.offset == start else f"{p.name}+{start - p.offset:#x}"
    else:
        name = f"{window}+{start:#x}"
    name += f"@{by[0]}" if by[0] >= 0 else f"@run{-1 - by[0]}"
    base, n = name, 1
    while name in taken:
        n += 1
        name = f"{base}#{n}"
    taken.add(name)
    return name
