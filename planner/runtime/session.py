"""A training session over a certified plan: the host's side of the run,
with real data.

The session walks the run's shape — the prefix (initialise, the default
checkpoint out and the requested one in, the prediction), updates in
invocations of `update_pieces`, checkpoints between invocations, the final
forward, the last checkpoint, the report put back — through the `Executor`,
which refuses any transition the certified run does not make. It supplies the
host's writes (token ids, targets, checkpoint chunks) and keeps its reads
(loss rows, checkpoint chunks, predictions, the report). The only scalars it
changes are those the manifests declare per step (AdamW's moment-corrected
step size and epsilon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from planner.model import float32 as f32
from planner.model.config import Config, from_dict
from planner.runtime.executor import Backend, Executor, RunError
from planner.schedule.plan import Plan, Step


class Device(Backend, Protocol):
    def patch(self, launch: int, scalars: dict[str, int]) -> None:
        """Rewrite per-step scalar slots of one launch's parameter block."""


@dataclass
class Report:
    """What the host reads back at the end of a run."""

    diagnostics: np.ndarray    # the loss block's windows, [4][tokens]
    last_logits: np.ndarray    # the final forward's last row


class Session:
    def __init__(self, plan: Plan, device: Device):
        self.plan, self.device = plan, device
        self.config: Config = from_dict(plan.config)
        self.groups: dict[str, list[int]] = plan.notes["submissions"]
        stretches = plan.notes["stretches"]
        # each update piece's AdamW launches (a launch per piece of the bank)
        self.adamw = [range(first, first + count) for first, count in
                      (stretches[f"adamw-{k}"] for k in range(self.config.run.update_pieces))]
        self.executor = Executor(plan, device, self._supply, self._receive)
        self.step = 0                          # updates done
        self.inputs: dict[str, bytes] = {}     # plane -> what the host writes there next
        self.results: dict[str, bytes] = {}    # plane -> what the host read there last
        self.chunks: list[bytes] = []          # checkpoint chunks read, in order
        self.patched = -1                      # the update whose AdamW words the launches hold

    # ---- the host's data, by the staging plane a step names ----

    def _supply(self, step: Step) -> bytes:
        return self.inputs[step.plane]

    def _receive(self, step: Step, data: bytes) -> None:
        plane = step.plane
        if plane == "checkpoint-window":
            self.chunks.append(data)
        self.results[plane] = data

    def set_inputs(self, ids: np.ndarray, targets: np.ndarray | None = None) -> None:
        """What the host writes to the ids (and targets) planes next."""
        self.inputs["input-ids"] = np.ascontiguousarray(ids, "<i4").tobytes()
        if targets is not None:
            self.inputs["input-targets"] = np.ascontiguousarray(targets, "<i4").tobytes()

    # ---- the run's stretches ----

    def start(self, ids: np.ndarray, checkpoint: bytes | None = None, step: int = 0) -> np.ndarray:
        """Initialise, bring in `checkpoint` (P, M, V, taken after `step`
        updates) or keep the fresh model, and predict on `ids`; return the
        prediction rows' tokens."""
        if step % self.config.run.update_pieces:
            raise RunError("a run resumes between invocations (after a whole number of update pieces)")
        self.step, self.patched = step, -1
        size = self.plan.window["staging"].bytes
        self.executor.issue(self.groups["initialize"][0])
        for c, (save, load) in enumerate(zip(self.groups["default-save"], self.groups["load"])):
            self.executor.issue(save)
            self.executor.collect()
            fresh = self.chunks[-1]
            self.inputs["checkpoint-window"] = fresh if checkpoint is None else checkpoint[c * size:c * size + len(fresh)]
            self.executor.issue(load)
        self.chunks.clear()
        self.set_inputs(ids)
        self.executor.issue(self.groups["prediction"][0])
        self.executor.collect()
        return np.frombuffer(self.results["result-predictions"], "<u4").copy()

    def update(self, ids: np.ndarray, targets: np.ndarray, issued: Callable[[], None] | None = None) -> float:
        """One update on a batch; returns its mean loss. `issued` is called
        once the update is issued, before the host waits for it (a
        benchmark's mark)."""
        k = self.step % self.config.run.update_pieces
        if self.patched != self.step:
            self._patch_adamw(self.step)
        self.set_inputs(ids, targets)
        self.executor.issue(self.groups["update"][k])
        if issued is not None:
            issued()
        # The exact AdamW words take the host a fraction of a millisecond:
        # the next update's go into its AdamW launches while the device runs
        # this one, when those launches are another submission's.
        if (self.step + 1) % self.config.run.update_pieces != k:
            self._patch_adamw(self.step + 1)
        self.executor.collect()
        self.step += 1
        return float(np.frombuffer(self.results["result-loss-record"], "<f4").astype(np.float64).mean())

    def _patch_adamw(self, step: int) -> None:
        """AdamW's per-step words for the update after `step` updates, into
        that update's AdamW launches."""
        scalars = f32.adam_words(self.config.learner, self.config.learner.first_step + step)
        for launch in self.adamw[step % self.config.run.update_pieces]:
            self.device.patch(launch, scalars)
        self.patched = step

    def evaluate(self, ids: np.ndarray, targets: np.ndarray) -> float:
        """The mean loss on a batch, without an update (between invocations)."""
        self.set_inputs(ids, targets)
        self.executor.issue(self.groups["evaluate"][0])
        self.executor.collect()
        return float(np.frombuffer(self.results["result-diagnostics"], "<f4").astype(np.float64).mean())

    def save(self) -> bytes:
        """The checkpoint (P, M, V) through the staging window; between
        invocations, or after the final forward."""
        self.chunks.clear()
        for sub in self.groups["save"]:
            self.executor.issue(sub)
            self.executor.collect()
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data

    def finish(self, ids: np.ndarray) -> tuple[Report, bytes]:
        """The final forward on `ids`, the last checkpoint, the report put back."""
        self.set_inputs(ids)
        self.executor.issue(self.groups["final"][0])
        checkpoint = self.save()
        self.executor.issue(self.groups["restore"][0])
        self.executor.finish()
        tokens = self.config.shape.tokens
        diagnostics = np.frombuffer(self.results["result-diagnostics"], "<f4").reshape(-1, tokens).copy()
        return Report(diagnostics, np.frombuffer(self.results["result-record"], "<f4").copy()), checkpoint

