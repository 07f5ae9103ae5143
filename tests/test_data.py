"""Token shards, batches and the embedded corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cli import main
from planner.data.batches import Batches, DataError
from planner.data.corpus import byte_tokens, stdlib_files
from planner.data.shards import HEADER_BYTES, MAGIC, Stream, read_dataset, read_shard, write_shard


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


@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), data=st.data())
@settings(max_examples=200, deadline=None)
def test_a_stream_of_shards_is_their_concatenation(sizes, data):
    """Windows and parts of a stream are those of the shards joined: the
    batches a seed draws do not depend on where the shards end."""
    parts = [np.arange(sum(sizes[:k]), sum(sizes[:k + 1]), dtype=np.uint16) for k in range(len(sizes))]
    whole, stream = np.concatenate(parts), Stream(parts)
    assert len(stream) == len(whole)
    start = data.draw(st.integers(0, len(whole)))
    stop = data.draw(st.integers(start, len(whole) + 3))
    assert np.array_equal(stream[start:stop], whole[start:stop]) and stream[start:stop].dtype == np.uint16
    part = stream.between(start, stop)
    assert np.array_equal(part[0:len(part)], whole[start:stop])
    inner = data.draw(st.integers(0, len(part)))
    assert np.array_equal(part[inner:], whole[start:stop][inner:])


def test_shards_are_read_in_place_and_batches_drawn_as_from_one_array(tmp_path):
    tokens = (np.arange(30000) * 13 % 251).astype(np.uint16)
    for k, cut in enumerate(range(0, 30000, 7000)):
        write_shard(tmp_path / f"train_{k:06d}.bin", tokens[cut:cut + 7000])
    data = read_dataset(tmp_path, vocab=256, needed=65)
    assert all(isinstance(part, np.memmap) for part in data.train.parts + data.validation.parts)
    cut = len(data.train)
    a, b = Batches(data.train, 4, 64, 3), Batches(tokens[:cut], 4, 64, 3)
    assert all(np.array_equal(x, y) for step in range(20) for x, y in zip(a(step), b(step)))
    assert np.array_equal(data.validation[0:len(data.validation)], tokens[cut:])


def test_nanogpt_raw_shards(tmp_path):
    (np.arange(4000, dtype=np.uint16) % 50).tofile(tmp_path / "train.bin")
    (np.arange(400, dtype=np.uint16) % 50).tofile(tmp_path / "val.bin")
    data = read_dataset(tmp_path, vocab=64, needed=200)
    assert len(data.train) == 4000 and len(data.validation) == 400


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no training shard"),
    (lambda d: (np.arange(100, dtype=np.uint16) * 7).tofile(d / "train.bin"),
     "train.bin: token 693 is not below the model's vocabulary"),
    (lambda d: (d / "train.bin").write_bytes(b"\x01\x02\x03"), "odd size"),
    (lambda d: (d / "train.bin").write_bytes(np.array([MAGIC, 1, 99] + [0] * 253, "<i4").tobytes() + b"\0\0"),
     "header says 99 tokens"),
    (lambda d: (d / "train.bin").write_bytes(np.array([MAGIC, 2, 1] + [0] * 253, "<i4").tobytes() + b"\0\0"),
     "llm.c shard version 2, only version 1 \\(uint16\\) is read"),
    (lambda d: np.zeros(10, np.uint16).tofile(d / "train.bin"), "a step needs"),
    (lambda d: np.zeros(60, np.uint16).tofile(d / "train.bin"), "too few tokens to hold out a validation split \\(60\\)"),
])
def test_bad_data_is_named(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(DataError, match=message):
        read_dataset(tmp_path, vocab=256, needed=50)


def test_a_tokenizer_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    write_shard(tmp_path / "data_train_000.bin", np.arange(5000, dtype=np.uint16) % 300)
    (tmp_path / "tokenizer.json").write_text("{}")
    real = Path.read_bytes

    def read_bytes(self):   # as an unreadable file (the tests may run as root, whom modes do not stop)
        if self.name == "tokenizer.json":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(DataError, match="tokenizer .*tokenizer.json: cannot be read \\(Permission denied\\)"):
        read_dataset(tmp_path, vocab=512, needed=100)


TINY = {"shape": {"layers": 1, "width": 128, "heads": 2, "kv_heads": 2, "ffn": 128, "vocab": 512, "seq": 64,
                  "batch": 2}, "run": {"prediction_rows": [0, -1]}}


@pytest.fixture
def corpus(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f.read_text() for f in stdlib_files()[:3]))
    return config, text


def test_prepare_writes_a_tokenizer_and_shards_the_model_reads(corpus, tmp_path):
    from tokenizers import Tokenizer
    config, text = corpus
    assert main(["data", "prepare", str(text), "--out", str(tmp_path / "d"), "--config", str(config)]) == 0
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == ["tokenizer.json", "train_000000.bin", "val_000000.bin"]
    tokenizer = Tokenizer.from_file(str(tmp_path / "d" / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 512
    data = read_dataset(tmp_path / "d", vocab=512, needed=65)
    assert 8 * len(data.validation) < len(data.train) < 10 * len(data.validation)
    # the stream is the corpus: its first tokens decode to the text's start
    assert text.read_text().startswith(tokenizer.decode(data.train[:50].tolist()))


@pytest.mark.parametrize("make, message", [
    (lambda out: (out.write_text("a file"), out)[-1], "{tmp}/out is not a directory"),
    (lambda out: (out.mkdir(), (out / "train.bin").write_bytes(b""), out)[-1],
     "already holds token shards (train.bin, ...)"),
    (lambda out: (out.write_text("a file"), out / "d")[-1], "{tmp}/out is not a directory"),
])
def test_prepare_refuses_an_out_it_cannot_fill(corpus, tmp_path, capsys, make, message):
    """A file, a directory holding shards, a path through a file: one line,
    exit status 2, before the tokenizer is trained, and nothing written."""
    config, text = corpus
    out = make(tmp_path / "out")
    before = sorted(tmp_path.rglob("*"))
    assert main(["data", "prepare", str(text), "--out", str(out), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"planner data: --out {out}: {message.format(tmp=tmp_path)}") and err.count("\n") == 1
    assert sorted(tmp_path.rglob("*")) == before


def _written(path, text: str):
    path.write_text(text)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing.txt", "corpus file {tmp}/missing.txt: cannot be read (No such file or directory)"),
    (lambda tmp: tmp, "corpus file {tmp}: cannot be read (Is a directory)"),
    (lambda tmp: _written(tmp / "empty.txt", ""), "the corpus is empty"),
])
def test_prepare_refuses_a_corpus_it_cannot_read(corpus, tmp_path, capsys, make, message):
    """A corpus file missing, a directory, or no text at all: one line,
    exit status 2, and no --out made."""
    config, _ = corpus
    text = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert main(["data", "prepare", str(text), "--out", str(tmp_path / "out"), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == f"planner data: {message.format(tmp=tmp_path)}\n"
    assert sorted(tmp_path.rglob("*")) == before


def test_a_token_past_uint16_is_refused_and_no_shard_written(tmp_path):
    with pytest.raises(DataError, match="train.bin: token 65536 does not fit uint16"):
        write_shard(tmp_path / "train.bin", np.array([1, 65536], np.int64))
    assert list(tmp_path.iterdir()) == []


def test_a_stream_shorter_than_a_sequence_and_its_target_is_refused():
    tokens = np.arange(66, dtype=np.uint16)   # a sequence of 64, its targets one further, and one to start at
    Batches(tokens, 2, 64, 7)
    with pytest.raises(DataError, match="the token stream has 65 tokens; windows of 65 drawn from it need at least 66"):
        Batches(tokens[:65], 2, 64, 7)
