"""Issue a certified plan: submissions in a certified order, the host's
staging traffic exactly as the plan's run states it.

The executor never invents host actions. The run the certificate covers is a
sample in which every transition a longer run makes appears; the executor
cuts it into *transitions* (the submission issued last, the host steps
between, the next submission) and, asked to issue a submission, looks up the
transition from the last one. One the sample lacks is refused: the
certificate says nothing about it. The host steps of the transition are then
carried out against the staging window, their data supplied and received by
the caller (the training loop), and the submission is issued on the device.

The device side is a `Backend`: the CUDA driver on a GPU, or the numpy
references on the CPU (the same plan, executed slowly, for tests).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol

from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, WAIT, Plan, Step

START, END = -1, -2   # the transitions' ends: before the first submission, after the last


class RunError(RuntimeError):
    """The plan cannot be run as asked (an uncertified transition, ...)."""


class Backend(Protocol):
    """What the executor needs of a device."""

    def submit(self, submission: int) -> None:
        """Issue a submission; it starts once the one issued before it completed."""

    def wait(self) -> None:
        """Block until the last submission has completed."""

    def write(self, window: str, start: int, data: bytes) -> None:
        """Host bytes into a host-mapped window."""

    def read(self, window: str, start: int, stop: int) -> bytes:
        """Host bytes out of a host-mapped window."""


@dataclass(frozen=True)
class Transition:
    """The host's steps between two submissions: first what it reads of the
    one before (`collect`: waits and reads), then what it prepares for the
    next (`prepare`: the rest)."""

    before: int                  # submission issued last (START at the beginning)
    after: int                   # submission to issue next (END after the last)
    collect: tuple[Step, ...]
    prepare: tuple[Step, ...]


def transitions(plan: Plan) -> dict[tuple[int, int], Transition]:
    """The certified run cut at its submissions. A pair that occurs twice must
    have the same host steps both times, and what the host reads after a
    submission must not depend on what comes next."""
    out: dict[tuple[int, int], Transition] = {}
    collects: dict[int, tuple[Step, ...]] = {}
    before, pending = START, []
    for step in plan.run + (Step(SUBMIT, submission=END),):
        if step.kind != SUBMIT:
            # the executor issues submissions one after another and waits for
            # the last: at least the order the run states, so which earlier
            # submission a wait names is not part of the transition
            pending.append(replace(step, after=()))
            continue
        cut = next((i for i, s in enumerate(pending) if s.kind not in (WAIT, HOST_READ)), len(pending))
        t = Transition(before, step.submission, tuple(pending[:cut]), tuple(pending[cut:]))
        if out.setdefault((before, step.submission), t) != t:
            raise RunError(f"the run goes from submission {before} to {step.submission} with different host steps")
        if collects.setdefault(before, t.collect) != t.collect:
            raise RunError(f"the host reads different results of submission {before} depending on what follows")
        before, pending = step.submission, []
    return out


Supply = Callable[[Step], bytes]          # the bytes a host write puts
Receive = Callable[[Step, bytes], None]   # what a host read got


@dataclass
class Executor:
    plan: Plan
    backend: Backend
    supply: Supply
    receive: Receive

    def __post_init__(self) -> None:
        self.transitions = transitions(self.plan)
        # what the host reads after each submission (the same whatever follows)
        self.collects = {before: t.collect for (before, _), t in self.transitions.items()}
        self.last = START
        self.collected = True

    def issue(self, submission: int) -> None:
        """Carry out the host steps from the last submission to `submission`,
        then issue it."""
        t = self.transitions.get((self.last, submission))
        if t is None:
            raise RunError(f"issuing submission {submission} after {self._name(self.last)} is a transition the "
                           f"certified run does not make")
        self.collect()
        self._carry_out(t.prepare)
        self.backend.submit(submission)
        self.last, self.collected = submission, False

    def collect(self) -> None:
        """What the host reads of the submission issued last (once)."""
        if self.collected:
            return
        self._carry_out(self.collects[self.last])
        self.collected = True

    def finish(self) -> None:
        """Close the run: the reads after the last submission; nothing may follow."""
        if (self.last, END) not in self.transitions:
            raise RunError(f"the certified run does not end after {self._name(self.last)}")
        self.collect()
        self._carry_out(self.transitions[(self.last, END)].prepare)
        self.backend.wait()

    def _carry_out(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            if step.kind == WAIT:
                self.backend.wait()
            elif step.kind == HOST_WRITE:
                data = self.supply(step)
                if len(data) != step.stop - step.start:
                    raise RunError(f"host write '{step.what}' needs {step.stop - step.start} bytes, got {len(data)}")
                self.backend.write(step.window, step.start, data)
            elif step.kind == HOST_READ:
                self.receive(step, self.backend.read(step.window, step.start, step.stop))

    def _name(self, s: int) -> str:
        return "the start" if s == START else f"submission {s}"
