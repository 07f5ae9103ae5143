"""Which launches of a submission the device should start first, from the
longest paths through its dependencies (and how deep those go).

The dependencies (order.py) say what a launch must wait for and leave the
device free to run the rest side by side. Launches side by side compete for
the multiprocessors, and the device hands them out as blocks finish; a
launch on the submission's longest path of dependencies should get them
first, because every microsecond it waits lengthens the submission, while a
launch with slack (it could finish later without lengthening it: a weight
gradient, a piece of AdamW) can yield. The runtime passes each launch's rank
to the device as a launch priority. Ranks decide nothing about the run's
values or its safety: the dependencies do, and the certificate decides
ordering over those alone.

A launch's cost is estimated from the plan alone: its floor on the H200
(the bytes it must move over the bandwidth, or its matrix products'
operations over the matrix rate) plus what any launch costs the device,
however small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planner.schedule.plan import Plan, Submission


@dataclass(frozen=True)
class Ceilings:
    """A device's ceilings: copy bandwidth (bytes read and written a
    second) and its matrix rate (half-format product operations a second)."""
    bandwidth: float
    matrix_rate: float


# The H200's, measured on it (bf16 products on random data): the estimate the
# plan ranks its launches by, as it is derived without a device. `planner
# bench` measures the ceilings of the device it runs on for its floors.
H200_CEILINGS = Ceilings(bandwidth=4.3e12, matrix_rate=790e12)
# The smallest launches of an update (a copy, the last AdamW piece) take
# about 1.6 us each replayed in a graph, whatever they move.
LAUNCH_US = 1.6
# Slack of this share of the longest path or more takes the lowest rank.
SLACK_SPREAD = 1 / 20


def floor_us(plan: Plan, index: int, ceilings: Ceilings) -> float:
    """A launch's floor on a device of these ceilings: the bytes it must
    move over the bandwidth (its manifest's least: a gather's rows, not the
    table it may read them from), or the operations of its matrix products
    (a tiled product's, an attention walk's) over the matrix rate,
    whichever is larger."""
    launch = plan.launches[index]
    img = plan.image[launch.image]
    least = img.least(launch.scalars())
    # a read-write argument moves its bytes twice
    moved = sum(least[a.argument] * (2 if a.reads and a.writes else 1) for a in launch.accesses)
    return max(moved / ceilings.bandwidth, img.operations / ceilings.matrix_rate) * 1e6


def slack(waits: Iterable[tuple[int, tuple[int, ...]]], cost: Mapping[int, float]) -> tuple[float, dict[int, float]]:
    """The longest path of costs through the dependencies, and each launch's
    slack: that path less the longest path through the launch. `waits`
    lists each launch after those it waits for (a submission's order)."""
    waits = list(waits)
    start: dict[int, float] = {}          # the longest path of costs before the launch
    for index, after in waits:
        start[index] = max((start[a] + cost[a] for a in after), default=0.0)
    later: dict[int, list[int]] = {index: [] for index, _ in waits}
    for index, after in waits:
        for a in after:
            later[a].append(index)
    rest: dict[int, float] = {}           # the longest path of costs from the launch on
    for index, _ in reversed(waits):
        rest[index] = cost[index] + max((rest[b] for b in later[index]), default=0.0)
    span = max(rest.values(), default=0.0)
    return span, {index: span - start[index] - rest[index] for index, _ in waits}


def depth(submission: Submission) -> int:
    """The most launches of the submission one waits for after another:
    the longest chain the device must run one at a time (the longest path
    when every launch costs one)."""
    return round(slack(submission.waits(), {index: 1 for index in submission.launches()})[0])


def ranks(plan: Plan, submission: int, levels: int) -> dict[int, int]:
    """Each launch of the submission's rank: 0 on the longest path of
    estimated costs, levels - 1 with slack of SLACK_SPREAD of that path or
    more, in even steps of slack between."""
    waits = list(plan.submissions[submission].waits())
    span, s = slack(waits, {index: floor_us(plan, index, H200_CEILINGS) + LAUNCH_US for index, _ in waits})
    step = SLACK_SPREAD * span / max(levels - 1, 1)
    return {index: min(levels - 1, round(value / step)) if step else 0 for index, value in s.items()}
