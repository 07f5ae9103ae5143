"""What each launch of a submission waits for: the earlier launches it
shares a byte with (one writing), none that follows from another, at most
`WIDTH` side by side; and the certificate refusing an order that leaves
one out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.certify.properties import check
from planner.kernels.manifest import READ, READ_WRITE, WRITE
from planner.schedule.graph import RunGraph
from planner.schedule.launches import forward_shares
from planner.schedule.order import WIDTH, dependencies, follows
from planner.schedule.plan import Access, Launch
from planner.schedule.urgency import depth
from tests.conftest import SMALL
from tests.plans import Builder


def _launches():
    b = Builder()
    x, y, z = b.plane("x", 0, 64), b.plane("y", 64, 64), b.plane("z", 128, 64)
    ph = b.phase("p", ["x", "y", "z"])
    make_x = b.launch("fill", ph, 16, out=x)                       # 0
    x_to_y = b.launch("copy", ph, 16, out=y, **{"in": x})          # 1: reads what 0 wrote
    make_z = b.launch("fill", ph, 16, out=z)                       # 2: touches nothing of 0, 1
    x_to_z = b.launch("copy", ph, 4, out=z, **{"in": x})           # 3: reads x beside 1, writes z after 2
    again_x = b.launch("fill", ph, 16, out=x)                      # 4: writes x that 1 and 3 read
    return b, [make_x, x_to_y, make_z, x_to_z, again_x]


def test_each_launch_waits_for_what_it_shares_a_byte_with():
    b, order = _launches()
    after = dependencies([b.launches[i] for i in order])
    assert after == (
        (),          # the first waits for nothing
        (0,),        # a read after a write
        (),          # beside both
        (0, 2),      # after the write it reads and the write it overwrites; two reads of x side by side
        (1, 3),      # a write after two reads (the write before them follows from either)
    )


def test_at_most_width_launches_side_by_side():
    b = Builder()
    planes = [b.plane(f"x{k}", 16 * k, 16) for k in range(WIDTH + 3)]
    ph = b.phase("p", [p.name for p in planes])
    fills = [b.launch("fill", ph, 4, out=p) for p in planes]
    after = dependencies([b.launches[i] for i in fills])
    assert after[:WIDTH] == ((),) * WIDTH
    # each later fill follows the earliest launch nothing waited for
    assert after[WIDTH:] == ((0,), (1,), (2,))


def _first_update(plan) -> tuple[RunGraph, dict[int, int]]:
    """The run graph, and each launch of the run's first update: its node."""
    update = plan.submissions[plan.notes["submissions"]["update"][0]]
    run = RunGraph(plan)
    first = next(k for k, s in enumerate(plan.run) if s.kind == "submit" and s.submission == update.index)
    return run, {run.nodes[n].launch: n for n in range(run.instances[first][0], run.instances[first][1])
                 if run.nodes[n].launch >= 0}


def test_the_default_update_runs_launches_side_by_side(default_plan):
    plan = default_plan
    run, nodes = _first_update(plan)
    hb = run.happens_before
    images = {i: plan.launches[i].image for i in nodes}
    # a layer's weight gradient and its data gradient run side by side
    weight = next(i for i in nodes if images[i].startswith("tiled-cc"))
    data = next(i for i in nodes if images[i].startswith("tiled-rc") and i > weight - 3 and i < weight + 3)
    assert not hb.ordered(nodes[weight], nodes[data])
    # chains are reused: about the launches side by side, not all there were
    assert run.chains < 2 * WIDTH


def test_the_forwards_shares_run_side_by_side_and_join_at_the_output(small_plan):
    """Four sequences a step: each layer's forward in two shares, each
    share's launches after its own share's alone (a share's attention
    neither before nor after the other's), and the output's layer norm,
    which reads every row, after both."""
    plan = small_plan
    assert forward_shares(SMALL.shape.batch) == 2
    run, nodes = _first_update(plan)
    hb = run.happens_before
    forward = [i for i in sorted(nodes) if plan.launches[i].image == "attention-forward"]
    assert len(forward) == 2 * SMALL.shape.layers
    for a, b in zip(forward[::2], forward[1::2]):   # each layer's two shares
        assert not hb.ordered(nodes[a], nodes[b])
    output = next(i for i in sorted(nodes) if plan.launches[i].phase == "coppelius/output")
    assert plan.launches[output].image == "layernorm-forward"
    assert all(hb.before(nodes[i], nodes[output]) for i in forward[-2:])


def test_depth_is_the_longest_chain_of_dependencies(default_plan):
    import networkx as nx
    update = default_plan.submissions[default_plan.notes["submissions"]["update"][0]]
    g = nx.DiGraph()
    g.add_nodes_from(update.launches())
    g.add_edges_from((a, index) for index, after in update.waits() for a in after)
    assert depth(update) == nx.dag_longest_path_length(g) + 1 < g.number_of_nodes()


def test_an_order_without_a_needed_dependency_is_refused():
    b, order = _launches()
    b.submit(b.submission(order, list(dependencies([b.launches[i] for i in order]))))
    good = b.build()
    assert check(good, only=["ordering"]).results[0].answer == "unsat"
    # launch 1 no longer waits for the fill of x it reads
    s = good.submissions[0]
    broken = replace(good, submissions=(replace(s, after=s.after[:1] + ((),) + s.after[2:]),))
    (r,) = check(broken, only=["ordering"]).results
    assert r.answer == "sat"
    v = r.violations[0]
    assert {v.writer.launch, v.other.launch} == {0, 1} and v.path_ordered is False


def _every_pair(launches):
    """The definition, pair by pair: the earlier launches each one clashes
    with (an access sharing a byte with one of its own, one of the two
    writing)."""
    windows: dict[str, int] = {}
    rows = [(k, windows.setdefault(a.window, len(windows)), a.start, a.stop, a.writes)
            for k, launch in enumerate(launches) for a in launch.accesses if a.start < a.stop]
    table = np.array([r[:4] for r in rows], np.int64).reshape(-1, 4)
    writes = np.array([r[4] for r in rows], bool)
    first = np.searchsorted(table[:, 0], np.arange(len(launches) + 1))
    out = []
    for k in range(len(launches)):
        earlier, mine = slice(0, first[k]), slice(first[k], first[k + 1])
        clash = ((table[earlier, None, 1] == table[None, mine, 1])
                 & (table[earlier, None, 2] < table[None, mine, 3]) & (table[None, mine, 2] < table[earlier, None, 3])
                 & (writes[earlier, None] | writes[None, mine]))
        out.append(set(np.unique(table[earlier, 0][clash.any(axis=1)]).tolist()))
    return out


_access = st.tuples(st.sampled_from(("arena", "staging")), st.integers(0, 60), st.integers(0, 12),
                    st.sampled_from((READ, WRITE, READ_WRITE)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_access, max_size=4), max_size=70))
def test_the_last_writers_and_readers_since_give_the_pairwise_order(shapes):
    """Following each byte's last writer (and, writing, its readers since)
    gives what following every earlier clash gives: overlapping, nested and
    empty ranges, reads and writes in one launch, two windows, and more
    launches side by side than WIDTH."""
    launches = [Launch(k, "fill", "p", (1, 1, 1), 32, (),
                       tuple(Access(f"a{n}", mode, window, start, start + size)
                             for n, (window, start, size, mode) in enumerate(accesses)))
                for k, accesses in enumerate(shapes)]
    assert dependencies(launches) == follows(launches, _every_pair(launches))


def test_the_default_plans_order_is_the_pairwise_order(default_plan):
    for s in default_plan.submissions:
        launches = [default_plan.launches[i] for i in s.launches()]
        assert dependencies(launches) == follows(launches, _every_pair(launches)) == s.after
