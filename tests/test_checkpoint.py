"""Checkpoints: safetensors, one tensor per entry and moment, atomic saves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest

from planner.model.config import DEFAULT, Shape
from planner.runtime.checkpoint import Checkpoint, CheckpointError, load, model_digest, save, tensors
from planner.schedule.arena import entries

TINY = replace(DEFAULT, shape=Shape(layers=1, width=128, heads=2, kv_heads=2, ffn=128, vocab=256, seq=64, batch=1),
               run=replace(DEFAULT.run, prediction_rows=(0, -1)))


def banks(config, seed=0) -> bytes:
    ents = entries(config)
    size = ents[-1].offset + ents[-1].bytes
    flat = np.zeros(3 * size // 4, "<f4")
    rng = np.random.default_rng(seed)
    for b in range(3):
        for e in ents:
            start = (b * size + e.offset) // 4
            values = rng.standard_normal(e.elements)
            flat[start:start + e.elements] = np.abs(values) if b == 2 else values  # second moments: squares
    return flat.tobytes()


def test_round_trip(tmp_path):
    data = banks(TINY)
    save(tmp_path / "c.safetensors", Checkpoint(30, TINY, data, "ab" * 32, "cd" * 32))
    back = load(tmp_path / "c.safetensors", TINY)
    assert back.step == 30 and back.banks == data and back.config == TINY and back.plan_digest == "ab" * 32
    assert back.tokenizer_digest == "cd" * 32
    names = tensors(TINY, data)
    assert "parameters/embedding" in names and "second-moments/layer0.down" in names
    assert len(names) == 3 * len(entries(TINY))


def test_another_model_is_refused(tmp_path):
    save(tmp_path / "c.safetensors", Checkpoint(1, TINY, banks(TINY), ""))
    other = replace(TINY, shape=replace(TINY.shape, ffn=256))
    with pytest.raises(CheckpointError, match="written for another model"):
        load(tmp_path / "c.safetensors", other)


def test_corrupt_files_are_refused(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{not json")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load(tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load(tmp_path / "missing.safetensors")


def test_a_negative_step_is_refused(tmp_path):
    save(tmp_path / "c.safetensors", Checkpoint(-10, TINY, banks(TINY), ""))
    with pytest.raises(CheckpointError, match="step -10 is negative"):
        load(tmp_path / "c.safetensors", TINY)


def test_a_save_killed_mid_write_leaves_the_previous_checkpoint(tmp_path):
    """A process killed while writing a new checkpoint: the old one is
    intact, and no new file appears under the checkpoint's name."""
    path = tmp_path / "c.safetensors"
    save(path, Checkpoint(10, TINY, banks(TINY, 1), ""))
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, sys, time
        from planner.runtime import checkpoint as c
        real_fsync = os.fsync
        def slow_fsync(fd):
            sys.stdout.write("writing\\n"); sys.stdout.flush()
            time.sleep(60)
        os.fsync = slow_fsync
        from tests.test_checkpoint import TINY, banks
        c.save(c.Path({str(path)!r}), c.Checkpoint(20, TINY, banks(TINY, 2), ""))
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(__file__)))
    assert child.stdout.readline() == "writing\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert path.read_bytes() == before
    assert load(path, TINY).step == 10


def altered(path, change) -> None:
    """Rewrite a saved checkpoint's tensors and metadata by `change`, past save's own checks."""
    from safetensors import safe_open
    from safetensors.numpy import save_file
    with safe_open(str(path), "np") as f:
        named, metadata = {k: f.get_tensor(k).copy() for k in f.keys()}, f.metadata()
    change(named, metadata)
    save_file(named, str(path), metadata=metadata)


@pytest.mark.parametrize("name, index, value, message", [
    ("parameters/layer0.down", (3, 5), np.nan, r"parameters/layer0.down\[3, 5\] is nan, which no update leaves"),
    ("first-moments/embedding", (0, 7), np.inf, r"first-moments/embedding\[0, 7\] is inf"),
    ("second-moments/final-gain", (2,), -0.5, r"second-moments/final-gain\[2\] is -0.5"),
])
def test_banks_no_update_leaves_are_refused(tmp_path, name, index, value, message):
    """Not finite, or a negative second moment: a run that diverged or a
    file altered since. Save refuses to write them and load to read them."""
    path = tmp_path / "c.safetensors"
    save(path, Checkpoint(10, TINY, banks(TINY), ""))
    before = path.read_bytes()

    def spoil(named, metadata):
        named[name][index] = value
    altered(path, spoil)
    with pytest.raises(CheckpointError, match=message):
        load(path, TINY)
    spoiled = path.read_bytes()
    path.write_bytes(before)
    from safetensors.numpy import load as decode
    from planner.runtime.checkpoint import banks_of
    with pytest.raises(CheckpointError, match="the banks after update 20 are not saved: " + message.split(",")[0]):
        save(path, Checkpoint(20, TINY, banks_of(TINY, decode(spoiled)), ""))
    assert path.read_bytes() == before


def test_metadata_whose_model_digest_is_not_its_configuration_is_refused(tmp_path):
    path = tmp_path / "c.safetensors"
    save(path, Checkpoint(10, TINY, banks(TINY), ""))
    other = replace(TINY, shape=replace(TINY.shape, ffn=256))

    def mislabel(named, metadata):
        metadata["model_digest"] = model_digest(other)
    altered(path, mislabel)
    with pytest.raises(CheckpointError, match="its model digest is not its configuration's"):
        load(path)


def _drop(key):
    return lambda named, metadata: named.pop(key)


def _meta(key, value):
    def change(named, metadata):
        if value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    return change


def _retype(key, dtype):
    def change(named, metadata):
        named[key] = named[key].astype(dtype)
    return change


def _reshape(key):
    def change(named, metadata):
        named[key] = named[key].reshape(-1)[:-1].copy()
    return change


@pytest.mark.parametrize("change, message", [
    (_drop("first-moments/layer0.down"), "has no tensor first-moments/layer0.down"),
    (_retype("parameters/embedding", np.float16), r"parameters/embedding is float16\[256, 128\], "
                                                  r"the model's is float32\[256, 128\]"),
    (_reshape("second-moments/final-gain"), r"second-moments/final-gain is float32\[127\]"),
    (_meta("format", "planner-checkpoint/0"), "not a planner checkpoint"),
    (_meta("config", "{"), "its metadata is damaged"),
    (_meta("config", '{"shape": {"layers": 0}}'), "its metadata is damaged"),
    (_meta("config", '{"shape": {}, "shape": {}}'), r"its metadata is damaged \(names 'shape' twice"),
    (_meta("step", "ten"), "its metadata is damaged"),
    (_meta("step", None), "its metadata is damaged"),
])
def test_a_damaged_checkpoint_is_refused_on_one_line(tmp_path, change, message):
    """Each way a checkpoint file can differ from what save writes is
    refused, with the file and what is wrong."""
    path = tmp_path / "c.safetensors"
    save(path, Checkpoint(10, TINY, banks(TINY), ""))
    altered(path, change)
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: .*{message}") as info:
        load(path, TINY)
    assert "\n" not in str(info.value)


def test_banks_of_another_size_are_refused():
    with pytest.raises(CheckpointError, match="holds .* bytes, not 12"):
        tensors(TINY, bytes(12))
