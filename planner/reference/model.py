"""Coppelius in PyTorch: the reference the plan is checked against, number by
number, and the anchor the benchmarks race.

The architecture is the plan's, stated once more in the plainest form:
a tied embedding; per layer a pre-norm block of LayerNorm, a qkv projection
(query heads, then K/V heads), rotary positions on (i, i + 32) pairs, causal
attention with K/V heads shared by groups of query heads, the output
projection added to the residual stream, LayerNorm, the up and gate
projections, tanh-GELU of the gate times the up, the down projection added;
a final LayerNorm; logits against the embedding; the mean cross-entropy.
AdamW updates every parameter entry, norms and embedding included.

Parameters are keyed by the plan's entry names (`embedding`,
`layer3.qkv`, `final-gain`, ...), so a checkpoint of the plan loads here
unchanged. torch is imported by whoever uses this module; the package does
not depend on it.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.nn.functional as F

from planner.model.config import Config
from planner.schedule.arena import entries
from planner.schedule.launches import ROTARY_BASE


def rotary_tables(config: Config, device=None, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, [seq][32]: angle = position x base^(-i / 32)."""
    s = config.shape
    columns = s.rotary_columns
    theta = ROTARY_BASE ** (-torch.arange(columns, dtype=torch.float64) / columns)
    angle = torch.arange(s.seq, dtype=torch.float64)[:, None] * theta[None, :]
    return angle.cos().to(device, dtype), angle.sin().to(device, dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., seq, 64]: pairs (i, i + 32) rotated by the position's angle."""
    a, b = x[..., :32], x[..., 32:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def forward(config: Config, params: dict[str, torch.Tensor], ids: torch.Tensor,
            tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Logits [batch, seq, vocab] for token ids [batch, seq]."""
    s = config.shape
    B, S, H, KV, D = ids.shape[0], ids.shape[1], s.heads, s.kv_heads, s.head_width
    cos, sin = tables if tables is not None else rotary_tables(config, ids.device, params["embedding"].dtype)
    cos, sin = cos[:S], sin[:S]
    eps = 1e-5
    x = params["embedding"][ids]
    for l in range(s.layers):
        p = lambda item: params[f"layer{l}.{item}"]
        h = F.layer_norm(x, (s.width,), p("norm1-gain"), p("norm1-shift"), eps)
        qkv = h @ p("qkv").t()
        q = qkv[..., :H * D].view(B, S, H, D).transpose(1, 2)
        k = qkv[..., H * D:(H + KV) * D].view(B, S, KV, D).transpose(1, 2)
        v = qkv[..., (H + KV) * D:].view(B, S, KV, D).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if KV != H:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(D))
        merged = o.transpose(1, 2).reshape(B, S, H * D)
        x = merged @ p("output").t() + x
        h = F.layer_norm(x, (s.width,), p("norm2-gain"), p("norm2-shift"), eps)
        gated = F.gelu(h @ p("gate").t(), approximate="tanh") * (h @ p("up").t())
        x = gated @ p("down").t() + x
    h = F.layer_norm(x, (s.width,), params["final-gain"], params["final-shift"], eps)
    return h @ params["embedding"].t()


def loss(config: Config, params: dict[str, torch.Tensor], ids: torch.Tensor, targets: torch.Tensor,
         tables=None) -> torch.Tensor:
    logits = forward(config, params, ids, tables)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long())


def parameters_from_bank(config: Config, bank: Iterable[float] | torch.Tensor, device=None,
                         dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Each entry's tensor from a flat parameter bank (the plan's P bank as
    binary32 words, 0x100-aligned entries)."""
    flat = torch.as_tensor(bank)
    out = {}
    for e in entries(config):
        out[e.name] = flat[e.offset // 4:e.offset // 4 + e.elements].reshape(e.shape).to(device, dtype).clone()
    return out


def entry_names(config: Config) -> list[str]:
    return [e.name for e in entries(config)]


class Coppelius(torch.nn.Module):
    """The reference as a module (for torch.compile, fused AdamW, CUDA graphs)."""

    def __init__(self, config: Config, params: dict[str, torch.Tensor]):
        super().__init__()
        self.config = config
        self.names = entry_names(config)
        # ParameterDict keys may not contain '.'
        self.weights = torch.nn.ParameterDict({n.replace(".", ":"): torch.nn.Parameter(params[n])
                                               for n in self.names})
        cos, sin = rotary_tables(config, params["embedding"].device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def params(self) -> dict[str, torch.Tensor]:
        return {n: self.weights[n.replace(".", ":")] for n in self.names}

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return loss(self.config, self.params(), ids, targets, (self.cos, self.sin))


def optimizer(config: Config, module: torch.nn.Module, fused: bool = False,
              capturable: bool = False) -> torch.optim.AdamW:
    """AdamW over every entry, with the plan's learner (the loss scale and the
    moment-scaled epsilon it uses cancel, so the unscaled update is the same).
    `capturable`: the step may be captured in a CUDA graph."""
    lr = config.learner
    return torch.optim.AdamW(module.parameters(), lr=float(lr.learning_rate),
                             betas=(float(lr.beta1), float(lr.beta2)), eps=float(lr.epsilon),
                             weight_decay=float(lr.weight_decay), fused=fused, capturable=capturable)

