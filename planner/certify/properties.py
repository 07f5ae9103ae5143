"""The certificate's properties, each a Z3 query whose model is the
counterexample (SPEC §3):

  1 containment      every access lies inside one plane of its launch's phase
                     (fresh or carried) or a global, and inside its window
  2a declared        within each phase, its fresh and carried planes and the
                     globals never share a byte
  2b live            planes live at the same time never share a byte; a plane
                     is live from a write to the last read that consumes it,
                     over the run order (globals: throughout)
  3 values survive   between a plane's write and a read that consumes it, no
                     other access writes a byte the read takes
  4 ordering         two accesses that share a byte, one writing, are ordered
                     by happens-before
  5 defined          every byte a launch reads was written earlier in the run

Plain Python narrows each question to candidates (sorting, the sweep); every
candidate becomes one ground row of the query and Z3 decides. Candidates
that state the same numbers are one row. A row states bytes as they are,
but moments of the run (and places on a chain) only by their order: the
properties compare them and nothing else, and so the rows of a submission
the run repeats, or of a layer like the last, are one.

Property 6 (the machine code) is checked elsewhere: `register` a callable
that takes the plan and returns violations.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass
from functools import cached_property
from heapq import heappop, heappush
from typing import Callable, Iterable, Iterator

from planner.certify.facts import Facts, Site, phase_planes
from planner.certify.findings import (FAIL, PASS, UNKNOWN, Actor, MachineFindings, Outcome, Result, Span,
                                      Violation)
from planner.certify.smt import SAT, UNSAT, Prover, Query, solver_version
from planner.certify.sweep import Event, Sweep, sweep
from planner.schedule.graph import HappensBefore
from planner.schedule.plan import SUBMIT, Plan, Plane, check_consistent


# ---- the plan, as the properties see it ----

class Context:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.facts = Facts(plan)
        self.run = self.facts.run

    @cached_property
    def sweep(self) -> Sweep:
        return sweep(self.facts)

    @cached_property
    def hb(self) -> HappensBefore:
        return self.run.happens_before

    @cached_property
    def first_issue(self) -> dict[int, int]:
        """Each launch's first run step (of the submit step that issues it)."""
        first: dict[int, int] = {}
        for position, step in enumerate(self.plan.run):
            if step.kind == SUBMIT:
                for index in self.plan.submissions[step.submission].launches():
                    first.setdefault(index, position)
        return first

    def site(self, event: Event) -> Site:
        return self.facts.sites[event[1]]

    def actor(self, site: Site, node: int | None = None) -> Actor:
        a = site.access
        span = Span(a.window, a.start, a.stop)
        if site.launch < 0:
            return Actor(site.step, None, "host", "host", a.argument, a.mode, span, site.plane)
        launch = self.plan.launches[site.launch]
        step = self.run.nodes[node].step if node is not None else self.first_issue.get(site.launch, -1)
        return Actor(step, launch.index, launch.image, launch.phase, a.argument, a.mode, span, site.plane)

    def event_actor(self, event: Event) -> Actor:
        return self.actor(self.site(event), event[0])

    def plane_span(self, name: str | None) -> tuple[Span, ...]:
        if name is None:
            return ()
        p = self.plan.plane[name]
        return (Span(p.window, p.offset, p.stop, p.name),)

    def path(self, a: int, b: int) -> tuple[tuple[str, ...], bool | None]:
        """The schedule between two nodes, described; a long run of one kind
        of step (program order) is shortened to its ends."""
        if a == b:
            return (), None
        nodes, ordered = self.run.path(*sorted((a, b)))
        edges = self.run.graph.edges
        hops = [(edges[u, v]["why"] if (u, v) in edges else edges[v, u]["why"] + ", against its direction", v)
                for u, v in zip(nodes, nodes[1:])]
        lines = [self.run.describe(nodes[0])]
        k = 0
        while k < len(hops):
            j = k
            while j < len(hops) and hops[j][0] == hops[k][0]:
                j += 1
            shown = hops[k:j] if j - k <= 4 else [hops[k], (f"... {j - k - 2} more", None), hops[j - 1]]
            lines += [f"  -> ({why}) {self.run.describe(n)}" if n is not None else f"  {why} ..." for why, n in shown]
            k = j
        return tuple(lines), ordered


# ---- rows ----

def within(lo: int, hi: int, w: str) -> str:
    return f"(<= {lo} {w}) (< {w} {hi})"


def both(parts: list[str]) -> str:
    return "true" if not parts else parts[0] if len(parts) == 1 else f"(and {' '.join(parts)})"


def either(parts: list[str]) -> str:
    return "false" if not parts else parts[0] if len(parts) == 1 else f"(or {' '.join(parts)})"


@dataclass(frozen=True)
class Candidate:
    data: tuple          # the numbers its row states: equal data, one row
    refs: tuple          # what the report reads back


@dataclass(frozen=True)
class Property:
    id: str
    number: str
    title: str
    witnesses: tuple[str, ...]
    candidates: Callable[[Context], Iterable[Candidate]]
    row: Callable[[tuple], str]          # a candidate's data as a ground constraint over the witnesses
    explain: Callable[[Context, tuple, dict[str, int]], Violation]


def ranks(*values: int) -> tuple[int, ...]:
    """Each value's place among the distinct values: the same comparisons,
    small numbers."""
    distinct = sorted(set(values))
    return tuple(distinct.index(v) for v in values)


def overlap(a: Span, b: Span) -> Span:
    return Span(a.window, max(a.start, b.start), min(a.stop, b.stop))


# ---- 1 containment ----

def _containment(ctx: Context) -> Iterator[Candidate]:
    plan, facts = ctx.plan, ctx.facts
    homes: dict[tuple, tuple[Plane, ...]] = {}
    groups: dict[tuple, tuple[Site, tuple[Plane, ...]]] = {}

    def consider(site: Site, scope: str, allowed: tuple[Plane, ...]) -> None:
        a = site.access
        if a.start >= a.stop:
            return   # touches no byte
        key = (scope, a.window, a.start)
        if key not in homes:
            homes[key] = tuple(p for p in allowed if p.window == a.window and p.offset <= a.start < p.stop)
        home = homes[key]
        # With the planes its first byte lies in fixed, the access that
        # reaches furthest is the one that can leave them.
        group = (scope, a.window, tuple(p.name for p in home)) if home else (scope, a.window, a.start, a.stop)
        if group not in groups or groups[group][0].stop < a.stop:
            groups[group] = (site, home)

    allowed = {p.name: phase_planes(plan, p.name) for p in plan.phases}
    for launch in plan.launches:
        for site in facts.launch_sites[launch.index]:
            consider(site, launch.phase, allowed[launch.phase])
    for position, site in facts.step_sites.items():  # a host step's bytes lie in the plane it names
        named = plan.plane[plan.run[position].plane]
        consider(site, f"host {named.name}", (named,))
    for site, home in groups.values():
        size = plan.window[site.access.window].bytes
        yield Candidate((site.start, site.stop, size, tuple((p.offset, p.stop) for p in home)), (site, home))


def _containment_row(data: tuple) -> str:
    s, e, size, home = data
    # not inside any plane its first byte lies in, and b outside the one
    # reaching furthest; or b past the window's end
    inside = [f"(not (and (<= {lo} {s}) (<= {e} {hi})))" for lo, hi in home]
    if home:
        lo, hi = max(home, key=lambda p: p[1])
        inside.append(f"(or (< b {lo}) (<= {hi} b))")
    return f"{within(s, e, 'b')} {either([f'(<= {size} b)', both(inside)])}"


def _explain_containment(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    site, home = refs
    actor = ctx.actor(site)
    a = site.access
    size = ctx.plan.window[a.window].bytes
    scope = f"phase {actor.phase}" if site.launch >= 0 else f"its plane {ctx.plan.run[site.step].plane}"
    if a.stop > size:
        outside, why = Span(a.window, max(a.start, size), a.stop), f"runs past the end of window {a.window}"
    elif home:
        far = max(home, key=lambda p: p.stop)
        outside = Span(a.window, far.stop, a.stop)
        why = f"runs {a.stop - far.stop} bytes past the end of plane {far.name}"
    else:
        outside, why = Span(a.window, a.start, a.stop), \
            f"starts in no plane of {scope} nor a global" if site.launch >= 0 else f"starts outside {scope}"
    planes = tuple(Span(p.window, p.offset, p.stop, p.name) for p in home)
    return Violation("containment", f"{actor} {why}", planes, outside,
                     actor if a.writes else None, None if a.writes else actor, witness=m)


# ---- 2a declared liveness ----

def _declared(ctx: Context) -> Iterator[Candidate]:
    plan = ctx.plan
    scopes = [(p.name, phase_planes(plan, p.name)) for p in plan.phases]
    if not scopes:
        scopes = [("globals", tuple(plan.plane[g] for g in plan.globals))]
    for scope, planes in scopes:
        by_window: dict[str, list[Plane]] = {}
        for p in planes:
            by_window.setdefault(p.window, []).append(p)
        for window, ps in by_window.items():
            # Any overlap among intervals sorted by start shows between one
            # and the furthest-reaching interval before it.
            ps.sort(key=lambda p: (p.offset, p.stop, p.name))
            reach = ps[0]
            for q in ps[1:]:
                yield Candidate((window, reach.offset, reach.stop, q.offset, q.stop), (scope, reach, q))
                if q.stop > reach.stop:
                    reach = q


def _two_planes_row(data: tuple) -> str:
    _, p1, p2, q1, q2 = data[:5]
    return f"{within(p1, p2, 'b')} {within(q1, q2, 'b')}"


def _explain_declared(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    scope, p, q = refs
    spans = ctx.plane_span(p.name) + ctx.plane_span(q.name)
    shared = overlap(*spans)
    writer, other = _launch_touching(ctx, scope, p.name, q.name, shared)
    path, ordered = ctx.path(writer[0], other[0]) if writer and other else ((), None)
    return Violation("declared", f"phase {scope} holds planes {p.name} and {q.name} live together, "
                     f"and they share {shared.stop - shared.start} bytes", spans, shared,
                     ctx.event_actor(writer) if writer else None, ctx.event_actor(other) if other else None,
                     path, ordered, m)


def _launch_touching(ctx: Context, phase: str, p: str, q: str, shared: Span) -> tuple[Event | None, Event | None]:
    """In the run, a launch of `phase` writing the shared bytes through one
    of the planes while it touches the other (else the first launch of the
    phase writing them, alone)."""
    facts = ctx.facts
    hits = lambda s: s.access.window == shared.window and s.start < shared.stop and shared.start < s.stop
    first = None
    for n, node in enumerate(ctx.run.nodes):
        if node.launch < 0 or ctx.plan.launches[node.launch].phase != phase:
            continue
        sites = facts.launch_sites[node.launch]
        for s in sites:
            if s.access.writes and s.plane in (p, q) and hits(s):
                mate = next((t for t in sites if t is not s and t.plane in (p, q) and t.plane != s.plane), None)
                if mate is not None:
                    return (n, s.id), (n, mate.id)
                first = first or (n, s.id)
    return first, None


# ---- 2b live intervals ----

@dataclass(frozen=True)
class Live:
    """A stretch of the run [begin, end] a plane is live in, the access that
    begins it and the one that ends it."""

    begin: int
    end: int
    first: Event | None
    last: Event | None


def live_intervals(ctx: Context) -> dict[str, list[Live]]:
    """Each plane's live stretches, disjoint and in order: from each write to
    the last read that consumes it (a read nothing in the plane wrote is live
    only while it runs); globals throughout the run."""
    out: dict[str, list[Live]] = {}
    for plane, segments in ctx.sweep.reach.items():
        spans = sorted({((w or e)[0], e[0], w or e, e) for w, e in segments})
        merged: list[Live] = []
        for begin, end, first, last in spans:
            if merged and begin <= merged[-1].end:
                if end > merged[-1].end:
                    merged[-1] = Live(merged[-1].begin, end, merged[-1].first, last)
            else:
                merged.append(Live(begin, end, first, last))
        out[plane] = merged
    for g in ctx.plan.globals:
        out[g] = [Live(0, ctx.sweep.end, None, None)]
    return out


def _live(ctx: Context) -> Iterator[Candidate]:
    # Each plane's stretches are rectangles: its bytes by a stretch of the
    # run. Sweep the run; a stretch beginning is set beside the stretches
    # live then, kept sorted by first byte. Up to the first clash those are
    # disjoint, so a beginning stretch meets one of them only if it meets
    # the one starting at or before its first byte, or the next one.
    plan = ctx.plan
    starts: list[tuple[int, int, Plane, Live]] = []
    for name, stretches in live_intervals(ctx).items():
        p = plan.plane[name]
        starts += [(x.begin, x.end, p, x) for x in stretches]
    starts.sort(key=lambda t: (t[0], t[2].window, t[2].offset, t[2].name))
    ends: list[tuple[int, int, tuple]] = []          # heap of (end, serial, active key)
    active: dict[str, list[tuple[int, int, str, Live]]] = {}
    serial = 0
    for begin, end, p, x in starts:
        while ends and ends[0][0] < begin:
            _, _, (window, item) = heappop(ends)
            live = active[window]
            del live[bisect_left(live, item[:3], key=lambda t: t[:3])]
        live = active.setdefault(p.window, [])
        item = (p.offset, p.stop, p.name, x)
        i = bisect_left(live, item[:3], key=lambda t: t[:3])
        for _, _, q_name, y in live[max(i - 1, 0):i + 1]:
            yield _live_pair(p, x, plan.plane[q_name], y)
        live.insert(i, item)
        heappush(ends, (end, serial, (p.window, item)))
        serial += 1


def _live_pair(p: Plane, x: Live, q: Plane, y: Live) -> Candidate:
    times = ranks(x.begin, x.end, y.begin, y.end)
    return Candidate((p.window, p.offset, p.stop, q.offset, q.stop) + times, (p, q, x, y))


def _live_row(data: tuple) -> str:
    a1, a2, c1, c2 = data[5:]
    return f"{_two_planes_row(data)} (<= {a1} t) (<= t {a2}) (<= {c1} t) (<= t {c2})"


def _explain_live(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    p, q, x, y = refs
    spans = ctx.plane_span(p.name) + ctx.plane_span(q.name)
    shared = overlap(*spans)
    # The plane whose stretch begins later is written while the other is live.
    (late, late_plane), (early, early_plane) = sorted([(x, p), (y, q)], key=lambda t: (t[0].begin, t[1].name),
                                                     reverse=True)
    writer = ctx.event_actor(late.first) if late.first else None
    other_event = early.last if early.last else None
    other = ctx.event_actor(other_event) if other_event else None
    path, ordered = ctx.path(late.first[0], other_event[0]) if late.first and other_event else ((), None)
    when = sorted({x.begin, x.end, y.begin, y.end})[m["t"]]
    live_for = (f"live [{early.begin}, {early.end}] in the run" if early.first
                else "a global, live throughout")
    return Violation("live", f"plane {late_plane.name} is written at run node {late.begin} while plane "
                     f"{early_plane.name} ({live_for}) still holds {shared.stop - shared.start} bytes they share "
                     f"(both live at node {when})", spans, shared, writer, other, path, ordered, m)


# ---- 3 values survive ----

def _survive(ctx: Context) -> Iterator[Candidate]:
    for w, x, r, lo, hi in ctx.sweep.survive:
        rs, xs = ctx.site(r), ctx.site(x)
        yield Candidate((rs.access.window, lo, hi, rs.start, rs.stop, xs.start, xs.stop) + ranks(w[0], x[0], r[0]),
                        (w, x, r))


def _survive_row(data: tuple) -> str:
    _, lo, hi, rs, re, xs, xe, tw, tx, tr = data
    # b: a byte the read takes, of the producer's, last written by x; x after
    # the producer, not after the read, and not the read's own launch
    # updating those same bytes in place
    return (f"{within(lo, hi, 'b')} {within(rs, re, 'b')} (< {tw} {tx}) (<= {tx} {tr}) "
            f"(not (and (= {tx} {tr}) (= {xs} {rs}) (= {xe} {re})))")


def _explain_survive(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    w, x, r = refs
    rs, xs = ctx.site(r), ctx.site(x)
    writer, reader, made = ctx.event_actor(x), ctx.event_actor(r), ctx.event_actor(w)
    spans = ctx.plane_span(rs.plane) + (ctx.plane_span(xs.plane) if xs.plane != rs.plane else ())
    shared = overlap(overlap(writer.span, reader.span), made.span)
    path, ordered = ctx.path(x[0], r[0])
    same = " (the same launch)" if x[0] == r[0] else ""
    return Violation("survive", f"{writer} overwrites {shared.stop - shared.start} bytes of plane {rs.plane} "
                     f"written by {made} before {reader}{same} consumes them", spans, shared, writer, reader,
                     path, ordered, m)


# ---- 4 ordering ----

def _ordering(ctx: Context) -> Iterator[Candidate]:
    hb = ctx.hb
    for x, y in ctx.sweep.pairs:
        a, b = ctx.site(x), ctx.site(y)
        px, py = int(hb.pos[x[0]]), int(hb.pos[y[0]])
        head = (a.access.window, a.start, a.stop, b.start, b.stop, int(a.access.writes), int(b.access.writes))
        if hb.chain[x[0]] == hb.chain[y[0]]:
            yield Candidate(head + (True,) + ranks(px, py), (x, y))
        else:
            yield Candidate(head + (False,) + ranks(px, hb.reading(x[0], y[0])) + ranks(py, hb.reading(y[0], x[0])),
                            (x, y))


def _ordering_row(data: tuple) -> str:
    _, xs, xe, ys, ye, wx, wy, one_chain = data[:8]
    row = f"{within(xs, xe, 'b')} {within(ys, ye, 'b')} (or (= {wx} 1) (= {wy} 1))"
    if one_chain:
        # one chain is totally ordered: by place on it, unless both are one
        # launch (in place when both name the same bytes and one only reads
        # them: each element read by the thread that writes it; two writes
        # of one launch to the same bytes race)
        px, py = data[8:]
        return (f"{row} (not (< {px} {py})) (not (< {py} {px})) "
                f"(not (and (= {px} {py}) (= {xs} {ys}) (= {xe} {ye}) (not (and (= {wx} 1) (= {wy} 1)))))")
    # what each has seen of the other's chain, by its vector clock
    px, gyx, py, gxy = data[8:]
    return f"{row} (not (<= {px} {gyx})) (not (<= {py} {gxy}))"


def _explain_ordering(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    x, y = refs
    first, second = ctx.event_actor(x), ctx.event_actor(y)
    writer, other = (second, first) if ctx.site(y).access.writes else (first, second)
    shared = overlap(first.span, second.span)
    spans = ctx.plane_span(first.plane) + (ctx.plane_span(second.plane) if second.plane != first.plane else ())
    path, ordered = ctx.path(x[0], y[0])
    how = "in one launch" if x[0] == y[0] else "with nothing in the schedule ordering them"
    return Violation("ordering", f"{writer} and {other} share {shared.stop - shared.start} bytes, {how}",
                     spans, shared, writer, other, path, ordered, m)


# ---- 5 defined before read ----

def _defined(ctx: Context) -> Iterator[Candidate]:
    groups: dict[tuple, tuple[Event, tuple[bool, int, int, int]]] = {}
    for r, stretch in ctx.sweep.undefined:
        s = ctx.site(r)
        # Reads whose first byte lies in one written run (a maximal one, so
        # the byte after it is unwritten) fail exactly when they reach past
        # it: the one reaching furthest stands for them. A read whose first
        # byte is unwritten fails: one per gap.
        key = (s.access.window,) + stretch[:3]
        if key not in groups or ctx.site(groups[key][0]).stop < s.stop:
            groups[key] = (r, stretch)
    for r, (written, lo, hi, end) in groups.values():
        s = ctx.site(r)
        yield Candidate((s.access.window, s.start, s.stop, written, lo, hi, end), (r,))


def _defined_row(data: tuple) -> str:
    _, rs, re, written, lo, hi, end = data
    # b: a byte of the read in the unwritten stretch [hi, end) after the
    # run, or in the gap its first byte lies in
    return within(rs, re, 'b') + (f" (<= {hi} b)" if written else "") + (f" (< b {end})" if end >= 0 else "")


def _explain_defined(ctx: Context, refs: tuple, m: dict[str, int]) -> Violation:
    (r,) = refs
    reader = ctx.event_actor(r)
    s = ctx.site(r)
    gap = _unwritten(ctx, r, m["b"])
    return Violation("defined", f"{reader} reads {gap.stop - gap.start} bytes nothing in the run wrote before it "
                     f"({gap})", ctx.plane_span(s.plane), gap, None, reader, witness=m)


def _unwritten(ctx: Context, r: Event, byte: int) -> Span:
    """The stretch of unwritten bytes around `byte` the read takes."""
    s = ctx.site(r)
    lo, hi = s.start, s.stop
    for n in range(r[0]):
        for t in ctx.facts.node_sites(n):
            a = t.access
            if a.writes and a.window == s.access.window and a.start < hi and lo < a.stop:
                if a.stop <= byte:
                    lo = max(lo, a.stop)
                elif a.start > byte:
                    hi = min(hi, a.start)
    return Span(s.access.window, lo, hi)


PROPERTIES: tuple[Property, ...] = (
    Property("containment", "1", "an access outside one plane of its phase (or a global), or outside its window",
             ("b",), _containment, _containment_row, _explain_containment),
    Property("declared", "2a", "two planes a phase declares live together that share a byte",
             ("b",), _declared, _two_planes_row, _explain_declared),
    Property("live", "2b", "two planes live at one moment t of the run that share a byte b",
             ("b", "t"), _live, _live_row, _explain_live),
    Property("survive", "3", "a write between a plane's write and the read that consumes it, on a byte the read takes",
             ("b",), _survive, _survive_row, _explain_survive),
    Property("ordering", "4", "two accesses sharing a byte, one writing, not ordered by happens-before",
             ("b",), _ordering, _ordering_row, _explain_ordering),
    Property("defined", "5", "a byte a launch reads that nothing in the run wrote before it",
             ("b",), _defined, _defined_row, _explain_defined),
)


# ---- property 6: checks of the machine code, registered by whoever provides them ----

MachineCheck = Callable[[Plan], MachineFindings]
MACHINE_CHECKS: dict[str, MachineCheck] = {}


def register(name: str, check: MachineCheck) -> None:
    """Add a machine-code check (property 6) under `name`: a callable that
    takes the plan and returns its `MachineFindings`. Its violations fail the
    certificate like any property's, and what it cannot decide leaves it
    unknown."""
    MACHINE_CHECKS[name] = check


# ---- the whole certificate ----

def query(prop: Property, ctx: Context) -> tuple[Query, list[Candidate]]:
    """The property's query over its candidates (one row per distinct data)."""
    rows: dict[tuple, Candidate] = {}
    for c in prop.candidates(ctx):
        rows.setdefault(c.data, c)
    candidates = list(rows.values())
    return Query(prop.id, prop.title, prop.witnesses, tuple(prop.row(c.data) for c in candidates)), candidates


def check(plan: Plan, *, limit: int = 5, timeout_ms: int = 60_000, prover: Prover | None = None,
          only: Iterable[str] | None = None, machine: dict[str, MachineCheck] | None = None) -> Outcome:
    """Decide every property (or those named in `only`) over `plan`; up to
    `limit` counterexamples each. The plan must be well formed
    (`check_consistent`, which this calls first)."""
    began = time.perf_counter()
    check_consistent(plan)
    prover = prover or Prover(timeout_ms)
    ctx = Context(plan)
    wanted = set(only) if only is not None else None
    results = []
    for prop in PROPERTIES:
        if wanted is not None and prop.id not in wanted:
            continue
        t0 = time.perf_counter()
        q, candidates = query(prop, ctx)
        answer = prover.decide(q, limit)
        violations = tuple(prop.explain(ctx, candidates[m["k"]].refs, m) for m in answer.models)
        verdict = {SAT: FAIL, UNSAT: PASS}.get(answer.verdict, UNKNOWN)
        results.append(Result(prop.id, prop.number, prop.title, verdict, violations, len(candidates),
                              time.perf_counter() - t0, q.text, answer.verdict, answer.reason))
    for name, machine_check in (MACHINE_CHECKS if machine is None else machine).items():
        if wanted is not None and name not in wanted:
            continue
        t0 = time.perf_counter()
        found = machine_check(plan)
        verdict = FAIL if found.violations else UNKNOWN if found.unknown else PASS
        results.append(Result(name, "6", f"machine code: {name}", verdict, tuple(found.violations[:limit]),
                              seconds=time.perf_counter() - t0, reason="; ".join(found.unknown[:limit]),
                              attested=dict(found.attested), checker=found.checker))
    return Outcome(plan.digest, tuple(results), time.perf_counter() - began, solver_version())
