"""Shared fixtures: the default plan and a small plan, built once per run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner.model.config import DEFAULT, Shape
from planner.schedule import build_plan

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
# A small shape every test can afford: 2 layers, width 256, 4 sequences of 256.
SMALL = replace(DEFAULT, shape=Shape(layers=2, width=256, heads=4, kv_heads=4, ffn=512, vocab=512, seq=256,
                                     batch=4),
                run=replace(DEFAULT.run, staging_bytes=1 << 20, prediction_rows=(0, -1)))


@pytest.fixture
def driver_calls(monkeypatch) -> list[str]:
    """The GPU device without a GPU: its driver calls recorded by name (the
    free memory asked for is plenty) and each image's cubin its name and
    card, so that a test sees how far the device got before it refused."""
    from planner.runtime import cuda
    calls: list[str] = []

    def call(name, *args):
        calls.append(name)
        return (1 << 40, 1 << 40) if name == "cuMemGetInfo" else None

    monkeypatch.setattr(cuda, "call", call)
    monkeypatch.setattr(cuda, "compile_image", lambda img, arch: f"{img.name}@{arch}".encode())
    return calls


@pytest.fixture(scope="session")
def default_plan():
    return build_plan(DEFAULT)


@pytest.fixture(scope="session")
def small_plan():
    return build_plan(SMALL)


def seed_text(name: str) -> str:
    matches = sorted(SEEDS.glob(f"{name}_*.txt"))
    if not matches:
        pytest.skip(f"seed {name} is not beside the repository")
    return matches[0].read_text()
