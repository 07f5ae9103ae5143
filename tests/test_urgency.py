"""Launch ranks: the longest path of a submission's dependencies first."""

from __future__ import annotations

import pytest

from planner.kernels.manifest import PRODUCT_FAMILIES
from planner.model.config import DEFAULT
from planner.schedule import build_plan
from planner.schedule.urgency import ranks, slack


def test_slack_is_what_a_launch_could_wait_without_lengthening_the_path():
    # 0 -> 1 -> 3 and 0 -> 2 -> 3, and 4 after 0 alone
    waits = [(0, ()), (1, (0,)), (2, (0,)), (3, (1, 2)), (4, (0,))]
    span, s = slack(waits, {0: 1.0, 1: 5.0, 2: 2.0, 3: 1.0, 4: 3.0})
    assert span == 7.0
    assert s == {0: 0.0, 1: 0.0, 2: 3.0, 3: 0.0, 4: 3.0}


@pytest.fixture(scope="module")
def update_ranks():
    plan = build_plan(DEFAULT)
    update = plan.notes["submissions"]["update"][0]
    return plan, ranks(plan, update, 6)


def test_the_backward_chain_goes_before_weight_gradients_and_adamw(update_ranks):
    plan, rank = update_ranks
    image = {index: plan.launches[index].image for index in rank}
    assert set(rank.values()) <= set(range(6)) and 0 in rank.values() and 5 in rank.values()
    bank = plan.plane["gradients"]

    # a product whose C lies in the gradient bank (the rotary product has no C: it stores by head)
    def weight_gradient(index: int) -> bool:
        c = [a for a in plan.launches[index].accesses if a.argument == "c"]
        return bool(c) and bank.offset <= c[0].start < bank.offset + bank.bytes

    products = [i for i in rank if plan.image[image[i]].family in PRODUCT_FAMILIES]
    # forward and data-gradient products carry the loss to the next layer: on the path
    assert all(rank[i] == 0 for i in products if not weight_gradient(i))
    # a layer's weight gradients (down, up and gate in one, output, qkv) and its AdamW piece have
    # slack (the next layer norm's backward, which waits for the products reading its half copy,
    # comes later on the path)
    layer_weights = [i for i in products if weight_gradient(i) and "m12288" not in image[i]]
    assert len(layer_weights) == 4 * DEFAULT.shape.layers and all(rank[i] > 0 for i in layer_weights)
    # every layer's piece of AdamW (the embedding's ends the update)
    updates = [i for i in rank if plan.image[image[i]].family == "adamw"]
    assert sum(rank[i] > 0 for i in updates) >= DEFAULT.shape.layers


def test_one_level_ranks_every_launch_alike(update_ranks):
    plan, _ = update_ranks
    update = plan.notes["submissions"]["update"][0]
    assert set(ranks(plan, update, 1).values()) == {0}
