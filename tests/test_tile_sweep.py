"""The tile sweep's choices from measured times (its --measured mode, no GPU):
a sweep of some shapes keeps the table's other rows, a half C is held to
its own error bound, a recorded tile stays unless another is clearly faster,
and an unknown shape is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
tile_sweep = pytest.importorskip("tile_sweep")

KEY = "rr-m1024-n1536-k512-rope"  # its C in the half format (by head)
TABLE = Path(__file__).resolve().parents[1] / "kernels" / "tiles.json"


def _sweep(monkeypatch, tmp_path: Path, tiles: dict[str, dict], keys: str = KEY) -> dict:
    measured = tmp_path / "tile-sweep.json"
    measured.write_text(json.dumps({"device": "NVIDIA H200", "shared_limit": 232448,
                                    "shapes": {KEY: {"torch_us": 4.6, "same_us": 4.7, "tiles": tiles}}}))
    table = tmp_path / "tiles.json"
    table.write_text(TABLE.read_text())
    monkeypatch.setattr(sys, "argv", ["tile_sweep.py", str(tmp_path / "out"), "--batches", "1", "--measured",
                                      str(measured), "--write", str(table), "--keys", keys])
    assert tile_sweep.main() == 0
    return json.loads(table.read_text())["choices"]


def test_a_sweep_of_some_shapes_keeps_the_other_rows(monkeypatch, tmp_path):
    before = json.loads(TABLE.read_text())["choices"]
    # tile 0 fastest, its error within a half C's bound but not a binary32 one's
    choices = _sweep(monkeypatch, tmp_path, {"0": {"us": 4.0, "error": 5e-4}, "40": {"us": 5.1, "error": 2e-4}})
    assert choices[KEY] == {"tile": 0, "us": 4.0, "cublas_us": 4.6, "cublas_same_us": 4.7}
    assert {k: v for k, v in choices.items() if k != KEY} == {k: v for k, v in before.items() if k != KEY}


def test_a_tile_past_the_half_bound_is_never_chosen(monkeypatch, tmp_path):
    choices = _sweep(monkeypatch, tmp_path, {"0": {"us": 4.0, "error": 2e-3}, "40": {"us": 5.1, "error": 2e-4}})
    assert choices[KEY]["tile"] == 40


def test_a_recorded_tile_stays_unless_another_beats_it_by_the_margin(monkeypatch, tmp_path):
    recorded = json.loads(TABLE.read_text())["choices"][KEY]["tile"]
    other = "40" if recorded != 40 else "38"
    near = 5.0 / tile_sweep.MARGIN * 1.01   # the recorded tile within the margin of the fastest
    choices = _sweep(monkeypatch, tmp_path, {str(recorded): {"us": 5.0, "error": 2e-4},
                                             other: {"us": near, "error": 2e-4}})
    assert choices[KEY]["tile"] == recorded
    far = 5.0 / tile_sweep.MARGIN * 0.99
    choices = _sweep(monkeypatch, tmp_path, {str(recorded): {"us": 5.0, "error": 2e-4},
                                             other: {"us": far, "error": 2e-4}})
    assert choices[KEY]["tile"] == int(other)


def test_an_unknown_shape_is_refused(monkeypatch, tmp_path):
    with pytest.raises(SystemExit, match="no product of the plans is rr-m1-n1-k1"):
        _sweep(monkeypatch, tmp_path, {"40": {"us": 5.1, "error": 2e-4}}, keys="rr-m1-n1-k1")
