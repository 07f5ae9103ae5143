"""The executor issues only what the certified run states: the run replayed
reaches the device step for step; a submission the run does not issue after
the last, an end where the run goes on, a host write of the wrong size, and a
run whose host steps between two submissions differ from one time to the
next are refused before the device sees them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.runtime.executor import Executor, RunError, transitions
from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, WAIT


class Recorder:
    """A device that only records what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def submit(self, submission: int) -> None:
        self.calls.append((SUBMIT, submission))

    def wait(self) -> None:
        self.calls.append((WAIT,))

    def write(self, window: str, start: int, data: bytes) -> None:
        self.calls.append((HOST_WRITE, window, start, len(data)))

    def read(self, window: str, start: int, stop: int) -> bytes:
        self.calls.append((HOST_READ, window, start, stop))
        return bytes(stop - start)


def executor(plan, supply=lambda step: bytes(step.stop - step.start)) -> tuple[Executor, Recorder]:
    device = Recorder()
    return Executor(plan, device, supply, lambda step, data: None), device


def expected(step) -> tuple:
    return {SUBMIT: (SUBMIT, step.submission), WAIT: (WAIT,),
            HOST_WRITE: (HOST_WRITE, step.window, step.start, step.stop - step.start),
            HOST_READ: (HOST_READ, step.window, step.start, step.stop)}[step.kind]


def submissions(plan) -> list[int]:
    return [s.submission for s in plan.run if s.kind == SUBMIT]


def test_the_run_replayed_reaches_the_device_step_for_step(small_plan):
    run, device = executor(small_plan)
    for submission in submissions(small_plan):
        run.issue(submission)
    run.finish()
    # the run's steps in order, and the final wait for the last submission
    assert device.calls == [expected(s) for s in small_plan.run] + [(WAIT,)]


def test_a_submission_the_run_does_not_issue_next_is_refused_before_the_device_sees_it(small_plan):
    first, second = submissions(small_plan)[:2]
    run, device = executor(small_plan)
    with pytest.raises(RunError, match=f"issuing submission {second} after the start is a transition the "
                                       "certified run does not make"):
        run.issue(second)
    assert device.calls == []
    run.issue(first)
    with pytest.raises(RunError, match=f"issuing submission {first} after submission {first}"):
        run.issue(first)
    assert device.calls == [(SUBMIT, first)]


def test_an_end_where_the_run_goes_on_is_refused(small_plan):
    run, device = executor(small_plan)
    run.issue(submissions(small_plan)[0])
    with pytest.raises(RunError, match=f"the certified run does not end after submission "
                                       f"{submissions(small_plan)[0]}"):
        run.finish()
    assert device.calls == [(SUBMIT, submissions(small_plan)[0])]


def test_a_host_write_of_the_wrong_size_is_refused_and_the_submission_not_issued(small_plan):
    write = next(i for i, s in enumerate(small_plan.run) if s.kind == HOST_WRITE)
    step = small_plan.run[write]
    run, device = executor(small_plan, supply=lambda s: bytes(s.stop - s.start - 1))
    with pytest.raises(RunError, match=f"host write '{step.what}' needs {step.stop - step.start} bytes, "
                                       f"got {step.stop - step.start - 1}"):
        for submission in submissions(small_plan):
            run.issue(submission)
    issued = [c for c in device.calls if c[0] == SUBMIT]
    following = next(s.submission for s in small_plan.run[write:] if s.kind == SUBMIT)
    assert (SUBMIT, following) not in issued and not any(c[0] == HOST_WRITE for c in device.calls)


def _cuts(run) -> list[tuple[int, int, int]]:
    """(submission before, submission after, index of the second submit) for each pair of submissions in the run."""
    at = [i for i, s in enumerate(run) if s.kind == SUBMIT]
    return [(run[a].submission, run[b].submission, b) for a, b in zip(at, at[1:])]


def test_a_run_whose_host_steps_between_two_submissions_differ_is_refused(small_plan):
    transitions(small_plan)   # the plan as built passes
    seen: dict[tuple[int, int], int] = {}
    again = next(b for before, after, b in _cuts(small_plan.run)
                 if seen.setdefault((before, after), b) != b and small_plan.run[b - 1].kind == HOST_WRITE)
    run = small_plan.run[:again - 1] + small_plan.run[again:]     # one host write fewer, the second time
    before = next(b for b, a, at in _cuts(small_plan.run) if at == again)
    with pytest.raises(RunError, match=f"the run goes from submission {before} to "
                                       f"{small_plan.run[again].submission} with different host steps"):
        transitions(replace(small_plan, run=run))


def test_a_run_whose_reads_after_a_submission_depend_on_the_next_is_refused(small_plan):
    cuts = _cuts(small_plan.run)
    follows: dict[int, set[int]] = {}
    for before, after, _ in cuts:
        follows.setdefault(before, set()).add(after)
    # a submission the run follows with others too, here (once) after a read of its results
    once = [(before, after, b) for before, after, b in cuts
            if len(follows[before]) > 1 and [c[:2] for c in cuts].count((before, after)) == 1
            and any(s.kind == HOST_READ for s in small_plan.run[b - 3:b])]
    before, _, cut = once[0]
    read = max(i for i in range(cut - 3, cut) if small_plan.run[i].kind == HOST_READ)
    bad = replace(small_plan, run=small_plan.run[:read] + small_plan.run[read + 1:])
    with pytest.raises(RunError, match=f"the host reads different results of submission {before} depending on "
                                       "what follows"):
        transitions(bad)
