"""Token shards, batches and the embedded corpus."""

from __future__ import annotations

import numpy as np
import pytest

from planner.data.batches import Batches, DataError
from planner.data.corpus import byte_tokens, stdlib_files
from planner.data.shards import HEADER_BYTES, MAGIC, read_dataset, read_shard, write_shard


def test_embedded_corpus_is_real_text():
    assert len(stdlib_files()) > 100
    tokens = byte_tokens(1 << 16)
    assert len(tokens) == 1 << 16 and tokens.max() < 256
    assert b"def " in bytes(tokens.astype(np.uint8))


def test_batches_are_the_same_every_time():
    tokens = byte_tokens(1 << 16)
    a, b = Batches(tokens, 2, 64, 7), Batches(tokens, 2, 64, 7)
    ids, targets = a(3)
    assert ids.shape == (2, 64) and np.array_equal(ids[:, 1:], targets[:, :-1])
    assert all(np.array_equal(x, y) for x, y in zip(a(3), b(3)))
    assert not np.array_equal(a(3)[0], a(4)[0])


def test_llmc_shards_round_trip(tmp_path):
    tokens = np.arange(5000, dtype=np.uint16) % 300
    write_shard(tmp_path / "data_train_000.bin", tokens)
    raw = (tmp_path / "data_train_000.bin").read_bytes()
    assert int.from_bytes(raw[:4], "little") == MAGIC and len(raw) == HEADER_BYTES + 2 * 5000
    assert np.array_equal(read_shard(tmp_path / "data_train_000.bin"), tokens)
    data = read_dataset(tmp_path, vocab=512, needed=100)
    assert len(data.train) + len(data.validation) == 5000


def test_nanogpt_raw_shards(tmp_path):
    (np.arange(4000, dtype=np.uint16) % 50).tofile(tmp_path / "train.bin")
    (np.arange(400, dtype=np.uint16) % 50).tofile(tmp_path / "val.bin")
    data = read_dataset(tmp_path, vocab=64, needed=200)
    assert len(data.train) == 4000 and len(data.validation) == 400


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no training shard"),
    (lambda d: (np.arange(100, dtype=np.uint16) * 7).tofile(d / "train.bin"), "not below the model's vocabulary"),
    (lambda d: (d / "train.bin").write_bytes(b"\x01\x02\x03"), "odd size"),
    (lambda d: (d / "train.bin").write_bytes(np.array([MAGIC, 1, 99] + [0] * 253, "<i4").tobytes() + b"\0\0"),
     "header says 99 tokens"),
    (lambda d: np.zeros(10, np.uint16).tofile(d / "train.bin"), "a step needs"),
])
def test_bad_data_is_named(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(DataError, match=message):
        read_dataset(tmp_path, vocab=256, needed=50)
