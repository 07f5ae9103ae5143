"""One pass over the run in order that narrows each property's question to
the few places it can fail.

The pass keeps, for every byte of every window (as segments, never bytes):
the last access that wrote it and the latest access on each chain that read
it since; for every plane, the last write of the plane (its producer); and
the bytes written so far. From these it collects, without deciding anything:

  reach     every read with the producers of its bytes: the plane's live
            segments (property 2b);
  survive   every producer, with the last write of the same bytes before the
            read that consumes it (property 3);
  pairs     every access with the last write before it and, for a write, the
            reads since, on other chains; and the accesses of one launch
            that may share a byte (property 4);
  undefined every launch read with the stretch of written or unwritten
            bytes its first byte lies in (property 5).

These are complete: if a property fails anywhere, it fails on one of them
(for ordering this is the FastTrack argument: the first race in run order is
with the last write, or with a read since it; an earlier read on the same
chain is ordered whenever a later one is). The decision is Z3's.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from planner.certify.facts import Facts, Site
from planner.schedule.segments import Segments

Event = tuple[int, int]   # (node, site id): one access as the run performs it


class Written:
    """The union of written byte ranges of a window, as sorted disjoint runs."""

    __slots__ = ("starts", "stops")

    def __init__(self):
        self.starts: list[int] = []
        self.stops: list[int] = []

    def around(self, x: int) -> tuple[bool, int, int, int]:
        """Whether byte x is written; the run or the gap it lies in [lo, hi);
        and where the unwritten bytes from hi on end (for a gap: hi; -1: no
        end)."""
        i = bisect_right(self.starts, x) - 1
        after = self.starts[i + 1] if i + 1 < len(self.starts) else -1
        if i >= 0 and x < self.stops[i]:
            return True, self.starts[i], self.stops[i], after
        return False, self.stops[i] if i >= 0 else 0, after, after

    def add(self, lo: int, hi: int) -> None:
        i = bisect_right(self.starts, lo) - 1
        if i >= 0 and self.stops[i] >= lo:   # joins the run before
            lo = self.starts[i]
        else:
            i += 1
        j = i
        while j < len(self.starts) and self.starts[j] <= hi:
            hi = max(hi, self.stops[j])
            j += 1
        self.starts[i:j] = [lo]
        self.stops[i:j] = [hi]


@dataclass
class Sweep:
    """What the pass collects (see the module's docstring)."""

    # plane -> (producer or None, consuming read or the write itself) per live segment
    reach: dict[str, list[tuple[Event | None, Event]]] = field(default_factory=dict)
    # (producer, last writer, read, bytes where both hold); producer == last writer when nothing came between
    survive: list[tuple[Event, Event, Event, int, int]] = field(default_factory=list)
    # (earlier access, later access): one writes, they may share bytes
    pairs: list[tuple[Event, Event]] = field(default_factory=list)
    # (read, what `Written.around` says of its first byte)
    undefined: list[tuple[Event, tuple[bool, int, int, int]]] = field(default_factory=list)
    end: int = 0   # the run's last node


def related(facts: Facts, a: Site, b: Site) -> bool:
    """Two accesses of one launch that may share a byte: in one window, and
    in one plane, in planes that overlap, or outside every plane."""
    if a.access.window != b.access.window:
        return False
    if a.plane is None or b.plane is None or a.plane == b.plane:
        return True
    p, q = facts.plan.plane[a.plane], facts.plan.plane[b.plane]
    return p.offset < q.stop and q.offset < p.stop


@dataclass(frozen=True, slots=True)
class Touch:
    """A site as the pass uses it (accesses that touch no byte are left out)."""

    site: int
    window: str
    lo: int
    hi: int
    reads: bool
    writes: bool
    plane: str | None
    clobbers: tuple["Touch", ...] = ()   # for a read: the launch's other writes that may land in its bytes


@dataclass(frozen=True)
class Shape:
    """What the pass needs of a launch (or host step), worked out once."""

    touches: tuple[Touch, ...]
    inner: tuple[tuple[int, int], ...]   # site pairs of the launch that may clash


def shape(facts: Facts, sites: tuple[Site, ...]) -> Shape:
    def touch(s: Site, clobbers: tuple[Touch, ...] = ()) -> Touch:
        a = s.access
        return Touch(s.id, a.window, a.start, a.stop, a.reads, a.writes, s.plane, clobbers)

    live = [s for s in sites if s.start < s.stop]
    writes = {s.id: touch(s) for s in live if s.access.writes}
    touches = tuple(touch(s, tuple(writes[t.id] for t in live if t is not s and t.id in writes
                                   and related(facts, s, t))) if s.access.reads else writes[s.id]
                    for s in live)
    inner = tuple((a.id, b.id) for i, a in enumerate(live) for b in live[i + 1:]
                  if (a.access.writes or b.access.writes) and related(facts, a, b))
    return Shape(touches, inner)


def sweep(facts: Facts) -> Sweep:
    plan, run = facts.plan, facts.run
    chain = [n.chain for n in run.nodes]
    last = {w.name: Segments((None, {})) for w in plan.windows}       # (last write, {chain: latest read since})
    producer = {p.name: Segments(None) for p in plan.planes}            # last write of the plane
    written = {w.name: Written() for w in plan.windows}
    out = Sweep(end=max(len(run) - 1, 0))
    reach, survive, pairs, undefined = out.reach, out.survive, out.pairs, out.undefined
    shapes: dict[tuple[int, int], Shape] = {}    # (launch, host step) -> its shape
    # For a producer and a later write of its bytes on another node, the read
    # that exposes them does not matter (it only has to come after both).
    exposed: set[tuple[Event, Event]] = set()

    for v, node in enumerate(run.nodes):
        key = (node.launch, node.step if node.launch < 0 else -1)
        if key not in shapes:
            shapes[key] = shape(facts, facts.node_sites(v))
        touches, inner = shapes[key].touches, shapes[key].inner
        if not touches:
            continue
        here = chain[v]
        for a, b in inner:
            pairs.append(((v, a), (v, b)))

        for t in touches:
            e = (v, t.site)
            window = last[t.window]
            seen: set = set()
            for _, _, (w, readers) in window.pieces(t.lo, t.hi):
                if w is not None and chain[w[0]] != here and w not in seen:
                    seen.add(w)
                    pairs.append((w, e))
                if t.writes:
                    for c, r in readers.items():
                        if c != here and r not in seen:
                            seen.add(r)
                            pairs.append((r, e))
            if not t.reads:
                continue
            if node.launch >= 0:
                undefined.append((e, written[t.window].around(t.lo)))
            if t.plane is None:
                continue
            segments = reach.setdefault(t.plane, [])
            for plo, phi, w in producer[t.plane].pieces(t.lo, t.hi):
                segments.append((w, e))
                if w is None:
                    continue
                for xlo, xhi, (x, _) in window.pieces(plo, phi):
                    if (w, x) not in exposed:
                        exposed.add((w, x))
                        survive.append((w, x, e, xlo, xhi))
                # a write of this same launch into the bytes while it reads them
                for c in t.clobbers:
                    xlo, xhi = max(plo, c.lo), min(phi, c.hi)
                    if xlo < xhi:
                        survive.append((w, (v, c.site), e, xlo, xhi))

        for t in touches:
            if t.reads:
                e = (v, t.site)
                last[t.window].update(t.lo, t.hi, lambda val, e=e: (val[0], {**val[1], here: e}))
        for t in touches:
            if t.writes:
                e = (v, t.site)
                last[t.window].assign(t.lo, t.hi, (e, {}))
                written[t.window].add(t.lo, t.hi)
                if t.plane is not None:
                    producer[t.plane].assign(t.lo, t.hi, e)
                    reach.setdefault(t.plane, []).append((e, e))
    return out
