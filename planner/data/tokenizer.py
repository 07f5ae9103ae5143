"""A byte-level BPE tokenizer trained locally to the model's vocabulary."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable


def train(texts: Iterable[str], vocab: int):
    """A byte-level BPE (GPT-2's pre-tokenisation) with exactly `vocab` tokens
    at most, trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load(path: Path, vocab: int):
    """The tokenizer in `path`, for a model of `vocab` tokens: one whose ids
    reach past the model's is refused (ValueError)."""
    from tokenizers import Tokenizer
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # the library raises bare Exception for a file it cannot parse
        raise ValueError(f"tokenizer {path}: not a tokenizers JSON file ({error})") from None
    if tokenizer.get_vocab_size() > vocab:
        raise ValueError(f"tokenizer {path}: its {tokenizer.get_vocab_size()} tokens do not fit the model's "
                         f"vocabulary ({vocab})")
    return tokenizer


def digest(path: Path) -> str:
    """SHA-256 of a tokenizer file: what a checkpoint records of the
    tokenizer its training data was prepared with."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as error:
        raise ValueError(f"tokenizer {path}: cannot be read ({error.strerror})") from None
