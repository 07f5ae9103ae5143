"""CPU references of every image family, in numpy.

A reference takes the image's constants, its inputs (each read or read-write
pointer argument as the array of its device representation: binary32 as
float32, the half format as its uint16 bits, ids as int32) and the launch's
scalars, and returns each written argument's expected contents. An output the
kernel must reproduce bit for bit comes back in its device representation
(float32, uint16 bits, uint32); one it computes with rounding of its own comes
back as float64, computed in float64 from the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

F32, HALF, I32, U32 = "f32", "half", "i32", "u32"
DTYPES = {F32: np.float32, HALF: np.uint16, I32: np.int32, U32: np.uint32}

Arrays = Mapping[str, np.ndarray]
Scalars = Mapping[str, float | int]
Constants = Mapping[str, int | str]


@dataclass(frozen=True)
class Reference:
    types: dict[str, str]  # each pointer argument's element type
    compute: Callable[[Constants, Arrays, Scalars], dict[str, np.ndarray]]


# ---- the half formats ----

def half_to_float(bits: np.ndarray, half: str) -> np.ndarray:
    """float64 values of half-format bits."""
    bits = np.asarray(bits, dtype=np.uint16)
    if half == "binary16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def float_to_half(values: np.ndarray, half: str) -> np.ndarray:
    """Half-format bits of float32 values, rounded to nearest even (as the
    device's cvt.rn)."""
    values = np.asarray(values, dtype=np.float32)
    if half == "binary16":
        return values.astype(np.float16).view(np.uint16)
    u = values.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + (u >> 16 & 1)) >> 16).astype(np.uint16)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


# ---- initialisation and elementwise ----

def splitmix_high(seed: int, counters: np.ndarray) -> np.ndarray:
    """h(seed, c): the high word of SplitMix64 of the state seed << 32 | c."""
    z = (np.uint64(seed) << np.uint64(32)) | counters.astype(np.uint64)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(32)).astype(np.uint32)


def _random_normal(c, x, s):
    i = np.arange(s["elements"], dtype=np.uint64)
    total = np.zeros(i.shape, dtype=np.int64)
    for j in range(3):
        counters = (np.uint64(s["counter"]) + np.uint64(3) * i + np.uint64(j)) & np.uint64(0xFFFFFFFF)
        h = splitmix_high(s["seed"], counters)
        for shift in (0, 8, 16, 24):
            total += (h >> np.uint32(shift)) & np.uint32(0xFF)
    return {"out": np.float32(s["scale"]) * (total - 1530).astype(np.float32)}


def _rotary_table(c, x, s):
    angle = np.arange(c["seq"], dtype=np.float64) * (np.float64(np.float32(s["theta_high"]))
                                                     + np.float64(np.float32(s["theta_low"])))
    return {"cosine": np.cos(angle), "sine": np.sin(angle)}


def _fill(c, x, s):
    return {"out": np.full(s["elements"], s["value"], dtype=np.float32)}


def _copy(c, x, s):
    return {"out": x["in"][: s["elements"]].copy()}


def _cast_down(c, x, s):
    return {"out": float_to_half(x["in"][: s["elements"]], c["half"])}


def _add(c, x, s):
    n = s["elements"]
    return {"out": x["left"][:n] + x["right"][:n]}


def _argmax(c, x, s):
    return {"out": np.array([np.argmax(x["in"])], dtype=np.uint32)}


def _gather(c, x, s):
    table = x["table"].reshape(c["vocab"], c["width"])
    return {"out": table[x["ids"]].reshape(-1)}


# ---- layer norm ----

def _layernorm_forward(c, x, s):
    v = _f64(x["in"]).reshape(c["rows"], c["width"])
    mean = v.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(((v - mean) ** 2).mean(axis=1, keepdims=True) + np.float32(s["epsilon"]))
    out = (v - mean) * rstd * _f64(x["gamma"]) + _f64(x["beta"])
    return {"out": out.reshape(-1), "statistics": np.concatenate([mean, rstd], axis=1).reshape(-1)}


def _layernorm_backward(c, x, s):
    shape = (c["rows"], c["width"])
    stats = _f64(x["statistics"]).reshape(c["rows"], 2)
    mean, rstd = stats[:, :1], stats[:, 1:]
    x_hat = (_f64(x["x"]).reshape(shape) - mean) * rstd
    dy = half_to_float(x["dy"], c["half"]).reshape(shape)
    g = dy * _f64(x["gamma"])
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1, keepdims=True))
    # each block's rows' sums of dy x_hat and of dy, side by side
    per_part = -(-c["rows"] // c["parts"])
    starts = np.arange(0, c["rows"], per_part)
    partials = np.concatenate([np.add.reduceat(dy * x_hat, starts, axis=0), np.add.reduceat(dy, starts, axis=0)],
                              axis=1)
    return {"dx": dx.reshape(-1), "partials": partials.reshape(-1), "dx_half": dx.reshape(-1)}


def _layernorm_backward_add(c, x, s):
    out = _layernorm_backward(c, x, s)
    dx = _f64(x["residual"]) + out["dx"]
    return out | {"dx": dx, "dx_half": dx}


def _layernorm_parameters(c, x, s):
    sums = _f64(x["partials"]).reshape(c["parts"], 2, c["width"]).sum(axis=0)
    return {"gamma_gradient": sums[0], "beta_gradient": sums[1]}


# ---- attention layouts ----

def _rotate(pairs: np.ndarray, cosine: np.ndarray, sine: np.ndarray, sign: int) -> np.ndarray:
    """Columns i, i + 32 of [..][seq][64] turned by the angle of column i at
    each position (sign -1 turns back); tables [32][seq]."""
    cos, sin = cosine.T, sine.T  # [seq][32]
    x0, x1 = pairs[..., :32], pairs[..., 32:]
    return np.concatenate([x0 * cos - sign * x1 * sin, x1 * cos + sign * x0 * sin], axis=-1)


def _tables(x) -> tuple[np.ndarray, np.ndarray]:
    return _f64(x["cosine"]).reshape(32, -1), _f64(x["sine"]).reshape(32, -1)


def by_head(c, tokens: np.ndarray) -> np.ndarray:
    """[T][heads][64] (token-major; the heads of any count: the context's,
    or the queries', keys' and values' side by side) as
    [batch][heads][seq][64]."""
    return tokens.reshape(c["batch"], c["seq"], -1, 64).transpose(0, 2, 1, 3)


def _rounded(c, x: np.ndarray) -> np.ndarray:
    """x as the half format rounds it, in float64."""
    return half_to_float(float_to_half(x, c["half"]), c["half"])


def row_terms(d_out: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The attention backward's row terms D = sum_d dO O over each head's
    64 columns of each row (both [batch][heads][seq][64])."""
    return (d_out * out).sum(axis=-1)


# ---- streaming attention ----

def _heads(c, x, name: str, count: str) -> np.ndarray:
    return half_to_float(x[name], c["half"]).reshape(c["batch"], c[count], c["seq"], 64)


def _grouped(c, kv: np.ndarray) -> np.ndarray:
    """K/V heads repeated for the query heads each serves."""
    return np.repeat(kv, c["heads"] // c["kv_heads"], axis=1)


def _probabilities(c, q, k, stream_scale, log_sum_exp=None):
    """Base-2 scores t = q.k stream_scale, causal; P = 2^(t - L) with L the
    given base-2 log-sum-exp, or the exact one (returned too)."""
    t = np.einsum("bhqd,bhkd->bhqk", q, _grouped(c, k)) * np.float64(np.float32(stream_scale))
    causal = np.tril(np.ones((c["seq"], c["seq"]), dtype=bool))
    t = np.where(causal, t, -np.inf)
    if log_sum_exp is None:
        top = t.max(axis=-1, keepdims=True)
        log_sum_exp = top + np.log2(np.exp2(t - top).sum(axis=-1, keepdims=True))
    else:
        log_sum_exp = log_sum_exp[..., None]
    return np.exp2(t - log_sum_exp), log_sum_exp[..., 0]


def _attention_forward(c, x, s):
    q, k, v = _heads(c, x, "q", "heads"), _heads(c, x, "k", "kv_heads"), _heads(c, x, "v", "kv_heads")
    p, lse = _probabilities(c, q, k, s["stream_scale"])
    out = np.einsum("bhqk,bhkd->bhqd", p, _grouped(c, v))
    return {"out": out.transpose(0, 2, 1, 3).reshape(-1), "log_sum_exp": lse.reshape(-1)}


def _backward_terms(c, x, s, row_terms):
    """P, dS (query-head layout) from the inputs both backward launches read."""
    q, k, v = _heads(c, x, "q", "heads"), _heads(c, x, "k", "kv_heads"), _heads(c, x, "v", "kv_heads")
    d_out = _heads(c, x, "d_out", "heads")
    lse = _f64(x["log_sum_exp"]).reshape(c["batch"], c["heads"], c["seq"])
    p, _ = _probabilities(c, q, k, s["stream_scale"], lse)
    d_p = np.einsum("bhqd,bhkd->bhqk", d_out, _grouped(c, v))
    return q, k, d_out, p, p * (d_p - row_terms[..., None])


def _row_terms(c, x) -> np.ndarray:
    return _f64(x["row_terms"]).reshape(c["batch"], c["heads"], c["seq"])


def _transposed(heads: np.ndarray) -> np.ndarray:
    """[b][head][s][64] as [head 64 + c][b seq + s]: the attention backward's
    gradients as it writes them."""
    return heads.transpose(1, 3, 0, 2).reshape(-1)


def _turned_back(c, x, heads: np.ndarray) -> np.ndarray:
    """A query or key gradient ([b][head][s][64]) as the half format rounds
    it, turned back by the rotary angles of its positions (as the backward
    stores it)."""
    return _rotate(_rounded(c, heads), *_tables(x), sign=-1)


def _attention_query(c, x, s):
    q, k, _, _, d_s = _backward_terms(c, x, s, _row_terms(c, x))
    d_q = np.float64(np.float32(s["score_scale"])) * np.einsum("bhqk,bhkd->bhqd", d_s, _grouped(c, k))
    return {"d_q": _transposed(_turned_back(c, x, d_q))}


def _attention_key(c, x, s):
    q, _, d_out, p, d_s = _backward_terms(c, x, s, _row_terms(c, x))
    group = c["heads"] // c["kv_heads"]

    def per_kv_head(a: np.ndarray) -> np.ndarray:  # summed over each K/V head's query heads
        return a.reshape(c["batch"], c["kv_heads"], group, c["seq"], 64).sum(axis=2)

    d_v = per_kv_head(np.einsum("bhqk,bhqd->bhkd", p, d_out))
    d_k = np.float64(np.float32(s["score_scale"])) * per_kv_head(np.einsum("bhqk,bhqd->bhkd", d_s, q))
    return {"d_k": _transposed(_turned_back(c, x, d_k)), "d_v": _transposed(d_v)}


def _attention_backward(c, x, s):
    return _attention_query(c, x, s) | _attention_key(c, x, s)


# ---- the loss ----

def _logits(c, x) -> np.ndarray:
    """The logits (half-format bits) as float64, a row a token."""
    return half_to_float(x["logits"], c["half"]).reshape(c["rows"], c["vocab"])


def _loss_target_gather(c, x, s):
    return {"correct": _logits(c, x)[np.arange(c["rows"]), x["targets"]].astype(np.float32)}


def _log_sum_exp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


def _cross_entropy(c, x, s):
    return {"loss": _log_sum_exp(_logits(c, x)) - _f64(x["correct"])}


def _cross_entropy_backward(c, x, s):
    """The loss, and the logits' gradient from it."""
    z = _logits(c, x)
    lse = _log_sum_exp(z)
    p = np.exp(z - lse[:, None])
    p[np.arange(c["rows"]), x["targets"]] -= 1.0
    return {"gradient": (p * np.float64(np.float32(s["gradient_scale"]))).reshape(-1),
            "loss": lse - _f64(x["correct"])}


def _embedding_scatter(c, x, s):
    """The rows naming a token summed in position order (binary32, as the
    kernel adds them), then added to the token's gradient row."""
    gradient = x["gradient"].reshape(c["vocab"], c["width"]).copy()
    dy = x["dy"].reshape(c["rows"], c["width"])
    ids = x["ids"]
    order = np.argsort(ids, kind="stable")
    starts = np.flatnonzero(np.r_[True, ids[order][1:] != ids[order][:-1]])
    for first, end in zip(starts, np.r_[starts[1:], len(ids)]):
        positions = order[first:end]
        total = dy[positions[0]].copy()
        for p in positions[1:]:
            total += dy[p]
        gradient[ids[positions[0]]] += total
    return {"gradient": gradient.reshape(-1)}


# ---- the learner ----

def _adamw(c, x, s):
    f = {k: np.float64(np.float32(s[k])) for k in
         ("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "decay", "step_size", "epsilon")}
    g = _f64(x["gradients"])
    m = f["beta1"] * _f64(x["first_moments"]) + f["one_minus_beta1"] * g
    v = f["beta2"] * _f64(x["second_moments"]) + f["one_minus_beta2"] * g * g
    p = _f64(x["parameters"]) * f["decay"] - f["step_size"] * m / (np.sqrt(v) + f["epsilon"])
    return {"parameters": p, "first_moments": m, "second_moments": v, "halves": p}


# ---- the gated activation ----

def _gelu_terms(c, x, s):
    """up and gate from the pair's rows (each the up projection's row, then
    the gate projection's), flat, and tanh's term of the gate."""
    rows, ffn = divmod(s["elements"], c["ffn"])
    assert ffn == 0, "whole rows of the gated activation"
    pair = half_to_float(x["pair"], c["half"])[: 2 * s["elements"]].reshape(rows, 2, c["ffn"])
    up, gate = pair[:, 0].reshape(-1), pair[:, 1].reshape(-1)
    k, cubic = np.float64(np.float32(s["sqrt_two_over_pi"])), np.float64(np.float32(s["cubic"]))
    th = np.tanh(k * (gate + cubic * gate**3))
    return up, gate, th, k, cubic


def _gated_gelu_backward(c, x, s):
    n = s["elements"]
    up, gate, th, k, cubic = _gelu_terms(c, x, s)
    slope = 0.5 * (1.0 + th) + 0.5 * gate * (1.0 - th * th) * k * (1.0 + 3.0 * cubic * gate * gate)
    dy = half_to_float(x["gated_gradient"], c["half"])[:n]
    up_gradient = (dy * 0.5 * gate * (1.0 + th)).reshape(-1, c["ffn"])
    gate_gradient = (dy * up * slope).reshape(-1, c["ffn"])
    return {"pair_gradient": np.concatenate([up_gradient, gate_gradient], axis=1).reshape(-1)}


# ---- the tiled products ----

def _tiled(c, x, s):
    m, n, k = c["m"], c["n"], c["k"]
    a = half_to_float(x["a"], c["half"])
    b = half_to_float(x["b"], c["half"])
    a = a.reshape(k, m).T if c["a_layout"] == "c" else a.reshape(m, k)
    b = b.reshape(k, n) if c["b_layout"] == "c" else b.reshape(n, k).T
    out = a @ b
    if c["residual"]:
        out += _f64(x["r"]).reshape(m, n)
    return {"c": out.reshape(-1)}


def _tiled_gated(c, x, s):
    """The up and gate projections (B's rows the up's, then the gate's) and
    the gated activation from them as C rounds them to the half format."""
    out, ffn = _tiled(c, x, s)["c"], c["n"] // 2
    up, gate, th, _, _ = _gelu_terms({"ffn": ffn, "half": c["half"]}, {"pair": float_to_half(out, c["half"])},
                                     s | {"elements": c["m"] * ffn})
    return {"c": out, "gated": 0.5 * gate * (1.0 + th) * up}


def _tiled_rope(c, x, s):
    """The queries, keys and values by head, from C as the half format
    rounds it, the queries and keys turned (the seed's qk-rope, in the
    product's epilogue); the values as C is."""
    c = {**c, "batch": c["m"] // c["seq"]}
    product = _tiled(c, x, s)["c"]
    heads = by_head(c, _rounded(c, product))
    rotated = _rotate(heads[:, : c["heads"] + c["kv_heads"]], *_tables(x), sign=1)
    values = by_head(c, product)[:, c["heads"] + c["kv_heads"]:]  # [b][g][s][64]
    return {"queries": rotated[:, : c["heads"]].reshape(-1), "keys": rotated[:, c["heads"]:].reshape(-1),
            "values": np.ascontiguousarray(values).reshape(-1)}


def _tiled_heads(c, x, s):
    """The context's gradient by head, C as the half format rounds it, and
    the attention backward's row terms from those halves times the
    forward's output (the seed's token-to-head, in the product's epilogue)."""
    c = {**c, "batch": c["m"] // c["seq"]}
    product = _tiled(c, x, s)["c"]
    heads = by_head(c, _rounded(c, product))
    out = by_head(c, half_to_float(x["out"], c["half"]))
    return {"heads": np.ascontiguousarray(heads).reshape(-1), "row_terms": row_terms(heads, out).reshape(-1)}


_PRODUCT = {"c": F32, "a": HALF, "b": HALF}

REFERENCES: dict[str, Reference] = {
    "random-normal": Reference({"out": F32}, _random_normal),
    "rotary-table": Reference({"cosine": F32, "sine": F32}, _rotary_table),
    "fill": Reference({"out": F32}, _fill),
    "copy": Reference({"out": F32, "in": F32}, _copy),
    "cast-down": Reference({"out": HALF, "in": F32}, _cast_down),
    "add": Reference({"out": F32, "left": F32, "right": F32}, _add),
    "argmax": Reference({"out": U32, "in": F32}, _argmax),
    "gather": Reference({"out": F32, "ids": I32, "table": F32}, _gather),
    "layernorm-forward": Reference({"out": HALF, "in": F32, "gamma": F32, "beta": F32, "statistics": F32},
                                   _layernorm_forward),
    "layernorm-backward": Reference({"dx": F32, "x": F32, "dy": HALF, "gamma": F32, "partials": F32,
                                     "dx_half": HALF, "statistics": F32}, _layernorm_backward),
    "layernorm-backward-add": Reference({"dx": F32, "x": F32, "dy": HALF, "gamma": F32, "partials": F32,
                                         "dx_half": HALF, "statistics": F32, "residual": F32},
                                        _layernorm_backward_add),
    "layernorm-parameters": Reference({"gamma_gradient": F32, "beta_gradient": F32, "partials": F32},
                                      _layernorm_parameters),
    "attention-forward": Reference({"q": HALF, "k": HALF, "v": HALF, "out": HALF, "log_sum_exp": F32},
                                   _attention_forward),
    "attention-query": Reference({"q": HALF, "k": HALF, "v": HALF, "d_out": HALF, "log_sum_exp": F32,
                                  "row_terms": F32, "d_q": HALF, "cosine": F32, "sine": F32}, _attention_query),
    "attention-key": Reference({"q": HALF, "k": HALF, "v": HALF, "d_out": HALF, "log_sum_exp": F32,
                                "row_terms": F32, "d_k": HALF, "d_v": HALF, "cosine": F32, "sine": F32},
                               _attention_key),
    "attention-backward": Reference({"q": HALF, "k": HALF, "v": HALF, "d_out": HALF, "log_sum_exp": F32,
                                     "row_terms": F32, "d_q": HALF, "d_k": HALF, "d_v": HALF, "cosine": F32,
                                     "sine": F32}, _attention_backward),
    "loss-target-gather": Reference({"correct": F32, "logits": HALF, "targets": I32}, _loss_target_gather),
    "cross-entropy": Reference({"loss": F32, "logits": HALF, "correct": F32}, _cross_entropy),
    "cross-entropy-backward": Reference({"gradient": HALF, "loss": F32, "logits": HALF, "correct": F32,
                                         "targets": I32}, _cross_entropy_backward),
    "embedding-scatter": Reference({"gradient": F32, "dy": F32, "ids": I32}, _embedding_scatter),
    "adamw": Reference({"parameters": F32, "gradients": F32, "first_moments": F32, "second_moments": F32,
                        "halves": HALF}, _adamw),
    "gated-gelu-backward": Reference({"pair_gradient": HALF, "gated_gradient": HALF, "pair": HALF},
                                     _gated_gelu_backward),
    "tiled": Reference(_PRODUCT, _tiled),
    "tiled-add": Reference(_PRODUCT | {"r": F32}, _tiled),
    "tiled-half": Reference(_PRODUCT | {"c": HALF}, _tiled),
    "tiled-gated": Reference(_PRODUCT | {"c": HALF, "gated": HALF}, _tiled_gated),
    "tiled-rope": Reference({"queries": HALF, "keys": HALF, "values": HALF, "a": HALF, "b": HALF, "cosine": F32,
                             "sine": F32}, _tiled_rope),
    "tiled-heads": Reference({"heads": HALF, "row_terms": F32, "a": HALF, "b": HALF, "out": HALF}, _tiled_heads),
}


def reference(family: str, constants: Constants, inputs: Arrays, scalars: Scalars) -> dict[str, np.ndarray]:
    """The expected contents of every argument the family's kernel writes."""
    return REFERENCES[family].compute(constants, inputs, scalars)
