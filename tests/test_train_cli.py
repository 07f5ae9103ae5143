"""`planner train` end to end on the CPU references (a tiny shape): the
files it writes, resuming bit for bit, and every bad input refused with one
line, exit status 2 and nothing written."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from planner.cli import main
from planner.data.shards import write_shard

TINY = {"shape": {"layers": 1, "width": 128, "heads": 2, "kv_heads": 2, "ffn": 128, "vocab": 512, "seq": 64,
                  "batch": 2},
        "run": {"staging_bytes": 1048576, "prediction_rows": [0, -1], "update_pieces": 2}}


@pytest.fixture
def tiny(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    # a learnable stream: a repeating pattern with a little noise
    tokens = (np.arange(40000) * 7 % 97 + rng.integers(0, 3, 40000)).astype(np.uint16)
    write_shard(data / "train_000000.bin", tokens[:36000])
    write_shard(data / "val_000000.bin", tokens[36000:])
    return config, data


def train(config, data, out, *extra) -> int:
    # the seed's hand placement does not hold at this shape (its scratch is
    # smaller than the backward's planes): the placed layout does
    return main(["train", "--config", str(config), "--data", str(data), "--out", str(out), "--device", "cpu",
                 "--quiet", "--layout", "placed", *extra])


def test_an_uncertified_plan_is_refused_before_anything_runs(tiny, tmp_path, capsys):
    config, data = tiny
    assert main(["train", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--device", "cpu", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "is not certified" in err and "--layout placed" in err
    assert not (tmp_path / "run").exists()


def test_a_card_whose_machine_code_is_not_attested_is_refused(tiny, tmp_path, capsys, monkeypatch, driver_calls):
    """The certificate attests sm_86's and sm_90's cubins: on another card
    the device refuses the first image before anything is loaded."""
    from planner.runtime import cuda
    from planner.runtime.driver import Device
    config, data = tiny
    monkeypatch.setattr(cuda, "open_gpu", lambda: Device(0, None, None, "sm_80", "an older card", 163 * 1024))
    monkeypatch.setattr(cuda.driver, "load_kernel", lambda *args: pytest.fail("a kernel was loaded"))
    assert main(["train", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--quiet", "--layout", "placed"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("planner train: refused: image ") and "sm_80 cubin" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_train_writes_checkpoint_metrics_and_plot(tiny, tmp_path, capsys):
    config, data = tiny
    assert train(config, data, tmp_path / "run", "--steps", "6", "--validate-every", "2") == 0
    out = capsys.readouterr().out
    assert "certified" in out and "validation loss" in out
    lines = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines if "loss" in l] == [1, 2, 3, 4, 5, 6]
    assert [l["step"] for l in lines if "validation_loss" in l] == [2, 4, 6]   # every 2 updates; the last at the end
    assert (tmp_path / "run" / "checkpoint.safetensors").stat().st_size > 0
    assert (tmp_path / "run" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_validation_loss_is_the_mean_over_the_same_batches_each_time(tiny, tmp_path, monkeypatch):
    from planner.runtime.session import Session
    config, data = tiny
    seen, evaluate = [], Session.evaluate

    def watched(self, ids, targets):
        seen.append(ids.copy())
        return evaluate(self, ids, targets)
    monkeypatch.setattr(Session, "evaluate", watched)
    assert train(config, data, tmp_path / "run", "--steps", "4", "--validate-every", "2",
                 "--validation-batches", "3") == 0
    assert len(seen) == 6 and all(np.array_equal(a, b) for a, b in zip(seen[:3], seen[3:]))
    assert not any(np.array_equal(seen[0], b) for b in seen[1:3])
    lines = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first, last = [l["validation_loss"] for l in lines if "validation_loss" in l]
    assert first != last


def resume_bit_for_bit(config, data, tmp_path) -> None:
    """Four updates straight (`straight`), and two (`half`) then two more
    resumed from its checkpoint (`resumed`): the same checkpoint, bit for bit."""
    from safetensors.numpy import load_file
    assert train(config, data, tmp_path / "straight", "--steps", "4") == 0
    assert train(config, data, tmp_path / "half", "--steps", "2") == 0
    assert train(config, data, tmp_path / "resumed", "--steps", "2",
                 "--resume", str(tmp_path / "half" / "checkpoint.safetensors")) == 0
    a = load_file(tmp_path / "straight" / "checkpoint.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoint.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_resume_is_bit_identical(tiny, tmp_path):
    config, data = tiny
    resume_bit_for_bit(config, data, tmp_path)
    losses = lambda d: [json.loads(l)["loss"] for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()
                        if '"loss"' in l]
    assert losses("straight") == losses("half") + losses("resumed")


@pytest.mark.parametrize("args, message", [
    (["--steps", "3"], "must be a positive multiple of run.update_pieces"),
    (["--checkpoint-every", "3"], "must be a non-negative multiple"),
    (["--validation-batches", "0"], "--validation-batches 0: must be at least 1"),
    (["--data", "{tmp}/nowhere"], "no such data directory"),
    (["--data", "{tmp}/corrupt"], "odd size"),
    (["--resume", "{tmp}/missing.safetensors"], "cannot be read"),
    (["--device", "gpu"], "no NVIDIA GPU"),
    (["--out", "{tmp}/tiny.json/run"], "tiny.json is not a directory"),
])
def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path, capsys, args, message):
    config, data = tiny
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "train_000000.bin").write_bytes(b"\x01\x02\x03")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    base = ["train", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run"), "--quiet",
            "--layout", "placed"]
    if "--device" not in args:
        base += ["--device", "cpu"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_last_checkpoint_chunk_inside_the_input_plane_resumes_bit_for_bit(tiny, tmp_path):
    """Eight sequences, and a staging window that leaves a last checkpoint
    chunk of 1024 bytes: it lies inside the token ids' plane (2048 bytes),
    and is still the checkpoint's, to the certificate and to the runtime
    (each took it for the token ids, the smallest plane holding it)."""
    _, data = tiny
    config = tmp_path / "eight.json"
    config.write_text(json.dumps({"shape": TINY["shape"] | {"batch": 8},
                                  "run": TINY["run"] | {"staging_bytes": 53 * 4096}}))
    resume_bit_for_bit(config, data, tmp_path)


def test_a_checkpoint_taken_inside_an_invocation_is_refused(tiny, tmp_path, capsys):
    """Its step is not a multiple of the update pieces: planner never saves
    there, so the file is damaged, and nothing runs."""
    from planner.model.config import load as load_config
    from planner.runtime.checkpoint import Checkpoint, save
    from tests.test_checkpoint import banks
    config, data = tiny
    model = load_config(config)
    save(tmp_path / "c.safetensors", Checkpoint(model.run.update_pieces + 1, model, banks(model), ""))
    assert train(config, data, tmp_path / "run", "--steps", "2", "--resume", str(tmp_path / "c.safetensors")) == 2
    err = capsys.readouterr().err
    assert "not between invocations" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_of_another_model_is_refused(tiny, tmp_path, capsys):
    config, data = tiny
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    other = tmp_path / "other.json"
    other.write_text(json.dumps(TINY | {"shape": TINY["shape"] | {"ffn": 256}}))
    capsys.readouterr()
    assert train(other, data, tmp_path / "run2", "--steps", "2",
                 "--resume", str(tmp_path / "run" / "checkpoint.safetensors")) == 2
    assert "written for another model" in capsys.readouterr().err
    assert not (tmp_path / "run2").exists()


@pytest.mark.parametrize("every, cause", [("0", "the loss of update 3 is nan"),
                                          ("2", "the banks after update 2 are not saved: parameters/")])
def test_a_run_whose_loss_stops_being_finite_stops(tiny, tmp_path, capsys, every, cause):
    """A step size the binary16 gradients overflow under: the third loss is
    NaN. The run stops there (exit status 1), saves nothing it holds, and
    its metrics stay strict JSON; with a checkpoint due after update 2, its
    banks are found spoiled before the loss shows it."""
    _, data = tiny
    config = tmp_path / "wild.json"
    config.write_text(json.dumps(TINY | {"learner": {"learning_rate": "99/100", "loss_scale": 65536}}))
    assert train(config, data, tmp_path / "run", "--steps", "10", "--checkpoint-every", every) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"planner train: the run diverged: {cause}") and err.count("\n") == 1
    assert err.endswith("; this run saved no checkpoint\n")
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()

    def strict(constant):
        raise ValueError(constant)
    lines = [json.loads(line, parse_constant=strict) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [line["step"] for line in lines] == [1, 2]


def test_export_without_pytorch_is_refused(tiny, tmp_path, capsys, monkeypatch):
    config, data = tiny
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(tmp_path / "run" / "checkpoint.safetensors"),
                 "--out", str(tmp_path / "state.pt")]) == 2
    assert capsys.readouterr().err == "planner export: needs PyTorch (pip install torch)\n"
    assert not (tmp_path / "state.pt").exists()


def test_export_to_where_no_file_can_go_is_refused(tiny, tmp_path, capsys):
    config, data = tiny
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    for out, problem in ((tmp_path / "nowhere" / "state.pt", "its directory does not exist"),
                         (tmp_path / "run", "is a directory")):
        capsys.readouterr()
        assert main(["export", "--checkpoint", str(tmp_path / "run" / "checkpoint.safetensors"),
                     "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"planner export: --out {out}: {problem}\n"


def test_export_loads_into_the_reference(tiny, tmp_path):
    torch = pytest.importorskip("torch")
    config, data = tiny
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    assert main(["export", "--checkpoint", str(tmp_path / "run" / "checkpoint.safetensors"),
                 "--out", str(tmp_path / "model.pt")]) == 0
    state = torch.load(tmp_path / "model.pt")
    from planner.model.config import from_dict
    from planner.reference.model import Coppelius
    model = Coppelius(from_dict(TINY), state)
    ids = torch.randint(0, 512, (1, 64))
    assert torch.isfinite(model(ids, ids)).item()


def tokenizers(directory) -> None:
    """tokenizer-512.json, tokenizer-1024.json and another-512.json (other texts) in `directory`."""
    from planner.data import tokenizer as tok
    texts = ["def main():\n    return 0\n" * 50, "class A:\n    pass\n" * 50, bytes(range(256)).decode("latin-1")]
    for vocab in (512, 1024):
        tok.train(texts, vocab).save(str(directory / f"tokenizer-{vocab}.json"))
    tok.train(texts[2:] + ["while True:\n    break\n" * 50], 512).save(str(directory / "another-512.json"))


def test_sample_continues_a_prompt_and_refuses_what_cannot_serve(tiny, tmp_path, capsys):
    """The checkpoint records the tokenizer its data came with: sample
    takes that one and refuses another."""
    pytest.importorskip("torch")
    config, data = tiny
    tokenizers(tmp_path)
    (data / "tokenizer.json").write_bytes((tmp_path / "tokenizer-512.json").read_bytes())
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    (tmp_path / "not.json").write_text('{"model": 1}')

    def sample(*extra):
        capsys.readouterr()
        return main(["sample", "--checkpoint", str(tmp_path / "run" / "checkpoint.safetensors"),
                     "--prompt", "def main", *extra])

    assert sample("--tokenizer", str(tmp_path / "tokenizer-512.json"), "--tokens", "5") == 0
    assert capsys.readouterr().out.startswith("def main")
    for extra, message in ((["--tokenizer", str(tmp_path / "tokenizer-1024.json")],
                            "tokens do not fit the model's vocabulary (512)"),
                           (["--tokenizer", str(tmp_path / "not.json")], "not a tokenizers JSON file"),
                           (["--tokenizer", str(tmp_path / "another-512.json")],
                            "not the one the checkpoint's training data was prepared with"),
                           (["--tokenizer", str(tmp_path / "none.json")], "no such file"),
                           (["--tokens", "0"], "--tokens 0: must be positive")):
        assert sample(*extra) == 2
        err = capsys.readouterr().err
        assert err.startswith("planner sample: ") and message in err and err.count("\n") == 1


def test_resuming_on_tokens_of_another_tokenizer_is_refused(tiny, tmp_path, capsys):
    config, data = tiny
    tokenizers(tmp_path)
    (data / "tokenizer.json").write_bytes((tmp_path / "tokenizer-512.json").read_bytes())
    assert train(config, data, tmp_path / "run", "--steps", "2") == 0
    (data / "tokenizer.json").write_bytes((tmp_path / "another-512.json").read_bytes())
    capsys.readouterr()
    assert train(config, data, tmp_path / "more", "--steps", "2",
                 "--resume", str(tmp_path / "run" / "checkpoint.safetensors")) == 2
    err = capsys.readouterr().err
    assert f"trained on tokens of another tokenizer than {data}'s" in err and err.count("\n") == 1
    assert not (tmp_path / "more").exists()


def test_ctrl_c_finishes_the_invocation_saves_and_exits(tiny, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    config, data = tiny
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "planner.cli", "train", "--config", str(config), "--data",
                              str(data), "--out", str(out), "--device", "cpu", "--quiet", "--layout", "placed",
                              "--steps", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(__file__)))
    for line in child.stdout:
        if line.startswith("step"):
            break
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    rest, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "interrupted: checkpoint after update" in rest
    from planner.runtime.checkpoint import load
    from planner.model.config import from_dict
    saved = load(out / "checkpoint.safetensors", from_dict(TINY))
    assert saved.step % 2 == 0 and 0 < saved.step < 2000
