"""The plan executed on the CPU: every launch by its numpy reference, over
byte arrays that stand for the arena and the staging window.

Slow, and meant for small shapes: it lets the executor, the session and the
plan's placement be tested on a machine with no GPU, against the same
references the kernels are held to.
"""

from __future__ import annotations

import struct

import numpy as np

from planner.kernels.manifest import F32 as F32_KIND
from planner.runtime.reference import DTYPES, F32, HALF, REFERENCES, float_to_half, reference
from planner.schedule.plan import Address, Plan


def _scalar(kind: str, word: int) -> float | int:
    return struct.unpack("<f", struct.pack("<I", word))[0] if kind == F32_KIND else word


class CpuDevice:
    """A `Device` for the executor: submissions run to completion when issued."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.memory = {w.name: np.zeros(w.bytes, np.uint8) for w in plan.windows}
        self.patched: dict[int, dict[str, int]] = {}
        # fill fresh memory with a pattern no kernel writes: a read of bytes
        # nothing wrote shows up as NaN
        for m in self.memory.values():
            m.view(np.uint8)[:] = 0xFF

    def patch(self, launch: int, scalars: dict[str, int]) -> None:
        self.patched.setdefault(launch, {}).update(scalars)

    def submit(self, submission: int) -> None:
        self.run_launches(self.plan.submissions[submission].launches())

    def wait(self) -> None:
        pass

    def write(self, window: str, start: int, data: bytes) -> None:
        self.memory[window][start:start + len(data)] = np.frombuffer(data, np.uint8)

    def read(self, window: str, start: int, stop: int) -> bytes:
        return self.memory[window][start:stop].tobytes()

    # ---- for tests and tools, as on the GPU ----

    def read_arena(self, start: int, size: int) -> bytes:
        return self.read("arena", start, start + size)

    def run_launches(self, indices) -> None:
        # overflow to infinity and NaN are binary32's and binary16's defined
        # results, as on the device; a run they spoil is stopped by its loss
        with np.errstate(all="ignore"):
            for index in indices:
                self.run_launch(index)

    def run_launch(self, index: int) -> None:
        launch = self.plan.launches[index]
        img = self.plan.image[launch.image]
        constants = img.constant_map
        kinds = {a.name: a.kind for a in img.arguments}
        scalars = {s.argument: _scalar(kinds[s.argument], self.patched.get(index, {}).get(s.argument, s.value))
                   for s in launch.slots if not isinstance(s.value, Address)}
        types = REFERENCES[img.family].types
        views = {}
        for a in launch.accesses:
            views[a.argument] = self.memory[a.window][a.start:a.stop].view(DTYPES[types[a.argument]])
        inputs = {a.argument: views[a.argument] for a in launch.accesses if a.reads}
        outputs = reference(img.family, constants, inputs, scalars)
        half = constants.get("half", "binary16")
        for name, value in outputs.items():
            target = views[name]
            if types[name] == HALF and value.dtype != np.uint16:
                value = float_to_half(value.astype(np.float32), half)
            elif types[name] == F32:
                value = value.astype(np.float32)
            target[:value.size] = value.reshape(-1).astype(target.dtype)
