"""Batches for a step: `batch` windows of `seq + 1` tokens from a stream.

Step i's windows start at offsets drawn from a generator seeded by (seed, i),
so a run, and a resumed run, take the same batches: training is the same
bits every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class DataError(ValueError):
    pass


@dataclass(frozen=True)
class Batches:
    tokens: np.ndarray      # the stream (uint16)
    batch: int
    seq: int
    seed: int

    def __post_init__(self) -> None:
        # a window is seq + 1 tokens (the sequence and its targets), drawn at
        # starts below len - seq - 1: at least one start takes seq + 2 tokens
        if len(self.tokens) < self.seq + 2:
            raise DataError(f"the token stream has {len(self.tokens)} tokens; windows of {self.seq + 1} "
                            f"drawn from it need at least {self.seq + 2}")

    def __call__(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, targets) for `step`, each [batch][seq], int32."""
        rng = np.random.Generator(np.random.PCG64([self.seed, step]))
        starts = rng.integers(0, len(self.tokens) - self.seq - 1, size=self.batch)
        windows = np.stack([self.tokens[s:s + self.seq + 1] for s in starts]).astype(np.int32)
        return windows[:, :-1], windows[:, 1:]

