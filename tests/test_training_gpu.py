"""The plan on the GPU against the reference: one update number by number,
bit-identical training run to run and with launches side by side or one by
one, and the graphs the certified dependencies. Skipped where there is no
GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.data.batches import Batches
from planner.data.corpus import byte_tokens
from planner.model.config import DEFAULT, from_dict
from planner.schedule import build_plan

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    from planner.runtime.cuda import NoDevice, open_gpu
    try:
        return open_gpu()
    except NoDevice as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def plan():
    return build_plan(DEFAULT)


def batches(batch: int) -> Batches:
    """The tests' batches of `batch` sequences (data seed 1)."""
    return Batches(byte_tokens(4 << 20), batch, DEFAULT.shape.seq, 1)


# two sequences a step: the layers' forward in two shares, a sequence each
TWO = replace(DEFAULT, shape=replace(DEFAULT.shape, batch=2))


def plan_for(plan, config):
    """The module's plan at the default shape; one built for another."""
    return plan if config is DEFAULT else build_plan(config)


@pytest.mark.parametrize("config", [DEFAULT, TWO], ids=["one-sequence", "two-shares"])
def test_one_update_matches_the_reference(gpu, plan, config):
    torch = pytest.importorskip("torch")
    from planner.reference.check import plan_gradients, reference_gradients, relative_errors
    from planner.runtime.cuda import CudaDevice
    from planner.runtime.session import Session
    from planner.schedule.launches import forward_shares
    assert forward_shares(config.shape.batch) == config.shape.batch
    plan = plan_for(plan, config)
    device = CudaDevice(plan, gpu, graphs=False)
    try:
        session = Session(plan, device)
        ids, targets = batches(config.shape.batch)(0)
        session.start(ids)
        loss, grads, parameters = plan_gradients(session, ids, targets)
    finally:
        device.close()
    ref_loss, ref_grads = reference_gradients(config, parameters, ids, targets, device="cuda")
    errors = relative_errors(grads, ref_grads)
    print(f"\nloss: plan {loss:.6f} reference {ref_loss:.6f} relative {abs(loss - ref_loss) / ref_loss:.2e}")
    worst = sorted(errors.items(), key=lambda kv: -kv[1])[:8]
    print("largest gradient errors: " + ", ".join(f"{n} {e:.2e}" for n, e in worst))
    assert abs(loss - ref_loss) / ref_loss < 1e-3
    # binary16 operands round each product's inputs to 11 bits; through 16
    # layers the gradients stay within 1e-2 of the float64 reference
    assert max(errors.values()) < 1e-2, worst
    assert torch.cuda.is_available()


def _train(plan, gpu, steps: int, graphs: bool) -> tuple[list[float], bytes]:
    from planner.runtime.cuda import CudaDevice
    from planner.runtime.session import Session
    device = CudaDevice(plan, gpu, graphs=graphs)
    try:
        session = Session(plan, device)
        data = batches(from_dict(plan.config).shape.batch)
        session.start(data(0)[0])
        losses = [session.update(*data(i)) for i in range(steps)]
        parameters = device.read_arena(plan.plane["parameters"].offset, plan.plane["parameters"].bytes)
    finally:
        device.close()
    return losses, parameters


def test_training_is_bit_identical_run_to_run(gpu, plan):
    losses_a, params_a = _train(plan, gpu, 50, graphs=True)
    losses_b, params_b = _train(plan, gpu, 50, graphs=True)
    print(f"\nlosses after 50 updates: {losses_a[-1]:.4f}; first {losses_a[0]:.4f}")
    assert losses_a == losses_b
    assert params_a == params_b
    assert losses_a[-1] < losses_a[0]


@pytest.mark.parametrize("config", [DEFAULT, TWO], ids=["one-sequence", "two-shares"])
def test_launches_side_by_side_give_the_bits_of_launches_one_by_one(gpu, plan, config):
    """The update's graph runs launches that share no byte side by side (the
    forward's two shares among them, two sequences a step); issued one
    after another on one stream instead, they give the same losses and
    parameters bit for bit."""
    plan = plan_for(plan, config)
    side_by_side = _train(plan, gpu, 10, graphs=True)
    one_by_one = _train(plan, gpu, 10, graphs=False)
    assert side_by_side == one_by_one


def test_a_submissions_graph_has_exactly_the_plans_dependencies_and_ranks(gpu, plan):
    from cuda.bindings import driver as cu

    from planner.runtime.cuda import CudaDevice
    from planner.runtime.driver import call
    from planner.schedule.urgency import ranks
    device = CudaDevice(plan, gpu)
    try:
        update = plan.submissions[plan.notes["submissions"]["update"][0]]
        g = device._build_graph(update.index)
        launch_of = {int(node): index for index, node in g.nodes.items()}
        query = "cuGraphGetEdges_v2" if hasattr(cu, "cuGraphGetEdges_v2") else "cuGraphGetEdges"
        count = call(query, g.graph, 0)[-1]
        sources, targets, data = call(query, g.graph, count)[:3]
        edges = {(launch_of[int(a)], launch_of[int(b)]) for a, b in zip(sources, targets)}
        waits = {(a, index) for index, after in update.waits() for a in after}
        assert len(g.nodes) == sum(c for _, c in update.ranges) and edges == waits
        # programmatic exactly where the images wait for their predecessors (sm_90)
        programmatic = cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        assert {d.type == programmatic for d in data} == {device.dependent_launch}
        # each node at its launch's rank: the longest path first
        least, greatest = call("cuCtxGetStreamPriorityRange")
        rank = ranks(plan, update.index, least - greatest + 1)
        attribute = cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_PRIORITY
        assert {index: call("cuGraphKernelNodeGetAttribute", node, attribute).priority - greatest
                for index, node in g.nodes.items()} == rank
        assert len(set(rank.values())) > 1
    finally:
        device.close()


def test_a_plan_larger_than_the_device_is_refused(gpu):
    from dataclasses import replace

    from planner.runtime.cuda import CudaDevice, NoDevice
    from planner.runtime.driver import call
    total = call("cuMemGetInfo")[1]
    batch = 64
    while True:   # sequences a step enough for an arena past the device's memory
        huge = replace(DEFAULT, shape=replace(DEFAULT.shape, batch=batch),
                       run=replace(DEFAULT.run, arena_limit=1 << 44, staging_bytes=batch << 18,
                                   copy_piece_bytes=batch << 16))
        plan = build_plan(huge)
        if plan.window["arena"].bytes > total:
            break
        batch *= 2
    with pytest.raises(NoDevice, match="arena needs"):
        CudaDevice(plan, gpu)
