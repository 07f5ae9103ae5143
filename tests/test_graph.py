"""The run as a graph: its edges are the run's semantics, and the vector
clocks' happens-before is exactly reachability in it."""

from __future__ import annotations

import random
import time

import networkx as nx
from hypothesis import HealthCheck, given, settings

from planner.schedule.graph import (AWAIT, DONE, HOST_ORDER, ISSUE, LAUNCH, PROGRAM_ORDER, SEMAPHORE, START, STEP,
                                    RunGraph)
from planner.schedule.plan import HOST_READ, HOST_WRITE
from tests.plans import STAGING, Builder, synthetic
from tests.test_certify_random import plans


def small():
    """Two submissions: the second after the first's semaphore; a host write
    before the first, a wait for the second, a host read after."""
    b = Builder()
    x = b.plane("x", 0, 64)
    b.plane("inputs", 0, 16, STAGING)
    ph = b.phase("p", ["x"])
    l0 = b.launch("fill", ph, 16, out=x)
    l1 = b.launch("copy", ph, 8, out=x, **{"in": ("arena", 32)})
    l2 = b.launch("fill", ph, 4, out=x)
    s0, s1 = b.submission([l0, l1]), b.submission([l2])
    b.host(HOST_WRITE, 0, 16, "inputs")  # 0
    first = b.submit(s0)             # 1
    second = b.submit(s1, (first,))  # 2
    b.wait(second)                   # 3
    b.host(HOST_READ, 0, 16, "inputs")   # 4
    return b.build()


def test_edges_are_the_runs_semantics():
    run = RunGraph(small())
    kinds = [(n.kind, n.step, n.launch) for n in run.nodes]
    assert kinds == [(STEP, 0, -1), (STEP, 1, -1), (START, 1, -1), (LAUNCH, 1, 0), (LAUNCH, 1, 1), (DONE, 1, -1),
                     (STEP, 2, -1), (START, 2, -1), (LAUNCH, 2, 2), (DONE, 2, -1), (STEP, 3, -1), (STEP, 4, -1)]
    whys = {(u, v): d["why"] for u, v, d in run.graph.edges(data=True)}
    assert whys == {(0, 1): HOST_ORDER, (1, 6): HOST_ORDER, (6, 10): HOST_ORDER, (10, 11): HOST_ORDER,
                    (1, 2): ISSUE, (2, 3): PROGRAM_ORDER, (3, 4): PROGRAM_ORDER, (4, 5): PROGRAM_ORDER,
                    (6, 7): ISSUE, (5, 7): SEMAPHORE, (7, 8): PROGRAM_ORDER, (8, 9): PROGRAM_ORDER,
                    (9, 10): AWAIT}
    assert run.accesses(3) == run.plan.launches[0].accesses and run.accesses(0)[0].mode == "write"
    # the second submission continues the first's stream
    assert run.nodes[7].chain == run.nodes[2].chain and run.chains == 2


def test_ordered_and_concurrent_paths():
    run = RunGraph(small())
    hb = run.happens_before
    assert hb.before(0, 8) and hb.before(4, 8) and hb.before(8, 11) and not hb.before(11, 8)
    path, ordered = run.path(0, 11)
    assert ordered and path[0] == 0 and path[-1] == 11
    # without the semaphore the submissions are concurrent
    plan = small()
    from dataclasses import replace
    run2 = RunGraph(replace(plan, run=plan.run[:2] + (replace(plan.run[2], after=()),) + plan.run[3:]))
    assert not run2.happens_before.ordered(4, 8)
    path, ordered = run2.path(4, 8)
    assert not ordered and path[0] == 4 and path[-1] == 8


def _agrees_with_reachability(run: RunGraph, pairs) -> None:
    hb = run.happens_before
    for a, b in pairs:
        assert hb.before(a, b) == (a != b and nx.has_path(run.graph, a, b)), (a, b, run.describe(a), run.describe(b))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_vector_clocks_are_reachability(plan):
    run = RunGraph(plan)
    every = range(len(run))
    _agrees_with_reachability(run, [(a, b) for a in every for b in every])


def test_vector_clocks_on_the_default_plan(default_plan):
    began = time.perf_counter()
    run = RunGraph(default_plan)
    hb = run.happens_before
    seconds = time.perf_counter() - began
    instances = sum(1 for n in run.nodes if n.kind == LAUNCH)
    # the default run: some 23,500 launch instances (370 an update)
    assert instances > 23_000 and seconds < 10, (instances, seconds)
    rng = random.Random(7)
    # reachability from a few nodes, each compared with its clock for every node
    for a in rng.sample(range(len(run)), 5):
        reach = nx.descendants(run.graph, a)
        assert all(hb.before(a, b) == (b in reach) for b in range(len(run)))


def test_a_run_of_thirty_thousand_launch_instances_in_seconds():
    plan = synthetic(layers=16, chain=22, pieces=10, steps=4, chunks=40)
    began = time.perf_counter()
    run = RunGraph(plan)
    run.happens_before
    seconds = time.perf_counter() - began
    instances = sum(1 for n in run.nodes if n.kind == LAUNCH)
    assert instances > 30_000 and seconds < 10, (instances, seconds)
