"""The launch schedule: every launch of a training run, in the seed's order.

Seed `Coppelius.Build.Graph`, from `cgInitialization` to `cgLossRecord`:
initialize; the default checkpoint saved and the request's loaded, chunk by
chunk; the half copies; the rotary tables; the prediction; one update's
shared part (forward, loss, backward, diagnostics); each update's AdamW; the
final forward; the checkpoint saved; the report put back; the loss record.
Each launch names its image, phase, grid and parameter block; pointers are
(window, offset) addresses, scalars binary32 or integer words.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from math import gcd
from typing import Iterator

from planner.kernels.manifest import (FILL_BLOCKS, HALF_BYTES, Image, attention, attention_backward, image,
                                      layernorm_parts, product)
from planner.model import float32 as f32
from planner.model.config import Config
from planner.schedule.arena import STAGING, Layout
from planner.schedule.plan import Address, Launch, Slot, launch_accesses

THREADS = 256                 # cgThreads
MAXIMUM_ELEMENTS = 1024 * THREADS  # cgMaximumElements: one launch's elementwise work
RANDOM_STREAMS = 3            # cgRandomStreams: hashes per element
ROTARY_BASE = 10000           # coppeliusRotaryBase
LAYER_NORM_EPSILON = (1, 100000)   # cgLayerNormEpsilon
GELU_CUBIC = (44715, 1000000)      # cgGeluCubic
# the sum of twelve uniform bytes has variance 12 (256^2 - 1) / 12
RANDOM_VARIANCE = 65535

# the phases' names (cgPhase*)
INITIALIZE, RECAST, ROTARY, CHECKPOINT, REPORT = ("coppelius/initialize", "coppelius/recast", "coppelius/rotary",
                                                  "coppelius/checkpoint", "coppelius/report")
EMBED, LAYER, OUTPUT, OUTPUT_GRADIENT = ("coppelius/embed", "coppelius/layer", "coppelius/output",
                                         "coppelius/output-gradient")
FFN_DOWN, FFN_GATE, ATTENTION_OUTPUT, HEAD_LAYOUT = ("coppelius/ffn-down", "coppelius/ffn-gate",
                                                     "coppelius/attention-output", "coppelius/head-layout")
ATTENTION_HEAD, QKV, SCATTER, ADAMW = ("coppelius/attention-head", "coppelius/qkv", "coppelius/scatter",
                                       "coppelius/adamw")
DIAGNOSTICS, LOSS_RECORD = "coppelius/diagnostics", "coppelius/loss-record"

Where = tuple[str, int]   # (window, offset)


@dataclass(frozen=True)
class Constants:
    """The binary32 words the launches carry, each the word nearest its
    exact value (cgOne, cgInverseWidth, ..., cgAdamStepSize)."""

    one: int
    zero: int
    half: int
    inverse_width: int
    layer_norm_epsilon: int
    loss_gradient_scale: int
    score_scale: int
    stream_scale: int
    sqrt_two_over_pi: int
    gelu_cubic: int
    gelu_cubic_slope: int
    log2e: int
    ln2: int
    beta1: int
    one_minus_beta1: int
    beta2: int
    one_minus_beta2: int
    decay: int
    initialization_scale: int
    inverse_two_pi: int
    two_pi: tuple[int, int]
    rotary: tuple[int, ...]

    @staticmethod
    def of(config: Config) -> "Constants":
        s, lr = config.shape, config.learner
        score_scale = f32.inverse_root(s.head_width)
        log2e = f32.log2_e()
        dev = lr.init_deviation
        return Constants(
            one=f32.rational(1, 1), zero=0, half=f32.rational(1, 2),
            inverse_width=f32.rational(1, s.width),
            layer_norm_epsilon=f32.rational(*LAYER_NORM_EPSILON),
            # the logits' gradient: the mean over the rows, times the loss scale
            loss_gradient_scale=f32.rational(lr.loss_scale, s.tokens),
            score_scale=score_scale,
            # log2(e) / sqrt(head width): exact because the scale is a power of two
            stream_scale=f32.nearest(f32.value(log2e) * f32.value(score_scale)),
            sqrt_two_over_pi=f32.sqrt_two_over_pi(),
            gelu_cubic=f32.rational(*GELU_CUBIC),
            gelu_cubic_slope=f32.rational(3 * GELU_CUBIC[0], GELU_CUBIC[1]),
            log2e=log2e, ln2=f32.ln_2(),
            beta1=f32.nearest(lr.beta1), one_minus_beta1=f32.nearest(1 - lr.beta1),
            beta2=f32.nearest(lr.beta2), one_minus_beta2=f32.nearest(1 - lr.beta2),
            decay=f32.nearest(1 - lr.learning_rate * lr.weight_decay),
            # a draw's deviation is sqrt(65535): scale it to the model's
            initialization_scale=f32.root(dev * dev / RANDOM_VARIANCE),
            inverse_two_pi=f32.inverse_two_pi(), two_pi=f32.two_pi(),
            rotary=tuple(f32.rotary_words(ROTARY_BASE, s.rotary_columns)),
        )


@dataclass
class Builder:
    """Accumulates launches; `phase` claims the launches made inside it (the
    innermost phase wins, as cgPhase does)."""

    config: Config
    layout: Layout
    constants: Constants
    launches: list[Launch] = field(default_factory=list)
    images: dict[str, Image] = field(default_factory=dict)
    _phases: list[str] = field(default_factory=list)
    # launch counts of named stretches of the order (cgInitializationLaunches, ...)
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._phases.append(name)
        try:
            yield
        finally:
            self._phases.pop()

    @contextmanager
    def mark(self, name: str) -> Iterator[None]:
        first = len(self.launches)
        yield
        self.marks[name] = (first, len(self.launches) - first)

    def launch(self, img: Image, pointers: dict[str, Where], **scalars: int) -> None:
        known = self.images.setdefault(img.name, img)
        if known.constants != img.constants:
            raise ValueError(f"two images named {img.name} with different constants")
        slots = []
        for arg, offset in zip(img.arguments, img.offsets):
            if arg.name in pointers:
                slots.append(Slot(arg.name, offset, Address(*pointers[arg.name])))
            else:
                slots.append(Slot(arg.name, offset, scalars[arg.name]))
        if set(pointers) | set(scalars) != {a.name for a in img.arguments}:
            raise ValueError(f"launch of {img.name} sets {sorted(set(pointers) | set(scalars))}")
        slots_t = tuple(slots)
        self.launches.append(Launch(len(self.launches), img.name, self._phases[-1],
                                    img.grid({s.argument: s.value for s in slots if not isinstance(s.value, Address)}),
                                    img.block, slots_t, launch_accesses(img, slots_t)))


# ---- launches by kind (the seed's cgUnary, cgBinary, cgTiled, ...) ----

def _half(config: Config) -> str:
    return config.learner.half


def copy(b: Builder, out: Where, src: Where, words: int) -> None:
    b.launch(image("copy"), {"out": out, "in": src}, elements=words)


def fill(b: Builder, out: Where, elements: int, value: int) -> None:
    b.launch(image("fill"), {"out": out}, value=value, elements=elements)


def cast_down(b: Builder, out: Where, src: Where, elements: int) -> None:
    b.launch(image("cast-down", half=_half(b.config)), {"out": out, "in": src}, elements=elements)


def tiled(b: Builder, a: str, bl: str, m: int, n: int, k: int, c: Where, left: Where, right: Where,
          residual: Where | None = None, output: str = "binary32") -> None:
    """C (m x n) = A B (+ R): the forward's X W^T is (r, r), a data
    gradient's dY W is (r, c), a weight gradient's dY^T X is (c, c). With
    output "half" C is rounded to the half format, in the first half of the
    binary32 plane the seed gives it."""
    img = product(a, bl, m, n, k, residual is not None, _half(b.config), output)
    pointers = {"c": c, "a": left, "b": right} | ({"r": residual} if residual is not None else {})
    b.launch(img, pointers)


def layer_norm(b: Builder, out: Where, x: Where, gamma: Where, beta: Where, statistics: Where,
               rows: int | None = None) -> None:
    """The normalised rows (all the step's tokens unless `rows` says), in the
    half format (the seed's norm and its cast-down in one launch: only the
    rounded rows are read)."""
    s, rows = b.config.shape, rows or b.config.shape.tokens
    name = "layernorm-forward" if rows == s.tokens else f"layernorm-forward-{rows}-rows"
    b.launch(image("layernorm-forward", name, rows=rows, width=s.width, half=_half(b.config)),
             {"out": out, "in": x, "gamma": gamma, "beta": beta, "statistics": statistics},
             inverse_width=b.constants.inverse_width, epsilon=b.constants.layer_norm_epsilon)


def gradient_half(b: Builder) -> Where:
    """The residual stream's gradient in the half format, as the last layer
    norm's backward left it: the second half of x-hat's plane."""
    s = b.config.shape
    return b.layout.at("normalized-input", s.tokens * s.width * 2)


def layer_norm_backward(b: Builder, gamma: Where, gamma_gradient: Where, beta_gradient: Where, x: Where,
                        dy: Where, statistics: Where, dx: Where, residual: Where | None = None) -> None:
    """dx (+ the residual stream's gradient, the seed's add in the same
    launch), its copy in the half format and its blocks' sums for the gain's
    and shift's gradients, then those gradients from the sums. dy comes in
    the half format, as its product rounded it (in the first half of the
    binary32 plane the seed gives it): the products' operands are halves,
    and so are the gradients every other product passes on. The sums and
    the copy go where the seed keeps x-hat (the normalized-input plane, a
    global), the sums in its first half at most, the copy in its second
    half (`gradient_half`): the products that read the gradient next take
    it there, in place of the seed's cast-down in their phase."""
    s, c, lay = b.config.shape, b.constants, b.layout
    parts = layernorm_parts(s.tokens)
    assert 4 * parts <= s.tokens, "the sums (2 width words a part) end where the half copy starts"
    partials = lay.at("normalized-input")
    arguments = {"dx": dx, "x": x, "dy": dy, "gamma": gamma, "partials": partials,
                 "dx_half": gradient_half(b), "statistics": statistics}
    family = "layernorm-backward"
    if residual is not None:
        family, arguments = "layernorm-backward-add", arguments | {"residual": residual}
    b.launch(image(family, rows=s.tokens, width=s.width, parts=parts, half=_half(b.config)), arguments,
             inverse_width=c.inverse_width, epsilon=c.layer_norm_epsilon)
    b.launch(image("layernorm-parameters", width=s.width, parts=parts),
             {"gamma_gradient": gamma_gradient, "beta_gradient": beta_gradient, "partials": partials})


def gelu_words(c: Constants) -> dict[str, int]:
    """The tanh GELU's words, as the gated product's epilogue takes them."""
    return dict(sqrt_two_over_pi=c.sqrt_two_over_pi, cubic=c.gelu_cubic, half=c.half)


def _gelu_scalars(b: Builder, elements: int) -> dict[str, int]:
    """The gated GELU's backward: the GELU's words, one and its cubic term's slope (for
    the GELU's slope), and the elements."""
    return gelu_words(b.constants) | dict(one=b.constants.one, cubic_slope=b.constants.gelu_cubic_slope,
                                          elements=elements)


def _qkv_gradient_rows(b: Builder) -> dict[str, Where]:
    """Where the query heads', the key heads' and the value heads' rows of
    the transposed qkv gradient ([(heads + 2 kv_heads) 64][T], half) start:
    the attention backward's launches write them, each its own rows."""
    s, at = b.config.shape, b.layout.at
    row_bytes = s.tokens * HALF_BYTES
    queries, keys = s.heads * s.head_width * row_bytes, s.kv_heads * s.head_width * row_bytes
    return {"queries": at("qkv-gradient-t"), "keys": at("qkv-gradient-t", queries),
            "values": at("qkv-gradient-t", queries + keys)}


def _attention(b: Builder, family: str, batch: int | None = None) -> Image:
    """A streaming attention image at the step's shape (over `batch`
    sequences where given)."""
    s = b.config.shape
    return attention(family, batch or s.batch, s.seq, s.heads, s.kv_heads, _half(b.config))


# ---- the phases of the run ----

def initialization(b: Builder) -> None:
    """cgInitialization: P drawn from the seeded random-normal image (the
    counter advances three per element), G, M and V zero, the norms' gains
    one and shifts zero, then the half copies."""
    lay, c, run = b.layout, b.constants, b.config.run
    elements = lay.parameter_bytes // 4
    with b.phase(INITIALIZE):
        for offset in range(0, elements, MAXIMUM_ELEMENTS):
            n = min(MAXIMUM_ELEMENTS, elements - offset)
            b.launch(image("random-normal"), {"out": lay.at("parameters", 4 * offset)},
                     seed=run.seed, counter=RANDOM_STREAMS * offset, scale=c.initialization_scale, elements=n)
        for bank in ("gradients", "first-moments", "second-moments"):
            for offset in range(0, elements, MAXIMUM_ELEMENTS):
                fill(b, lay.at(bank, 4 * offset), min(MAXIMUM_ELEMENTS, elements - offset), c.zero)
        for e in lay.entries:
            if not e.is_matrix:
                fill(b, lay.bank("parameters", e.name), e.elements, c.one if e.is_gain else c.zero)
        recast(b)


def recast(b: Builder) -> None:
    """cgRecast: every matrix's half copy from its binary32 parameters."""
    lay = b.layout
    with b.phase(RECAST):
        for e in lay.entries:
            if e.is_matrix:
                cast_down(b, lay.half(e.name), lay.bank("parameters", e.name), e.elements)


def rotary_tables(b: Builder) -> None:
    """cgRotaryTables: a launch per column, a thread per position."""
    s, c, lay = b.config.shape, b.constants, b.layout
    with b.phase(ROTARY):
        for i in range(s.rotary_columns):
            b.launch(image("rotary-table", seq=s.seq),
                     {"cosine": lay.at("rotary-cosine", 4 * s.seq * i), "sine": lay.at("rotary-sine", 4 * s.seq * i)},
                     theta_high=c.rotary[2 * i], theta_low=c.rotary[2 * i + 1], inverse_two_pi=c.inverse_two_pi,
                     two_pi_high=c.two_pi[0], two_pi_low=c.two_pi[1], rounding_magic=f32.ROUNDING_MAGIC)


CHECKPOINT_BANKS = ("parameters", "first-moments", "second-moments")   # cgCheckpointBanks


def checkpoint_bytes(layout: Layout) -> int:
    return len(CHECKPOINT_BANKS) * layout.parameter_bytes


def chunks(layout: Layout) -> int:
    return -(-checkpoint_bytes(layout) // layout.staging_bytes)


def chunk_transfer(b: Builder, load: bool, chunk: int) -> None:
    """cgChunkTransfer: chunk `chunk` of the logical checkpoint (P, M, V)
    copied between its banks and the staging window, in pieces of at most
    the copy piece, cut at the banks' ends."""
    lay, run = b.layout, b.config.run
    start = chunk * lay.staging_bytes
    end = min(start + lay.staging_bytes, checkpoint_bytes(lay))
    cursor, pieces = start, 0
    with b.phase(CHECKPOINT):
        while cursor < end:
            bank = cursor // lay.parameter_bytes
            bank_end = (bank + 1) * lay.parameter_bytes
            n = min(run.copy_piece_bytes, bank_end - cursor, end - cursor)
            device = lay.at(CHECKPOINT_BANKS[bank], cursor - bank * lay.parameter_bytes)
            host = (STAGING, cursor - start)
            copy(b, device if load else host, host if load else device, n // 4)
            cursor += n
            pieces += 1
    assert pieces <= run.transfer_pieces, "validate() bounds a chunk's pieces"


def checkpoint_transfer(b: Builder, load: bool, label: str) -> None:
    """cgCheckpointTransfer, each chunk marked `label-chunk-N` for its submission."""
    for chunk in range(chunks(b.layout)):
        with b.mark(f"{label}-chunk-{chunk}"):
            chunk_transfer(b, load, chunk)


def report_transfer(b: Builder, restore: bool) -> None:
    """cgReportTransfer: the final diagnostics and logits row kept in the
    arena while checkpoint chunks pass through the staging window."""
    lay, s = b.layout, b.config.shape
    block = lay.sizes["result-diagnostics"]
    with b.phase(REPORT):
        pairs = [(lay.at("result-diagnostics"), lay.at("report"), block // 4),
                 (lay.at("result-record"), lay.at("report", block), s.vocab)]
        for host, device, words in pairs:
            copy(b, host if restore else device, device if restore else host, words)


def layer_forward(b: Builder, l: int, first: int, sequences: int) -> None:
    """cgLayerForwardWith cgStreamingAttention over `sequences` of the
    step's sequences from sequence `first` on (every launch of a layer's
    forward works on whole sequences alone): what the backward reads is
    written into the layer's saved planes."""
    s, lay, c = b.config.shape, b.layout, b.constants
    T, W, F, t0 = sequences * s.seq, s.width, s.ffn, first * s.seq
    p = lambda item: lay.bank("parameters", f"layer{l}.{item}")
    h = lambda item: lay.half(f"layer{l}.{item}")
    sv = lambda item: lay.saved(l, item, t0)
    x, out = lay.boundary(l, t0), lay.boundary(l + 1, t0)
    with b.phase(LAYER):
        layer_norm(b, sv("norm1-half"), x, p("norm1-gain"), p("norm1-shift"), sv("norm1-statistics"), T)
        # the queries, keys and values, the up and gate projections (and, in
        # the backward, the gated activation's gradient) in the half format:
        # their readers round what they make of them to it, so they are
        # written and read at half the bytes. The queries, keys and values
        # go by head, the queries and keys turned by the rotary angles, in
        # the product's epilogue (the seed's qk-rope, no launch of its own);
        # the values by head, as the backward reads them, where the seed
        # keeps V^T: the forward reads the same tiles as columns, so neither
        # the seed's value transpose nor the backward's transpose back is made
        heads = {"seq": s.seq, "heads": s.heads, "kv_heads": s.kv_heads}
        b.launch(product("r", "r", T, s.qkv_width, W, False, _half(b.config), "rope", heads),
                 {"queries": sv("queries"), "keys": sv("keys"), "values": sv("values"), "a": sv("norm1-half"),
                  "b": h("qkv"), "cosine": lay.at("rotary-cosine"), "sine": lay.at("rotary-sine")})
        b.launch(_attention(b, "attention-forward", sequences),
                 {"q": sv("queries"), "k": sv("keys"), "v": sv("values"), "out": sv("merged-half"),
                  "log_sum_exp": sv("log-sum-exp")}, stream_scale=c.stream_scale)
        tiled(b, "r", "r", T, W, W, sv("projection"), sv("merged-half"), h("output"), residual=x)
        layer_norm(b, sv("norm2-half"), sv("projection"), p("norm2-gain"), p("norm2-shift"), sv("norm2-statistics"), T)
        # the up and gate projections as one product over N = 2 F (each bank
        # holds a layer's up and gate entries side by side), each row of it
        # the up projection's row, then the gate projection's, kept for the
        # backward; its epilogue writes the gated activation gelu(gate) up
        lay.adjacent(f"layer{l}.up", f"layer{l}.gate")
        b.launch(product("r", "r", T, 2 * F, W, False, _half(b.config), "gated"),
                 {"c": sv("up-gate"), "gated": sv("gated-half"), "a": sv("norm2-half"), "b": h("up")},
                 **gelu_words(c))
        tiled(b, "r", "r", T, W, F, out, sv("gated-half"), h("down"), residual=sv("projection"))


# The layers' forward in this many shares of the step's sequences where the
# batch divides so: each share's launches touch none of another's bytes, so
# the shares' chains run side by side (measured: docs/measurements.md)
FORWARD_SHARES = 2


def forward_shares(batch: int) -> int:
    return gcd(batch, FORWARD_SHARES)


def forward(b: Builder, loss: bool = False) -> None:
    """cgForward: embed, the layers, the output (the last row's logits to
    the result record). With `loss` (a forward the loss follows: the
    update's, the evaluation's), the logits go in the half format, in the
    first half of their binary32 plane, for the loss's launches alone (half
    their bytes to write and read again, 201 MB each way at 8 x 1024); the
    result record, which the host reads only after a forward with none
    (the prediction's, the final one), is not written."""
    s, lay = b.config.shape, b.layout
    T, W, V = s.tokens, s.width, s.vocab
    with b.phase(EMBED):
        b.launch(image("gather", rows=T, width=W, vocab=V),
                 {"out": lay.boundary(0), "ids": lay.at("input-ids"), "table": lay.bank("parameters", "embedding")})
    shares = forward_shares(s.batch)
    for l in range(s.layers):
        for first in range(0, s.batch, s.batch // shares):
            layer_forward(b, l, first, s.batch // shares)
    with b.phase(OUTPUT):
        layer_norm(b, lay.at("final-half"), lay.boundary(s.layers), lay.bank("parameters", "final-gain"),
                   lay.bank("parameters", "final-shift"), lay.at("final-statistics"))
        tiled(b, "r", "r", T, V, W, lay.at("logits"), lay.at("final-half"), lay.half("embedding"),
              output="half" if loss else "binary32")
        if not loss:
            copy(b, lay.at("result-record"), lay.at("logits", (T - 1) * 4 * V), V)


def prediction(b: Builder) -> None:
    """cgPrediction: the forward, then each prediction row's logits to the
    result record and its greedy token to the predictions."""
    s, lay = b.config.shape, b.layout
    forward(b)
    with b.phase(OUTPUT):
        for index in range(len(b.config.run.prediction_rows)):
            row_logits = lay.at("result-record", index * 4 * s.vocab)
            copy(b, row_logits, lay.at("logits", b.config.prediction_row(index) * 4 * s.vocab), s.vocab)
            b.launch(image("argmax", vocab=s.vocab), {"out": lay.at("result-predictions", 4 * index),
                                                      "in": row_logits})


def loss_forward(b: Builder, gradient: Where | None = None) -> None:
    """cgLossForward: each row's target logit, its cross-entropy, and the
    rows to window 0 of the loss block. With `gradient` (the update's), the
    cross-entropy backward takes the loss and the logits' gradient in the
    half format there from one reading of the logits (the seed's
    cross-entropy, and its cross-entropy backward in the backward's first
    phase, each read them whole)."""
    s, lay, c = b.config.shape, b.layout, b.constants
    T, V = s.tokens, s.vocab
    loss = {"loss": lay.at("loss"), "logits": lay.at("logits"), "correct": lay.at("correct")}
    with b.phase(OUTPUT):
        b.launch(image("loss-target-gather", rows=T, vocab=V, half=_half(b.config)),
                 {"correct": lay.at("correct"), "logits": lay.at("logits"), "targets": lay.at("input-targets")})
        if gradient is None:
            b.launch(image("cross-entropy", rows=T, vocab=V, half=_half(b.config)), loss, log2e=c.log2e, ln2=c.ln2)
        else:
            b.launch(image("cross-entropy-backward", rows=T, vocab=V, half=_half(b.config)),
                     loss | {"gradient": gradient, "targets": lay.at("input-targets")},
                     log2e=c.log2e, ln2=c.ln2, gradient_scale=c.loss_gradient_scale)
        copy(b, lay.at("result-diagnostics"), lay.at("loss"), T)


def layer_backward(b: Builder, l: int, current: Where, other: Where) -> None:
    """cgLayerBackward: `current` holds dy entering the layer from above and
    `other` the attention branch's share; each read and rewritten in place."""
    s, lay, c = b.config.shape, b.layout, b.constants
    T, W, F = s.tokens, s.width, s.ffn
    p = lambda item: lay.bank("parameters", f"layer{l}.{item}")
    g = lambda item: lay.bank("gradients", f"layer{l}.{item}")
    h = lambda item: lay.half(f"layer{l}.{item}")
    sv = lambda item: lay.saved(l, item)
    at = lay.at
    with b.phase(FFN_DOWN):
        # `current` in the half format, as the layer norm's backward that
        # wrote it left it
        tiled(b, "r", "c", T, F, W, at("gated-gradient"), gradient_half(b), h("down"), output="half")
        tiled(b, "c", "c", W, F, T, g("down"), gradient_half(b), sv("gated-half"))
    with b.phase(FFN_GATE):
        # each row of the pair's gradient holds the up gradient's row, then
        # the gate gradient's; with the up and gate entries side by side in
        # each bank, dX = dUp Wup + dGate Wgate is one product over K = 2 F
        # (not a second one that adds the first) and the two weight
        # gradients one product over M = 2 F
        lay.adjacent(f"layer{l}.up", f"layer{l}.gate")
        b.launch(image("gated-gelu-backward", half=_half(b.config), ffn=F),
                 {"pair_gradient": at("ffn-gradient-half"), "gated_gradient": at("gated-gradient"),
                  "pair": sv("up-gate")},
                 **_gelu_scalars(b, T * F))
        tiled(b, "c", "c", 2 * F, W, T, g("up"), at("ffn-gradient-half"), sv("norm2-half"))
        # the layer norm's dy in the half format (as the other dy it reads)
        tiled(b, "r", "c", T, W, 2 * F, at("norm2-gradient"), at("ffn-gradient-half"), h("up"), output="half")
        layer_norm_backward(b, p("norm2-gain"), g("norm2-gain"), g("norm2-shift"), sv("projection"),
                            at("norm2-gradient"), sv("norm2-statistics"), other, residual=current)
    with b.phase(ATTENTION_OUTPUT):
        # and `other`, likewise
        tiled(b, "c", "c", W, W, T, g("output"), gradient_half(b), sv("merged-half"))
    with b.phase(HEAD_LAYOUT):
        # the context's gradient by head in the half format, with the row
        # terms of both attention launches, so that neither waits for the
        # other, in its product's epilogue (the seed's token-to-head and its
        # binary32 merged gradient are not made): the output's gradient is
        # still in x-hat's plane, a global. The row terms go in the seed's
        # transposed context gradient, which the streaming backward does not
        # make (row-terms is a plane of the next phase)
        b.launch(product("r", "c", T, W, W, False, _half(b.config), "heads", {"seq": s.seq, "heads": s.heads}),
                 {"heads": at("context-gradient-heads"), "row_terms": at("context-gradient-t"),
                  "a": gradient_half(b), "b": h("output"), "out": sv("merged-half")})
        # the seed's transposed queries, keys and context gradient and its
        # values by head are not made: the streaming backward reads each tile
        # both ways (ldmatrix and its transposing form, or the warpgroup
        # products' two operand layouts) from the heads' own layout, which
        # the forward saved the values in
    with b.phase(ATTENTION_HEAD):
        # the gradients transposed in the half format ([head 64][T]), each
        # launch writing its rows of the transposed qkv gradient the
        # products read, the queries' and keys' turned back by the rotary
        # angles as they are stored (the seed's inverse rotation, no launch
        # of its own)
        rows, tables = _qkv_gradient_rows(b), {"cosine": at("rotary-cosine"), "sine": at("rotary-sine")}
        pointers = {"q": sv("queries"), "k": sv("keys"), "v": sv("values"), "d_out": at("context-gradient-heads"),
                    "log_sum_exp": sv("log-sum-exp"), "row_terms": at("context-gradient-t"),
                    "d_q": rows["queries"], "d_k": rows["keys"], "d_v": rows["values"]} | tables
        for family in attention_backward(s.batch, s.seq, s.heads, s.kv_heads):
            img = _attention(b, family)
            b.launch(img, {a.name: pointers[a.name] for a in img.arguments if a.name in pointers},
                     stream_scale=c.stream_scale, score_scale=c.score_scale)
    with b.phase(QKV):
        # the qkv gradient transposed ([qkv][T]: the products read A from
        # it as rows, the weight gradient's, or as columns, the data's)
        tiled(b, "r", "c", s.qkv_width, W, T, g("qkv"), at("qkv-gradient-t"), sv("norm1-half"))
        tiled(b, "c", "c", T, W, s.qkv_width, at("norm1-gradient"), at("qkv-gradient-t"), h("qkv"), output="half")
        layer_norm_backward(b, p("norm1-gain"), g("norm1-gain"), g("norm1-shift"), lay.boundary(l),
                            at("norm1-gradient"), sv("norm1-statistics"), current, residual=other)


def backward(b: Builder) -> None:
    """cgBackward: the loss, the logits' gradient, the output's backward, the
    layers from the top, the embedding's ordered scatter."""
    s, lay = b.config.shape, b.layout
    T, W, V = s.tokens, s.width, s.vocab
    at = lay.at
    # the logits' gradient in the half format, in the first half of the
    # binary32 plane the seed gives it: the seed's cast-down of it into a
    # plane of the next phase is not made (the products read it here)
    gradient = at("logits-gradient")
    loss_forward(b, gradient)
    with b.phase(OUTPUT_GRADIENT):
        tiled(b, "c", "c", V, W, T, lay.bank("gradients", "embedding"), gradient, at("final-half"))
        tiled(b, "r", "c", T, W, V, at("final-gradient"), gradient, lay.half("embedding"), output="half")
        layer_norm_backward(b, lay.bank("parameters", "final-gain"), lay.bank("gradients", "final-gain"),
                            lay.bank("gradients", "final-shift"), lay.boundary(s.layers), at("final-gradient"),
                            at("final-statistics"), at("residual-gradient"))
    for from_top in range(s.layers):
        layer_backward(b, s.layers - 1 - from_top, at("residual-gradient"), at("attention-residual-gradient"))
    with b.phase(SCATTER):
        # the ids to the device first: every block of the scatter reads them
        # all, and from the staging window each read crosses the bus. x-hat's
        # plane is free by now (the layer norms' backward is done)
        ids = at("normalized-input")
        copy(b, ids, at("input-ids"), T)
        b.launch(image("embedding-scatter", rows=T, width=W, vocab=V),
                 {"gradient": lay.bank("gradients", "embedding"), "dy": at("residual-gradient"), "ids": ids})


def window(b: Builder, index: int) -> Where:
    """cgWindow: window `index` of the loss block."""
    return b.layout.at("result-diagnostics", index * 4 * b.config.shape.tokens)


def update(b: Builder) -> None:
    """cgUpdate: one update's shared part. The seed's backward finds the
    gradients zero (the initialization clears them and every AdamW clears
    each after its update); ours writes each gradient before anything reads
    it, so AdamW leaves them as they are."""
    forward(b, loss=True)
    backward(b)
    with b.phase(DIAGNOSTICS):
        copy(b, window(b, 1), b.layout.bank("gradients", "embedding"), b.config.shape.tokens)


def adamw_pieces(lay: Layout) -> list[tuple[int, int]]:
    """The bank's byte ranges AdamW updates in one launch each: the
    embedding, each layer's items, the final gain and shift. Together they
    are the whole bank (the pads between entries included), so each
    element is updated exactly as by the seed's one launch; a layer's
    piece waits only for that layer's gradients and the reads of its
    weights, not for the whole backward pass."""
    def piece(name: str) -> str:   # embedding; layer3.qkv -> layer3; final-gain -> final
        return name.split(".")[0] if name.startswith("layer") else name.split("-")[0]

    starts: dict[str, int] = {}
    for e in lay.entries:
        starts.setdefault(piece(e.name), e.offset)
    bounds = sorted(starts.values()) + [lay.parameter_bytes]
    return list(zip(bounds, bounds[1:]))


def adamw(b: Builder, step: int) -> None:
    """cgAdamW, a launch per piece of the bank (`adamw_pieces`), writing the
    half copies beside each update (not clearing the gradients: see
    `update`). The pieces go in the order the backward pass finishes their
    gradients (the final gain and shift first, the embedding last), so none
    is held behind one whose gradients come later.

    Each piece but the last runs beside the backward pass on a block of half
    the multiprocessors, each block walking the piece a grid's stride at a
    time: a block on every multiprocessor held some of each one's registers
    for the piece's whole walk, and a launch needing a multiprocessor's
    nearly all waited for it (at 1 x 1024 the embedding's scatter, 55,296
    registers a block, started 24 us late, when layer 0's piece ended; the
    update 2.244 / 2.250 -> 2.231 / 2.220 ms, at 8 x 1024 10.09 / 10.09 ->
    10.09 / 10.13). The last, the embedding's, ends the update alone and
    takes them all."""
    lay, c = b.layout, b.constants
    words = f32.adam_words(b.config.learner, step)
    pieces = list(reversed(adamw_pieces(lay)))
    with b.phase(ADAMW):
        for n, (start, stop) in enumerate(pieces):
            elements = (stop - start) // 4
            blocks = FILL_BLOCKS if n == len(pieces) - 1 else FILL_BLOCKS // 2
            b.launch(image("adamw", f"adamw-{elements}-{blocks}", elements=elements, half=_half(b.config),
                           blocks=blocks),
                     {"parameters": lay.at("parameters", start), "gradients": lay.at("gradients", start),
                      "first_moments": lay.at("first-moments", start),
                      "second_moments": lay.at("second-moments", start),
                      "halves": lay.at("half-copies", start // 2)},
                     beta1=c.beta1, one_minus_beta1=c.one_minus_beta1, beta2=c.beta2,
                     one_minus_beta2=c.one_minus_beta2, decay=c.decay, **words)


def final(b: Builder) -> None:
    """cgFinal: the forward on the result, the final diagnostics, the report
    kept aside."""
    lay, T = b.layout, b.config.shape.tokens
    forward(b)
    with b.phase(DIAGNOSTICS):
        for index, bank in ((1, "gradients"), (2, "parameters"), (3, "first-moments")):
            copy(b, window(b, index), lay.bank(bank, "embedding"), T)
        report_transfer(b, restore=False)


def loss_record(b: Builder) -> None:
    """cgLossRecord: window 0 to each update's slot of the loss record."""
    lay, T = b.layout, b.config.shape.tokens
    with b.phase(LOSS_RECORD):
        for k in range(b.config.run.update_pieces):
            with b.mark(f"loss-record-{k}"):
                copy(b, lay.at("result-loss-record", k * 4 * T), window(b, 0), T)


def evaluate(b: Builder) -> None:
    """The forward and the loss on a batch the host wrote, no update: the
    validation loss (ours; the seed's run has none). Its rows land in window
    0 of the loss block, as an update's do."""
    forward(b, loss=True)
    loss_forward(b)


def launch_schedule(b: Builder) -> None:
    """coppeliusLaunchSchedule, stretch by stretch (marked for the submissions),
    and after it the evaluation, so the seed's launch order is a prefix."""
    run, first = b.config.run, b.config.learner.first_step
    stretches = [("initialize", lambda: initialization(b)),
                 ("default-save", lambda: checkpoint_transfer(b, False, "default-save")),
                 ("load", lambda: checkpoint_transfer(b, True, "load")),
                 ("recast", lambda: recast(b)),
                 ("rotary", lambda: rotary_tables(b)),
                 ("prediction", lambda: prediction(b)),
                 ("update", lambda: update(b))]
    stretches += [(f"adamw-{k}", lambda k=k: adamw(b, first + k)) for k in range(run.update_pieces)]
    stretches += [("final", lambda: final(b)),
                  ("save", lambda: checkpoint_transfer(b, False, "save")),
                  ("restore", lambda: report_transfer(b, restore=True)),
                  ("loss-record", lambda: loss_record(b)),
                  ("evaluate", lambda: evaluate(b))]
    for name, build in stretches:
        with b.mark(name):
            build()
