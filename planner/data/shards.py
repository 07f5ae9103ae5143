"""Token shards in llm.c's format, and nanoGPT's raw ones, read as untrusted input.

llm.c: a header of 256 little-endian int32 (magic 20240520, version 1, the
token count), then the tokens as uint16. nanoGPT: the tokens as uint16 and
nothing else (`train.bin`, `val.bin`). A directory holds shards whose names
say `train` or `val`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.data.batches import DataError
from planner.data.tokenizer import digest
from planner.files import written_whole

MAGIC, VERSION, HEADER_WORDS = 20240520, 1, 256
HEADER_BYTES = 4 * HEADER_WORDS


def write_shard(path: Path, tokens: np.ndarray) -> None:
    """An llm.c shard, written aside and renamed: no half-written shard."""
    tokens = np.asarray(tokens)
    if tokens.size and int(tokens.max()) >= 1 << 16:
        raise DataError(f"{path.name}: token {int(tokens.max())} does not fit uint16")
    header = np.zeros(HEADER_WORDS, "<i4")
    header[:3] = (MAGIC, VERSION, tokens.size)
    with written_whole(path, durable=True) as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def read_shard(path: Path) -> np.ndarray:
    """Tokens of one shard; llm.c's when it carries the magic, else nanoGPT's raw uint16."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = np.frombuffer(f.read(min(size, HEADER_BYTES) // 4 * 4), "<i4")
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror})") from None
    if len(head) >= 3 and head[0] == MAGIC:
        if head[1] != VERSION:
            raise DataError(f"{path}: llm.c shard version {int(head[1])}, only version {VERSION} (uint16) is read")
        count = int(head[2])
        if size != HEADER_BYTES + 2 * count:
            raise DataError(f"{path}: header says {count} tokens, the file holds {(size - HEADER_BYTES) // 2}")
        return np.memmap(path, "<u2", mode="r", offset=HEADER_BYTES, shape=(count,))
    if size % 2:
        raise DataError(f"{path}: neither an llm.c shard (no magic {MAGIC}) nor raw uint16 tokens (odd size)")
    return np.memmap(path, "<u2", mode="r") if size else np.zeros(0, "<u2")


class Stream:
    """Shards read as one stream of tokens, none copied into memory: each is
    a memory map, and a window is joined from the shards it spans, so a
    corpus of many gigabytes costs a step only the windows it takes. Its
    windows are those of the shards' concatenation."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = [part for part in parts if len(part)]
        self.starts = np.cumsum([0] + [len(part) for part in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, window: slice) -> np.ndarray:
        """The tokens of `window` (contiguous), copied out of the shards."""
        start, stop, stride = window.indices(len(self))
        if stride != 1:
            raise IndexError("a stream's windows are contiguous")
        return np.concatenate([np.zeros(0, "<u2")] + [
            part[max(start - at, 0):stop - at] for part, at in zip(self.parts, self.starts[:-1])
            if at < stop and start < at + len(part)])

    def between(self, start: int, stop: int) -> Stream:
        """The tokens from `start` to `stop` as a stream of their own (views of the same shards)."""
        return Stream([part[max(start - at, 0):max(stop - at, 0)] for part, at in zip(self.parts, self.starts[:-1])])


@dataclass(frozen=True)
class Dataset:
    train: Stream
    validation: Stream
    source: str
    tokenizer: str = ""     # SHA-256 of the directory's tokenizer.json; "" where it has none


def read_dataset(directory: Path, vocab: int, needed: int) -> Dataset:
    """The train and validation streams of a shard directory, checked against
    the model: every token below `vocab`, at least `needed` tokens each."""
    if not directory.is_dir():
        raise DataError(f"{directory}: no such data directory")
    shards = sorted(p for p in directory.iterdir() if p.suffix == ".bin" and not p.name.startswith("."))
    parts = {"train": [p for p in shards if "train" in p.name], "val": [p for p in shards if "val" in p.name]}
    if not parts["train"]:
        raise DataError(f"{directory}: no training shard (a .bin file whose name says 'train')")
    streams = {}
    for split, paths in parts.items():
        tokens = [read_shard(p) for p in paths]
        for path, shard in zip(paths, tokens):
            if len(shard) and int(shard.max()) >= vocab:
                raise DataError(f"{path}: token {int(shard.max())} is not below the model's vocabulary ({vocab})")
        streams[split] = Stream(tokens)
    train = len(streams["train"])
    if train < needed:
        raise DataError(f"{directory}: {train} training tokens, a step needs {needed}")
    if len(streams["val"]) < needed:
        # no validation shard of its own: hold out the training stream's tail
        cut = train - max(needed, train // 10)
        if cut < needed:
            raise DataError(f"{directory}: too few tokens to hold out a validation split ({train})")
        streams["val"], streams["train"] = streams["train"].between(cut, train), streams["train"].between(0, cut)
    tokenizer = directory / "tokenizer.json"
    try:
        known = digest(tokenizer) if tokenizer.is_file() else ""
    except ValueError as error:   # the file is there but cannot be read
        raise DataError(str(error)) from None
    return Dataset(streams["train"], streams["val"], str(directory), known)
