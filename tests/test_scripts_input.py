"""The GPU scripts refuse bad input on one line with status 2, before any
work and without writing anything: scripts/train_vs_reference.py,
scripts/torch_peaks.py and scripts/gpu_acceptance.sh (tile_sweep.py's
refusals: test_tile_sweep.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
train_vs_reference = pytest.importorskip("train_vs_reference")
torch_peaks = pytest.importorskip("torch_peaks")


def _refused(monkeypatch, capsys, script, name: str, arguments: list[str]) -> str:
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *arguments])
    assert script.main() == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"{name}: ")
    return err


@pytest.mark.parametrize("arguments, message", [
    (["{tmp}/curves", "0"], "steps 0: at least one update"),
    (["{tmp}/file/curves", "5"], "the output directory {tmp}/file/curves: {tmp}/file is not a directory"),
])
def test_train_vs_reference_refuses_bad_input(monkeypatch, capsys, tmp_path, arguments, message):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(train_vs_reference, "train", lambda *a: pytest.fail("trained on refused input"))
    err = _refused(monkeypatch, capsys, train_vs_reference, "train_vs_reference",
                   [a.format(tmp=tmp_path) for a in arguments])
    assert message.format(tmp=tmp_path) in err
    assert not (tmp_path / "curves").exists()


def test_torch_peaks_refuses_an_output_it_cannot_write(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch_peaks, "peak", lambda config: pytest.fail("measured for a refused output"))
    err = _refused(monkeypatch, capsys, torch_peaks, "torch_peaks", [str(tmp_path / "missing" / "peaks.json")])
    assert f"OUT {tmp_path}/missing/peaks.json: its directory does not exist" in err


def test_gpu_acceptance_refuses_an_unknown_part(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_acceptance.sh"
    run = subprocess.run(["bash", str(script), str(tmp_path / "logs"), "bnech"], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == "gpu_acceptance: no part named bnech (tests, train, sanitize, bench or all)\n"
    assert not (tmp_path / "logs").exists()
