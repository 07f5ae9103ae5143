"""`planner bench`'s arguments: each bad one refused before the GPU is asked
for (and minutes of timing spent), with exit status 2, nothing written."""

from __future__ import annotations

import json
import sys

import pytest

from planner.bench import batches_argument
from planner.cli import main


def test_batches_are_positive_integers():
    assert batches_argument("1,8") == (1, 8)
    assert batches_argument("3") == (3,)


@pytest.mark.parametrize("args, named", [
    (["--batches", "x"], "argument --batches: 'x' is not a comma-separated list of positive integers"),
    (["--batches", "1,"], "argument --batches: '1,' is not"),
    (["--batches", "0,8"], "argument --batches: '0,8' is not"),
    (["--anchors", "eager,fast"], "argument --anchors: 'fast' is not a setup the bench times"),
])
def test_a_bad_argument_is_named(capsys, args, named):
    with pytest.raises(SystemExit) as exit:
        main(["bench", *args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert named in err.splitlines()[-1] and "Traceback" not in err


def test_a_json_file_nowhere_is_refused_first(tmp_path, capsys):
    target = tmp_path / "missing" / "bench.json"
    assert main(["bench", "--batches", "1", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"planner bench: --json {target}: its directory does not exist\n"
    assert not target.parent.exists()


def test_without_pytorch_the_bench_is_refused_first(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    assert main(["bench", "--batches", "1"]) == 2
    assert capsys.readouterr().err == "planner bench: needs PyTorch (pip install torch)\n"


def test_a_bad_configuration_is_refused_first(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text('{"shape": {"seq": 1000}}')
    assert main(["bench", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planner bench: shape.seq = 1000: must be a multiple of 64") and err.count("\n") == 1



def test_the_measurements_are_written_whole(tmp_path, monkeypatch, capsys):
    # the GPU's parts replaced by fixed figures: what is left is the bench's
    # own work, the table and the JSON from the rows it gathers
    import numpy as np

    import planner.certify
    import planner.runtime.cuda
    from planner import bench
    monkeypatch.setattr(planner.runtime.cuda, "open_gpu", lambda: object())
    monkeypatch.setattr(planner.certify, "demand_certificate", lambda plan: None)
    monkeypatch.setattr(bench, "plan_step_ms", lambda plan, gpu, certificate: (
        2.1, 2.0, [9.5, 9.4, 9.3, 9.2], np.zeros(1), {"attention-forward": (16, 160.0, 16.0)}))
    product = {"tile": 57, "us": 10.0, "torch_us": 7.0, "ratio": 0.7, "same_us": 7.0, "same_ratio": 0.7}
    monkeypatch.setattr(bench, "products_vs_matmul", lambda plan, kernels: {"tiled-x": product})
    monkeypatch.setattr(bench, "attention_vs_sdpa", lambda config, gpu: {
        "attention_us": 20.0, "sdpa_us": 60.0, "output_difference": 1e-4})
    anchors = {"eager": 40.0, "compile+graph": 4.0}
    monkeypatch.setattr(bench, "torch_step_ms", lambda config, parameters, setup: anchors[setup])
    target = tmp_path / "bench.json"
    assert main(["bench", "--batches", "1", "--anchors", "eager,compile+graph", "--json", str(target)]) == 0
    rows = json.loads(target.read_text())
    assert [(r["batch"], r["plan_events_ms"], r["torch_eager_ms"], r["torch_compile+graph_ms"]) for r in rows] == [
        (1, 2.0, 40.0, 4.0)]
    assert rows[0]["plan_losses"] == [9.5, 9.4, 9.3] and rows[0]["products"] == {"tiled-x": product}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    out = capsys.readouterr().out
    assert "1 of 1 at 0.7x of torch.matmul or more" in out and "4.00 ( 0.50x)" in out
