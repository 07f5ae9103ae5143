"""The plans of the launches-run-twice measurement (scripts/launch_costs.py,
no GPU): each copy has its launch's parameter block and runs after it, the
launch's readers run after the copy, the doubled plan is certified, and one
whose copy may run beside its launch is refused."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from planner.certify.findings import FAIL, PASS
from planner.certify.properties import check

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
launch_costs = pytest.importorskip("launch_costs")

FAMILY = ("attention-forward", "layernorm-forward")


def _reach(waits: dict[int, tuple[int, ...]], index: int) -> set[int]:
    """The launches `index` runs after, through any chain of waits."""
    graph = nx.DiGraph((j, i) for i, after in waits.items() for j in after)
    graph.add_nodes_from(waits)
    return nx.ancestors(graph, index)


def _doubled(default_plan):
    plan, count = launch_costs.doubled(default_plan, FAMILY)
    update = default_plan.notes["submissions"]["update"][0]
    order = list(plan.submissions[update].launches())
    twins = {order[k - 1]: i for k, i in enumerate(order) if i >= len(default_plan.launches)}
    return plan, count, update, twins


def test_each_copy_runs_after_its_launch_and_before_its_readers(default_plan):
    plan, count, update, twins = _doubled(default_plan)
    family = [L.index for L in default_plan.launches if L.image.startswith(FAMILY)]
    assert len(plan.launches) - len(default_plan.launches) == len(family)
    assert count == len(twins) > 16 and set(twins) <= set(family)
    assert {default_plan.launches[i].image.split("-")[0] for i in twins} == {"attention", "layernorm"}
    before = dict(default_plan.submissions[update].waits())
    after = dict(plan.submissions[update].waits())
    for launch, twin in twins.items():
        assert plan.launches[twin].slots == plan.launches[launch].slots
        assert plan.launches[twin].image == plan.launches[launch].image
        assert launch in _reach(after, twin)
        readers = [j for j, waits in before.items() if launch in waits]
        assert readers and all(twin in _reach(after, j) for j in readers)


def test_the_doubled_plan_is_certified_and_a_copy_beside_its_launch_is_not(default_plan):
    plan, _, update, twins = _doubled(default_plan)
    outcome = check(plan, machine={})
    assert {r.verdict for r in outcome.results} == {PASS}, [r.property for r in outcome.results if r.verdict != PASS]
    # the first copy no longer waits for its launch: both write the same bytes unordered
    launch, twin = next(iter(twins.items()))
    submission = plan.submissions[update]
    after = tuple(() if i == twin else waits for i, waits in submission.waits())
    beside = replace(plan, submissions=tuple(replace(s, after=after) if s.index == update else s
                                            for s in plan.submissions))
    (result,) = check(beside, only=["ordering"]).results
    assert result.verdict == FAIL
    assert any({v.writer.launch, v.other.launch} == {launch, twin} for v in result.violations)


@pytest.mark.parametrize("argv, named", [(["--batch", "1", "no-such-image"], "no-such-image"),
                                         (["--batch", "0", "attention-forward"], "batch")])
def test_a_family_no_launch_has_or_a_bad_batch_is_refused(monkeypatch, capsys, argv, named):
    monkeypatch.setattr(sys, "argv", ["launch_costs.py", *argv])
    assert launch_costs.main() == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err


def test_a_card_that_refuses_the_plan_is_one_line_and_exit_2(monkeypatch, capsys):
    """A device that opens but refuses the plan's images (too little shared
    memory, another card) is bad input as a missing GPU is."""
    from planner.runtime.cuda import NoDevice

    def refused(*args, **kwargs):
        raise NoDevice("the device gives a block 101376 bytes of shared memory, the plan's images take more")

    monkeypatch.setattr(launch_costs, "open_gpu", lambda: object())
    monkeypatch.setattr(launch_costs, "demand_certificate", lambda plan: None)
    monkeypatch.setattr(launch_costs, "plan_step_ms", refused)
    monkeypatch.setattr(launch_costs.driver, "close_device", lambda gpu: None)
    monkeypatch.setattr(sys, "argv", ["launch_costs.py", "--batch", "1", "attention-forward"])
    assert launch_costs.main() == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "shared memory" in err
