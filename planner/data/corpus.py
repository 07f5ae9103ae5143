"""The embedded corpus: text every machine running planner already has.

The sources of the Python standard library of the interpreter running
planner, in a fixed order, as one byte stream: real text, no download. Its
bytes are the tokens (0..255) until a trained tokenizer is given.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np


def stdlib_files() -> list[Path]:
    """The standard library's .py files, sorted, tests and site-packages left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py")
                  if not {"site-packages", "test", "tests", "idlelib", "__pycache__"} & set(p.relative_to(root).parts))


def stdlib_bytes(limit: int | None = None) -> bytes:
    """The corpus as bytes (at most `limit`)."""
    out, total = [], 0
    for path in stdlib_files():
        data = path.read_bytes()
        out.append(data)
        total += len(data)
        if limit is not None and total >= limit:
            break
    return b"".join(out)[:limit]


def byte_tokens(limit: int | None = None) -> np.ndarray:
    return np.frombuffer(stdlib_bytes(limit), dtype=np.uint8).astype(np.uint16)
