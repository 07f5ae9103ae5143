"""Shared fixtures: the default plan and a small plan, built once per run;
random shapes for property tests; the small configuration as a file, and the
check of a command's refusal (one line, exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import strategies as st

from planner import cli
from planner.model.config import DEFAULT, Shape, to_dict
from planner.schedule import build_plan

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
# A small shape every test can afford: 2 layers, width 256, 4 sequences of 256.
SMALL = replace(DEFAULT, shape=Shape(layers=2, width=256, heads=4, kv_heads=4, ffn=512, vocab=512, seq=256,
                                     batch=4),
                run=replace(DEFAULT.run, staging_bytes=1 << 20, prediction_rows=(0, -1)))


@st.composite
def shapes(draw, heads=(1, 2, 4, 8), layers: int = 3, ffn: int = 12, vocab: int = 8, seqs=(1, 2, 4, 8),
           batch: int = 4) -> Shape:
    """Shapes the configuration takes (64-wide heads, grouped K/V heads,
    whole tiles): up to `layers` layers, ffn up to `ffn` tiles of 64, vocab
    up to `vocab` tiles of 256, sequences of `seqs` tiles of 64, up to
    `batch` of them."""
    h = draw(st.sampled_from(heads))
    return Shape(layers=draw(st.integers(1, layers)), width=64 * h, heads=h,
                 kv_heads=draw(st.sampled_from([k for k in heads if h % k == 0])),
                 ffn=64 * draw(st.integers(1, ffn)), vocab=256 * draw(st.integers(1, vocab)),
                 seq=64 * draw(st.sampled_from(seqs)), batch=draw(st.integers(1, batch)))


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


@pytest.fixture
def small_config(tmp_path) -> Path:
    """The small configuration as a file."""
    config = tmp_path / "small.json"
    config.write_text(json.dumps(to_dict(SMALL)))
    return config


def refused(capsys, tmp_path, argv: list[str], message: str) -> None:
    """`planner argv` (each "{tmp}" standing for tmp_path) exits 2 with one
    line on standard error, which begins with `message` ("{tmp}" too)."""
    fill = lambda text: text.replace("{tmp}", str(tmp_path))
    assert cli.main([fill(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(fill(message)) and err.count("\n") == 1
