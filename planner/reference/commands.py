"""`planner export` and `planner sample`: a checkpoint in PyTorch's hands.
A damaged or foreign checkpoint is the CLI's bad input (one line, exit 2).

export: the parameters as a PyTorch state dict keyed by the plan's entry
names, which `Coppelius` loads. sample: greedy generation from a checkpoint
by the reference model (on the GPU when there is one), the prompt encoded by
the tokenizer the data was prepared with.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.cli import InputError, output_file, require_torch
from planner.files import written_whole


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, metavar="FILE", help="a planner checkpoint (.safetensors)")
    p.add_argument("--out", required=True, metavar="FILE", help="the state dict to write (.pt)")


def add_sample_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, metavar="FILE", help="a planner checkpoint (.safetensors)")
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--tokens", type=int, default=64, help="tokens to generate (default 64)")
    p.add_argument("--tokenizer", metavar="FILE",
                   help="tokenizer.json (default: the embedded corpus's, for the checkpoint's vocabulary)")


def _parameters(path: str):
    """The checkpoint, and its parameters by entry name."""
    from planner.runtime import checkpoint as ckpt
    loaded = ckpt.load(Path(path))
    named = ckpt.tensors(loaded.config, loaded.banks)
    return loaded, {k.split("/", 1)[1]: v for k, v in named.items() if k.startswith("parameters/")}


def export(args: argparse.Namespace) -> int:
    torch = require_torch()
    out = output_file(args.out, "--out")
    loaded, params = _parameters(args.checkpoint)
    state = {name: torch.from_numpy(value.copy()) for name, value in params.items()}
    with written_whole(out) as f:
        torch.save(state, f)
    print(f"{len(state)} tensors of a {loaded.config.shape.layers}-layer model to {out}")
    return 0


def sample(args: argparse.Namespace) -> int:
    from planner.data import tokenizer as tok
    from planner.reference.model import forward
    torch = require_torch()
    if args.tokens < 1:
        raise InputError(f"--tokens {args.tokens}: must be positive")
    loaded, params = _parameters(args.checkpoint)
    config = loaded.config
    if args.tokenizer:
        path = Path(args.tokenizer)
    else:
        from planner.data.command import embedded
        path = embedded(config.shape.vocab) / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"tokenizer {path}: no such file")
    try:
        tokenizer = tok.load(path, config.shape.vocab)
        same = not loaded.tokenizer_digest or tok.digest(path) == loaded.tokenizer_digest
    except ValueError as error:
        raise InputError(str(error)) from None
    if not same:
        raise InputError(f"tokenizer {path}: not the one the checkpoint's training data was prepared with "
                         f"(SHA-256 {loaded.tokenizer_digest[:16]}); name that one with --tokenizer")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    weights = {n: torch.from_numpy(v.copy()).to(device) for n, v in params.items()}
    ids = tokenizer.encode(args.prompt).ids or [0]
    with torch.no_grad():
        for _ in range(args.tokens):
            window = torch.tensor([ids[-config.shape.seq:]], device=device)
            logits = forward(config, weights, window)
            ids.append(int(logits[0, -1].argmax()))
    print(tokenizer.decode(ids))
    return 0
