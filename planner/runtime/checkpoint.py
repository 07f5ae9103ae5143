"""Checkpoints in safetensors: one named tensor per parameter entry and per
moment (`parameters/<entry>`, `first-moments/<entry>`, `second-moments/<entry>`),
the step, the configuration and the digests in the metadata. Never pickled;
written aside, synced and renamed, so an interrupted save leaves the previous
checkpoint whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.files import parse_json, written_whole
from planner.model.config import Config, ConfigError, from_dict, to_dict
from planner.schedule.arena import Entry, entries
from planner.schedule.launches import CHECKPOINT_BANKS

FORMAT = "planner-checkpoint/1"


class CheckpointError(ValueError):
    pass


def model_digest(config: Config) -> str:
    """What decides the tensors a checkpoint holds: the shape (the learner's
    half format does not change them)."""
    return hashlib.sha256(json.dumps(to_dict(config)["shape"], sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    step: int
    config: Config
    banks: bytes            # P, M, V as the plan lays them out (the staging traffic)
    plan_digest: str
    tokenizer_digest: str = ""   # the training data's tokenizer (SHA-256 of its file); "" where unknown


def tensors(config: Config, banks: bytes) -> dict[str, np.ndarray]:
    """Each entry of each checkpoint bank as a named binary32 tensor."""
    ents = entries(config)
    bank_bytes = ents[-1].offset + ents[-1].bytes
    if len(banks) != len(CHECKPOINT_BANKS) * bank_bytes:
        raise CheckpointError(f"a checkpoint of this model holds {len(CHECKPOINT_BANKS) * bank_bytes} bytes, "
                              f"not {len(banks)}")
    out = {}
    for b, bank in enumerate(CHECKPOINT_BANKS):
        flat = np.frombuffer(banks, "<f4", count=bank_bytes // 4, offset=b * bank_bytes)
        for e in ents:
            out[f"{bank}/{e.name}"] = flat[e.offset // 4:e.offset // 4 + e.elements].reshape(e.shape)
    return out


def damage(config: Config, banks: bytes) -> str | None:
    """What no AdamW update leaves in its banks, or None: a value that is not
    finite, or a negative second moment. Such banks come from a run that
    diverged, or a file altered since; resuming from them trains nothing."""
    for name, t in tensors(config, banks).items():
        sound = np.isfinite(t) & (t >= 0) if name.startswith("second-moments/") else np.isfinite(t)
        if not sound.all():
            at = np.unravel_index(int(np.argmin(sound)), t.shape)
            return f"{name}{[int(i) for i in at]} is {t[at]}"
    return None


def banks_of(config: Config, named: dict[str, np.ndarray]) -> bytes:
    """The banks back from named tensors (the bytes between entries zero)."""
    ents: tuple[Entry, ...] = entries(config)
    bank_bytes = ents[-1].offset + ents[-1].bytes
    out = np.zeros(len(CHECKPOINT_BANKS) * bank_bytes // 4, "<f4")
    for b, bank in enumerate(CHECKPOINT_BANKS):
        for e in ents:
            t = named.get(f"{bank}/{e.name}")
            if t is None:
                raise CheckpointError(f"the checkpoint has no tensor {bank}/{e.name}")
            if tuple(t.shape) != e.shape or t.dtype != np.float32:
                raise CheckpointError(f"tensor {bank}/{e.name} is {t.dtype}{list(t.shape)}, "
                                      f"the model's is float32{list(e.shape)}")
            start = (b * bank_bytes + e.offset) // 4
            out[start:start + e.elements] = t.reshape(-1)
    return out.tobytes()


def save(path: Path, checkpoint: Checkpoint) -> None:
    """Write `checkpoint`; banks that `damage` finds are refused, and nothing is written."""
    from safetensors.numpy import save as encode

    if problem := damage(checkpoint.config, checkpoint.banks):
        raise CheckpointError(f"the banks after update {checkpoint.step} are not saved: {problem}")

    metadata = {"format": FORMAT, "step": str(checkpoint.step),
                "config": json.dumps(to_dict(checkpoint.config), sort_keys=True),
                "model_digest": model_digest(checkpoint.config), "plan_digest": checkpoint.plan_digest,
                "tokenizer_digest": checkpoint.tokenizer_digest}
    data = encode(tensors(checkpoint.config, checkpoint.banks), metadata=metadata)
    path = Path(path)
    with written_whole(path, durable=True) as f:
        f.write(data)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load(path: Path, config: Config | None = None) -> Checkpoint:
    """Read a checkpoint; refuse one written for another model than `config`."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as decode

    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"checkpoint {path}: cannot be read ({error.strerror})") from None
    try:
        named = decode(raw)
        header_size = int.from_bytes(raw[:8], "little")
        metadata = json.loads(raw[8:8 + header_size]).get("__metadata__") or {}
    except (SafetensorError, ValueError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: not a safetensors file ({error})") from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: not a planner checkpoint (format {metadata.get('format')!r})")
    try:
        stored = from_dict(parse_json(metadata["config"]))
        step = int(metadata["step"])
    except (KeyError, ValueError, ConfigError) as error:
        raise CheckpointError(f"checkpoint {path}: its metadata is damaged ({error})") from None
    if step < 0:
        raise CheckpointError(f"checkpoint {path}: its metadata is damaged (step {step} is negative)")
    if metadata.get("model_digest") != model_digest(stored):
        raise CheckpointError(f"checkpoint {path}: its metadata is damaged (its model digest is not its "
                              f"configuration's)")
    if config is not None and model_digest(config) != model_digest(stored):
        raise CheckpointError(f"checkpoint {path}: written for another model (shape {to_dict(stored)['shape']}), "
                              f"not this configuration's {to_dict(config)['shape']}")
    try:
        banks = banks_of(stored, named)
    except CheckpointError as error:
        raise CheckpointError(f"checkpoint {path}: {error}") from None
    if problem := damage(stored, banks):
        raise CheckpointError(f"checkpoint {path}: {problem}, which no update leaves")
    return Checkpoint(step, stored, banks, metadata.get("plan_digest", ""), metadata.get("tokenizer_digest", ""))
