"""The properties by brute force, for small plans: every pair, every earlier
access, interval arithmetic, happens-before as explicit ancestor sets built
straight from the run's semantics. No Z3, no sweep, no vector clocks: a
reference the certificate's verdicts are compared with."""

from __future__ import annotations

from dataclasses import dataclass

from planner.kernels.manifest import READ, WRITE
from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, WAIT, Access, Plan, Plane


@dataclass(frozen=True)
class Ev:
    """One access as the run performs it."""

    node: int            # index of the launch instance or host step in run order
    run_step: int
    launch: int | None
    access: Access
    plane: str | None

    @property
    def key(self) -> tuple:
        return (self.run_step, self.launch, self.access.argument)


def _smallest(planes, a: Access) -> str | None:
    fits = [p for p in planes if p.window == a.window and p.offset <= a.start and a.stop <= p.stop]
    return min(fits, key=lambda p: (p.bytes, p.offset, p.name)).name if fits else None


def allowed(plan: Plan, phase: str) -> list[Plane]:
    ph = plan.phase[phase]
    return [plan.plane[n] for n in dict.fromkeys(ph.fresh + ph.carried + plan.globals)]


class Run:
    """The run's accesses in run order, and who happens before whom."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.events: list[Ev] = []
        self.ancestors: list[int] = []      # per node: bitmask of the nodes before it
        done: dict[int, int] = {}           # submit step -> mask of its instance and what it waited on
        host = 0                            # mask of the host's steps so far and their ancestors
        node = 0
        for p, step in enumerate(plan.run):
            me = node
            node += 1
            mask = host
            if step.kind == WAIT:
                mask |= done[step.after[0]]
            self.ancestors.append(mask)
            if step.kind in (HOST_WRITE, HOST_READ):
                a = Access(step.what or step.kind, WRITE if step.kind == HOST_WRITE else READ,
                           step.window, step.start, step.stop)
                self.events.append(Ev(me, p, None, a, _smallest([plan.plane[step.plane]], a)))
            host = mask | (1 << me)
            if step.kind == SUBMIT:
                start = host
                for a in step.after:
                    start |= done[a]
                seen = start
                upto: dict[int, int] = {}   # launch -> it and what happens before it
                for index, after in plan.submissions[step.submission].waits():
                    launch = plan.launches[index]
                    me = node
                    node += 1
                    mask = start
                    for a in after:
                        mask |= upto[a]
                    self.ancestors.append(mask)
                    for acc in launch.accesses:
                        self.events.append(Ev(me, p, index, acc, _smallest(allowed(plan, launch.phase), acc)))
                    upto[index] = mask | 1 << me
                    seen |= upto[index]
                done[p] = seen
        self.nodes = node

    def before(self, x: int, y: int) -> bool:
        return bool(self.ancestors[y] >> x & 1)

    def find(self, run_step: int, launch: int | None, argument: str) -> Ev:
        return next(e for e in self.events if e.key == (run_step, launch, argument))


def _minus(pieces: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out = []
    for a, b in pieces:
        if b <= lo or hi <= a:
            out.append((a, b))
        else:
            if a < lo:
                out.append((a, lo))
            if hi < b:
                out.append((hi, b))
    return out


def _meet(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None


def nonempty(e: Ev) -> bool:
    return e.access.start < e.access.stop


# ---- the properties: each returns the set of things that violate it ----

def containment(plan: Plan) -> set:
    bad = set()
    for launch in plan.launches:
        for a in launch.accesses:
            if nonempty_access(a) and not _inside(plan, allowed(plan, launch.phase), a):
                bad.add((launch.index, a.argument))
    run = Run(plan)
    for e in run.events:
        if e.launch is None and not _inside(plan, [plan.plane[plan.run[e.run_step].plane]], e.access):
            bad.add(("host", e.run_step))
    return bad


def nonempty_access(a: Access) -> bool:
    return a.start < a.stop


def _inside(plan: Plan, planes, a: Access) -> bool:
    return a.stop <= plan.window[a.window].bytes and _smallest(planes, a) is not None


def declared(plan: Plan) -> set:
    scopes = [(p.name, allowed(plan, p.name)) for p in plan.phases] or \
        [("globals", [plan.plane[g] for g in plan.globals])]
    bad = set()
    for scope, planes in scopes:
        for i, p in enumerate(planes):
            for q in planes[i + 1:]:
                if p.window == q.window and _meet((p.offset, p.stop), (q.offset, q.stop)):
                    bad.add((scope, frozenset((p.name, q.name))))
    return bad


def producers(run: Run, r: Ev) -> list[tuple[Ev | None, tuple[int, int]]]:
    """The plane's writes whose bytes r reads: (write, bytes), latest first;
    (None, bytes) for bytes no earlier write of the plane covers."""
    left = [(r.access.start, r.access.stop)]
    out = []
    for w in reversed([e for e in run.events if e.node < r.node]):
        if w.plane == r.plane and w.access.writes and w.access.window == r.access.window:
            for piece in left:
                m = _meet(piece, (w.access.start, w.access.stop))
                if m:
                    out.append((w, m))
            left = _minus(left, w.access.start, w.access.stop)
    out += [(None, piece) for piece in left]
    return out


def live_sets(plan: Plan, run: Run) -> dict[str, list[tuple[int, int]]]:
    live: dict[str, list[tuple[int, int]]] = {}
    for e in run.events:
        if e.plane is None or not nonempty(e):
            continue
        if e.access.reads:
            for w, _ in producers(run, e):
                live.setdefault(e.plane, []).append(((w or e).node, e.node))
        if e.access.writes:
            live.setdefault(e.plane, []).append((e.node, e.node))
    for g in plan.globals:
        live[g] = [(-1, run.nodes)]
    return live


def live(plan: Plan) -> set:
    run = Run(plan)
    sets = live_sets(plan, run)
    bad = set()
    for i, p in enumerate(plan.planes):
        for q in plan.planes[i + 1:]:
            if p.window != q.window or not _meet((p.offset, p.stop), (q.offset, q.stop)):
                continue
            if any(a <= d and c <= b for a, b in sets.get(p.name, []) for c, d in sets.get(q.name, [])):
                bad.add(frozenset((p.name, q.name)))
    return bad


def survive(plan: Plan) -> set:
    run = Run(plan)
    bad = set()
    for r in run.events:
        if r.plane is None or not r.access.reads or not nonempty(r):
            continue
        for w, piece in producers(run, r):
            if w is None:
                continue
            for x in run.events:
                if not x.access.writes or x.access.window != r.access.window or x is r:
                    continue
                if not _meet(piece, (x.access.start, x.access.stop)):
                    continue
                between = w.node < x.node < r.node
                same = x.node == r.node and (x.access.start, x.access.stop) != (r.access.start, r.access.stop)
                if between or same:
                    bad.add((x.key, r.key))
    return bad


def ordering(plan: Plan) -> set:
    run = Run(plan)
    bad = set()
    for i, x in enumerate(run.events):
        for y in run.events[i + 1:]:
            if not (x.access.writes or y.access.writes) or x.access.window != y.access.window:
                continue
            if not _meet((x.access.start, x.access.stop), (y.access.start, y.access.stop)):
                continue
            if x.node == y.node:
                if (x.access.start, x.access.stop) != (y.access.start, y.access.stop):
                    bad.add((x.key, y.key))
            elif not (run.before(x.node, y.node) or run.before(y.node, x.node)):
                bad.add((x.key, y.key))
    return bad


def defined(plan: Plan) -> set:
    run = Run(plan)
    bad = set()
    for r in run.events:
        if r.launch is None or not r.access.reads or not nonempty(r):
            continue
        left = [(r.access.start, r.access.stop)]
        for w in run.events:
            if w.node < r.node and w.access.writes and w.access.window == r.access.window:
                left = _minus(left, w.access.start, w.access.stop)
        if left:
            bad.add(r.key)
    return bad


PROPERTIES = {"containment": containment, "declared": declared, "live": live, "survive": survive,
              "ordering": ordering, "defined": defined}
