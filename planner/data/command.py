"""`planner data prepare`: a tokenizer and token shards from text.

Trains a byte-level BPE tokenizer to the model's vocabulary on the corpus
(the embedded one when no file is named), tokenizes it, and writes llm.c
shards (`train_000000.bin`, ..., `val_000000.bin`) and `tokenizer.json`
into the output directory. Nothing is left half-written: each file is
written aside and renamed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from planner.data.batches import DataError
from planner.files import written_whole

SHARD_TOKENS = 100_000_000   # llm.c's shard size
VALIDATION_SHARE = 0.1


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    prepare = sub.add_parser("prepare", help="train a tokenizer and write token shards")
    prepare.add_argument("corpus", nargs="*", help="text files (default: the embedded corpus)")
    prepare.add_argument("--out", required=True, metavar="DIR", help="directory for the shards and tokenizer.json")
    prepare.add_argument("--config", metavar="FILE", help="configuration JSON (its vocabulary)")


def _texts(paths: list[str]) -> list[str]:
    from planner.data.corpus import stdlib_files
    files = [Path(p) for p in paths] if paths else stdlib_files()
    out = []
    for f in files:
        try:
            out.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError as error:
            raise DataError(f"corpus file {f}: cannot be read ({error.strerror})") from None
    return out


def run(args: argparse.Namespace) -> int:
    from planner.cli import output_directory, read_config

    config = read_config(args.config)
    out = output_directory(Path(args.out), "--out")
    # shards already there would be read with the new ones, under another tokenizer
    if out.is_dir() and (held := sorted(p.name for p in out.glob("*.bin"))):
        raise DataError(f"--out {out}: already holds token shards ({held[0]}, ...); name a new or empty directory")
    texts = _texts(args.corpus)
    if not any(texts):
        raise DataError("the corpus is empty")
    try:
        print(prepare(texts, config.shape.vocab, out))
    except OSError as error:
        raise DataError(f"--out {out}: cannot be written ({error.strerror})") from None
    return 0


def prepare(texts: list[str], vocab: int, out: Path) -> str:
    """Tokenizer and shards of `texts` in `out`; a line saying what was written."""
    from planner.data import tokenizer as tok
    from planner.data.shards import write_shard

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tok.train(texts, vocab)
    eot = tokenizer.token_to_id("<|endoftext|>")
    stream = []
    for encoding in tokenizer.encode_batch(texts):
        stream.extend(encoding.ids)
        stream.append(eot)
    tokens = np.asarray(stream, dtype=np.uint16)
    cut = int(len(tokens) * (1 - VALIDATION_SHARE))
    for split, part in (("train", tokens[:cut]), ("val", tokens[cut:])):
        for n, start in enumerate(range(0, len(part), SHARD_TOKENS)):
            write_shard(out / f"{split}_{n:06d}.bin", part[start:start + SHARD_TOKENS])
    with written_whole(out / "tokenizer.json", "w") as f:   # last: it marks the corpus whole (`embedded`)
        f.write(tokenizer.to_str())
    return (f"{len(tokens):,} tokens ({tokenizer.get_vocab_size()} in the vocabulary) in {out}: "
            f"{cut:,} for training, {len(tokens) - cut:,} for validation")


def embedded(vocab: int) -> Path:
    """The embedded corpus prepared for a vocabulary, once, in the cache."""
    from planner.runtime.nvrtc import cache_directory
    out = cache_directory() / "data" / f"stdlib-{vocab}"
    if not (out / "tokenizer.json").is_file():
        prepare(_texts([]), vocab, out)
    return out
