"""Submissions and the run: how the launch order is issued.

Seed `coppeliusSubmissionSchedule`: initialize; for every checkpoint chunk
but the last, its default save then its load; the last save; the last load
with the half copies; the rotary tables and the prediction; each update (its
shared part, its AdamW, its loss-record copy); the final forward; every save
chunk; the report put back. One semaphore per submission.

Seed `coppeliusRunSubmissionSample`: the prefix; two steps; a checkpoint; two
steps; the final forward; the last checkpoint; the report put back. Every
transition a longer run makes is one of these, so a certificate over this
order covers any run. (A "step" is one invocation's updates.) Ours adds the
evaluation (a validation batch's forward and loss, after the restore in the
submissions so the seed's indices stand): the prefix; two steps; a
checkpoint; a step; an evaluation; a checkpoint; a step; two evaluations; a
step; an evaluation; the final forward; the last checkpoint; the report put
back. The seed's sample is a subsequence; every transition of a run that
evaluates (one batch or several), checkpoints, both or neither between
invocations appears; a run ends with an evaluation, then the final forward.

The host's actions between submissions are ours to state (the seed's
`Coppelius.Build.NativeHost` is not among the seeds): before it touches the
staging window the host waits for the submission issued last, so nothing it
writes can race a submission still reading, and nothing it reads can be
unwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.schedule.arena import Layout
from planner.schedule.launches import Builder, checkpoint_bytes, chunks
from planner.schedule.order import dependencies
from planner.schedule.plan import HOST_READ, HOST_WRITE, SUBMIT, WAIT, Launch, Step, Submission


def merge_ranges(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """cgPush: a range that starts where the last one ends extends it."""
    out: list[tuple[int, int]] = []
    for first, count in ranges:
        if out and out[-1][0] + out[-1][1] == first:
            out[-1] = (out[-1][0], out[-1][1] + count)
        else:
            out.append((first, count))
    return tuple(out)


@dataclass
class Schedule:
    """The submissions, with the indices the run refers to."""

    launches: list[Launch]
    submissions: list[Submission] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)

    def add(self, group: str, *marks: tuple[int, int]) -> None:
        index, ranges = len(self.submissions), merge_ranges(list(marks))
        issued = [self.launches[i] for first, count in ranges for i in range(first, first + count)]
        self.submissions.append(Submission(index, ranges, index, dependencies(issued)))
        self.groups.setdefault(group, []).append(index)


def submission_schedule(b: Builder) -> Schedule:
    m, n = b.marks, chunks(b.layout)
    s = Schedule(b.launches)
    s.add("initialize", m["initialize"])
    for c in range(n):
        s.add("default-save", m[f"default-save-chunk-{c}"])
        if c < n - 1:
            s.add("load", m[f"load-chunk-{c}"])
        else:   # the last load with the half copies
            s.add("load", m[f"load-chunk-{c}"], m["recast"])
    s.add("prediction", m["rotary"], m["prediction"])
    for k in range(b.config.run.update_pieces):
        s.add("update", m["update"], m[f"adamw-{k}"], m[f"loss-record-{k}"])
    s.add("final", m["final"])
    for c in range(n):
        s.add("save", m[f"save-chunk-{c}"])
    s.add("restore", m["restore"])
    s.add("evaluate", m["evaluate"])
    return s


@dataclass
class Host:
    """Writes the run: submit steps chained by their semaphores, and the
    host's staging traffic, each after a wait on the last submission."""

    layout: Layout
    steps: list[Step] = field(default_factory=list)
    last_submit: int | None = None
    waited: bool = True

    def submit(self, submission: int) -> None:
        after = () if self.last_submit is None else (self.last_submit,)
        self.steps.append(Step(SUBMIT, submission=submission, after=after))
        self.last_submit, self.waited = len(self.steps) - 1, False

    def _settle(self) -> None:
        if not self.waited and self.last_submit is not None:
            self.steps.append(Step(WAIT, after=(self.last_submit,)))
            self.waited = True

    def host(self, kind: str, plane: str, what: str, start: int = 0, stop: int | None = None) -> None:
        self._settle()
        window, offset = self.layout.at(plane)
        end = offset + (self.layout.sizes[plane] if stop is None else stop)
        self.steps.append(Step(kind, window=window, start=offset + start, stop=end, what=what, plane=plane))


def run_sample(b: Builder, s: Schedule) -> tuple[Step, ...]:
    lay = b.layout
    h = Host(lay)
    g = s.groups
    window = 4 * b.config.shape.tokens
    checkpoint = checkpoint_bytes(lay)

    def chunk_bytes(c: int) -> int:
        return min(lay.staging_bytes, checkpoint - c * lay.staging_bytes)

    def inputs(targets: bool) -> None:
        h.host(HOST_WRITE, "input-ids", "the step's token ids")
        if targets:
            h.host(HOST_WRITE, "input-targets", "the step's targets")

    def steps() -> None:
        for k, sub in enumerate(g["update"]):
            inputs(targets=True)
            h.submit(sub)
            h.host(HOST_READ, "result-loss-record", f"update {k}'s loss rows", k * window, (k + 1) * window)

    def gather() -> None:
        for c, sub in enumerate(g["save"]):
            h.submit(sub)
            h.host(HOST_READ, "checkpoint-window", f"checkpoint chunk {c}", 0, chunk_bytes(c))

    # the prefix: initialize, the default checkpoint out and the request's in
    h.submit(g["initialize"][0])
    for c, (save, load) in enumerate(zip(g["default-save"], g["load"])):
        h.submit(save)
        h.host(HOST_READ, "checkpoint-window", f"default checkpoint chunk {c}", 0, chunk_bytes(c))
        h.host(HOST_WRITE, "checkpoint-window", f"requested checkpoint chunk {c}", 0, chunk_bytes(c))
        h.submit(load)
    inputs(targets=False)
    h.submit(g["prediction"][0])
    h.host(HOST_READ, "result-predictions", "the prediction rows' greedy tokens")
    h.host(HOST_READ, "result-record", "the prediction rows' logits")
    def evaluation() -> None:
        inputs(targets=True)
        h.submit(g["evaluate"][0])
        h.host(HOST_READ, "result-diagnostics", "the validation loss rows", 0, window)

    steps()
    steps()
    gather()
    steps()
    evaluation()
    gather()
    steps()
    evaluation()
    evaluation()      # a validation loss over several batches
    steps()
    evaluation()
    inputs(targets=False)
    h.submit(g["final"][0])
    gather()
    h.submit(g["restore"][0])
    h.host(HOST_READ, "result-diagnostics", "the final diagnostics")
    h.host(HOST_READ, "result-record", "the final forward's last logits row", 0, 4 * b.config.shape.vocab)
    return tuple(h.steps)
