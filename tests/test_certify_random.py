"""Small random plans: Z3's verdict on every property equals brute force, and
every counterexample Z3 gives replays as a real violation."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import brute
from tests.plans import ARENA, STAGING, Builder
from planner.certify.findings import FAIL, PASS
from planner.certify.properties import check
from planner.certify.smt import Prover
from planner.schedule.plan import HOST_READ, HOST_WRITE, Plan

PROVER = Prover()
ARENA_BYTES, STAGING_BYTES = 256, 64


@st.composite
def plans(draw) -> Plan:
    b = Builder(windows={ARENA: ARENA_BYTES, STAGING: STAGING_BYTES})
    word = lambda hi: 4 * draw(st.integers(0, hi // 4))
    planes = []
    for i in range(draw(st.integers(2, 6))):
        window = STAGING if draw(st.integers(0, 3)) == 0 else ARENA
        top = ARENA_BYTES if window == ARENA else STAGING_BYTES
        offset = word(top - 8)
        size = 4 + word(min(96, top - offset - 4))
        size = max(size, min(32, top - offset))
        planes.append(b.plane(f"p{i}", offset, size, window, is_global=draw(st.integers(0, 5)) == 0))
    names = [p.name for p in planes]
    phases = []
    for i in range(draw(st.integers(1, 3))):
        fresh = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
        carried = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
        phases.append(b.phase(f"phase{i}", fresh, carried))

    def pointer(phase: str) -> tuple[str, int]:
        fresh, carried = b.phases[phase]
        mine = [q for q in planes if q.name in fresh + carried + b.globals]
        # mostly a plane the phase may touch, else any plane, else anywhere
        p = draw(st.sampled_from(mine if mine and draw(st.integers(0, 4)) else planes))
        if draw(st.integers(0, 7)) == 0:
            top = ARENA_BYTES if p.window == ARENA else STAGING_BYTES
            return p.window, word(top - 4)
        return p.window, p.offset + word(min(8, p.bytes - 4))

    launches = []
    for _ in range(draw(st.integers(1, 6))):
        family = draw(st.sampled_from(["fill", "copy", "add", "scatter"]))
        args = {"fill": ["out"], "copy": ["out", "in"], "add": ["out", "left", "right"],
                "scatter": ["gradient", "dy", "ids"]}[family]
        phase = draw(st.sampled_from(phases))
        launches.append(b.launch(family, phase, draw(st.integers(1, 8)), **{a: pointer(phase) for a in args}))
    def submission() -> int:
        issued = sorted(draw(st.lists(st.sampled_from(launches), min_size=1, max_size=3, unique=True)))
        if draw(st.booleans()):
            return b.submission(issued)    # one after another
        # each launch after any of those issued before it, or beside them
        return b.submission(issued, [tuple(sorted(draw(st.lists(st.sampled_from(issued[:k]), max_size=2,
                                                                unique=True)))) if k else ()
                                     for k in range(len(issued))])

    submissions = [submission() for _ in range(draw(st.integers(1, 3)))]
    submitted: list[int] = []
    staging = [p.name for p in planes if p.window == STAGING]
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["submit", "submit", "wait", "write", "read"]))
        if kind == "submit" or (kind == "wait" and not submitted):
            after = draw(st.lists(st.sampled_from(submitted), max_size=2, unique=True)) if submitted else []
            submitted.append(b.submit(draw(st.sampled_from(submissions)), tuple(sorted(after))))
        elif kind == "wait":
            b.wait(draw(st.sampled_from(submitted)))
        elif staging:
            lo = word(STAGING_BYTES - 4)
            hi = lo + 4 + word(min(32, STAGING_BYTES - lo - 4))
            # a staging plane, which may or may not hold the bytes
            b.host(HOST_WRITE if kind == "write" else HOST_READ, lo, hi, draw(st.sampled_from(staging)))
    return b.build()


def replays(plan: Plan, prop: str, v) -> bool:
    """The counterexample, checked by brute force on the objects it names."""
    b = v.witness["b"]
    inside = lambda span: span.start <= b < span.stop
    if prop == "containment":
        actor = v.writer or v.other
        a = actor.span
        if actor.launch is None:
            scope = [plan.plane[plan.run[actor.run_step].plane]]
        else:
            scope = brute.allowed(plan, actor.phase)
        return inside(a) and not any(p.window == a.window and p.offset <= a.start and a.stop <= p.stop
                                     for p in scope) or (inside(a) and a.stop > plan.window[a.window].bytes)
    if prop == "declared":
        p, q = v.planes
        return inside(p) and inside(q) and p.name != q.name
    if prop == "live":
        p, q = v.planes
        return inside(p) and inside(q) and frozenset((p.name, q.name)) in brute.live(plan)
    run = brute.Run(plan)
    find = lambda actor: run.find(actor.run_step, actor.launch, actor.argument)
    if prop == "survive":
        x, r = find(v.writer), find(v.other)
        return inside(v.writer.span) and inside(v.other.span) and (x.key, r.key) in brute.survive(plan)
    if prop == "ordering":
        x, y = find(v.writer), find(v.other)
        if not (inside(x.access) and inside(y.access)):
            return False
        if x.node == y.node:
            return (x.access.start, x.access.stop) != (y.access.start, y.access.stop)
        return not (run.before(x.node, y.node) or run.before(y.node, x.node))
    if prop == "defined":
        r = find(v.other)
        return inside(r.access) and not any(w.node < r.node and w.access.writes and w.access.window == r.access.window
                                            and w.access.start <= b < w.access.stop for w in run.events)
    raise AssertionError(prop)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_z3_agrees_with_brute_force(plan):
    outcome = check(plan, prover=PROVER, limit=3)
    for r in outcome.results:
        expected = FAIL if brute.PROPERTIES[r.property](plan) else PASS
        assert r.verdict == expected, (r.property, [v.message for v in r.violations])
        for v in r.violations:
            assert replays(plan, r.property, v), (r.property, v.message, v.witness)
