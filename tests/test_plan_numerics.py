"""The plan executed on the CPU by its references, against the PyTorch model:
the whole training step, number by number, with no GPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings

from planner.data.batches import Batches
from planner.data.corpus import byte_tokens
from planner.model.config import DEFAULT, Shape
from planner.runtime.cpu import CpuDevice
from planner.runtime.session import Session
from planner.schedule import build_plan
from tests.conftest import shapes

TINY = replace(DEFAULT, shape=Shape(layers=1, width=128, heads=2, kv_heads=1, ffn=128, vocab=256, seq=64, batch=2),
               run=replace(DEFAULT.run, staging_bytes=1 << 20, prediction_rows=(0, -1), update_pieces=2))


@pytest.fixture(scope="module")
def tiny_plan():
    return build_plan(TINY)


def batches() -> Batches:
    return Batches(byte_tokens(1 << 20), TINY.shape.batch, TINY.shape.seq, seed=1)


def matches_the_reference(plan, config, data: Batches) -> None:
    """One update of `plan` on the CPU references from the first batch of
    `data`: its loss and gradients against the PyTorch model's."""
    from planner.reference.check import plan_gradients, reference_gradients, relative_errors
    session = Session(plan, CpuDevice(plan))
    ids, targets = data(0)
    session.start(ids)
    loss, grads, parameters = plan_gradients(session, ids, targets)
    ref_loss, ref_grads = reference_gradients(config, parameters, ids, targets)
    assert abs(loss - ref_loss) / ref_loss < 1e-4
    errors = relative_errors(grads, ref_grads)
    # binary16 operands: each product rounds its inputs to 11 bits
    assert max(errors.values()) < 3e-3, errors


def test_one_update_matches_the_reference(tiny_plan):
    torch = pytest.importorskip("torch")
    matches_the_reference(tiny_plan, TINY, batches())
    assert torch is not None


@settings(max_examples=6, deadline=None)
@given(shapes(heads=(1, 2, 4), layers=2, ffn=6, vocab=3, seqs=(1, 2), batch=3))  # a second each on the CPU
def test_one_update_matches_the_reference_at_any_shape(shape):
    """The placed plan of a random shape (grouped K/V heads, several layers
    and sequences), one update on the CPU references against the PyTorch
    model: every launch's offsets, extents and scalars come from the shape."""
    pytest.importorskip("torch")
    from planner.place.placement import place
    config = replace(TINY, shape=shape)
    plan = place(build_plan(config), budget_s=0.2).plan
    matches_the_reference(plan, config, Batches(byte_tokens(1 << 20) % shape.vocab, shape.batch, shape.seq, seed=1))


def test_training_runs_checkpoints_and_resumes_bit_for_bit(tiny_plan):
    """Eight updates straight equal four, a checkpoint, a new session from
    it, and four more: the same losses and the same parameters, bit for bit."""
    data = batches()
    ids0, _ = data(0)

    straight = Session(tiny_plan, CpuDevice(tiny_plan))
    straight.start(ids0)
    losses = [straight.update(*data(i)) for i in range(4)]
    validation = straight.evaluate(*data(100))
    losses += [straight.update(*data(i)) for i in range(4, 8)]
    straight.evaluate(*data(100))
    report, final = straight.finish(ids0)

    first = Session(tiny_plan, CpuDevice(tiny_plan))
    first.start(ids0)
    resumed = [first.update(*data(i)) for i in range(4)]
    assert first.evaluate(*data(100)) == validation       # evaluating changes nothing
    checkpoint = first.save()
    second = Session(tiny_plan, CpuDevice(tiny_plan))
    second.start(ids0, checkpoint=checkpoint, step=4)
    resumed += [second.update(*data(i)) for i in range(4, 8)]
    second.evaluate(*data(100))
    report2, final2 = second.finish(ids0)

    assert losses == resumed
    assert final == final2 and np.array_equal(report.diagnostics, report2.diagnostics)
    assert losses[-1] < losses[0]


def test_an_uncertified_transition_is_refused(tiny_plan):
    from planner.runtime.executor import RunError
    session = Session(tiny_plan, CpuDevice(tiny_plan))
    with pytest.raises(RunError, match="does not make"):
        session.executor.issue(session.groups["update"][0])    # nothing initialised yet
