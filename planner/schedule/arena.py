"""The seed layout: every plane of the arena and the staging window, placed
as seed `Coppelius.Build.Graph` places them, and the phases' declarations.

Offsets follow the seed's rules, computed from the configuration: parameter
entries bump-allocated at 0x100; the banks P, G, M, V and everything after
them at 0x1000; the half copies parallel to P (element i's half at byte 2i
of the half bank); the workspace a chain of page-aligned items
(`cgNext`); the output's and the backward's planes reusing workspace items
exactly as the seed assigns them (`cgScratch = cgScores`, ...).

Adaptations: rows are the step's tokens (batch x sequence); keys and values
are sized by the K/V heads; the rotary tables are column-major (a column per
frequency, a row per position) so each rotary launch writes one contiguous
column; the staging window's layout, which the seed imports, is ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from planner.model.config import Config, ConfigError
from planner.schedule.plan import DEVICE, HOST_MAPPED, Phase, Plane, Window

PARAMETER_ALIGNMENT = 0x100   # cgParameterAlignment
BANK_ALIGNMENT = 0x1000       # cgBankAlignment
STAGING_ALIGNMENT = 0x100
LAYER_ITEMS = ("norm1-gain", "norm1-shift", "qkv", "output", "norm2-gain", "norm2-shift", "up", "gate", "down")
ARENA, STAGING = "arena", "staging"
# The loss block's windows: the step's loss rows, the embedding's gradient,
# parameters and first moments (the first `window words` of each).
LOSS_WINDOWS = 4


def align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class Entry:
    """One parameter entry: its name, offset in a bank, and shape."""

    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        return 4 * self.elements

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2

    @property
    def is_gain(self) -> bool:
        return self.name.endswith("-gain") or self.name == "final-gain"


def entries(config: Config) -> tuple[Entry, ...]:
    """The parameter entries (cgEntryOffsets): the embedding, each layer's
    items, the final gain and shift, bump-allocated at 0x100."""
    s = config.shape
    shapes = [("embedding", (s.vocab, s.width))]
    item_shapes = {"qkv": (s.qkv_width, s.width), "output": (s.width, s.width),
                   "up": (s.ffn, s.width), "gate": (s.ffn, s.width), "down": (s.width, s.ffn)}
    for l in range(s.layers):
        shapes += [(f"layer{l}.{k}", item_shapes.get(k, (s.width,))) for k in LAYER_ITEMS]
    shapes += [("final-gain", (s.width,)), ("final-shift", (s.width,))]
    out, cursor = [], 0
    for name, shape in shapes:
        cursor = align(cursor, PARAMETER_ALIGNMENT)
        e = Entry(name, cursor, shape)
        out.append(e)
        cursor += e.bytes
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """Every address the launches use, as (window, offset) numbers."""

    config: Config
    entries: tuple[Entry, ...]
    parameter_bytes: int
    offsets: dict[str, int]        # plane name -> offset in its window
    sizes: dict[str, int]          # plane name -> bytes
    windows: dict[str, str]        # plane name -> window
    saved_layer_bytes: int
    saved_offsets: dict[str, int]  # saved item -> offset within a layer's block
    saved_sizes: dict[str, int]    # saved item -> bytes (each a whole number of bytes a token)
    arena_bytes: int

    @property
    def staging_bytes(self) -> int:
        return self.config.run.staging_bytes

    def entry(self, name: str) -> Entry:
        return self._entry_map[name]

    @cached_property
    def _entry_map(self) -> dict[str, Entry]:
        return {e.name: e for e in self.entries}

    def at(self, plane: str, plus: int = 0) -> tuple[str, int]:
        return self.windows[plane], self.offsets[plane] + plus

    def bank(self, bank: str, entry: str) -> tuple[str, int]:
        return self.at(bank, self.entry(entry).offset)

    def half(self, entry: str) -> tuple[str, int]:
        """An entry's half copy: half its offset into the half bank."""
        return self.at("half-copies", self.entry(entry).offset // 2)

    def adjacent(self, first: str, second: str) -> None:
        """Entry `second` starts where `first` ends, in every bank and in the
        half copies, so that one product reads or writes both (bump
        allocation keeps them so: a valid shape's matrices are whole
        alignment units)."""
        a, b = self.entry(first), self.entry(second)
        if a.offset + a.bytes != b.offset:
            raise ValueError(f"entries {first} and {second} are not side by side in the banks")

    def boundary(self, l: int, first: int = 0) -> tuple[str, int]:
        """Layer boundary l's residual stream, from token `first` on."""
        return self.at("boundaries", l * self.boundary_stride + first * 4 * self.config.shape.width)

    @property
    def boundary_stride(self) -> int:
        """The bytes between layer boundaries: the boundaries plane holds one
        residual-stream plane, page-aligned, per layer and one more."""
        return self.sizes["boundaries"] // (self.config.shape.layers + 1)

    def saved(self, l: int, item: str, first: int = 0) -> tuple[str, int]:
        """Layer l's saved item, from token `first` on: every item holds
        its tokens (or sequences, each a run of tokens) one after another."""
        per_token = self.saved_sizes[item] // self.config.shape.tokens
        return self.at("saved-activations", l * self.saved_layer_bytes + self.saved_offsets[item] + first * per_token)


def seed_layout(config: Config) -> Layout:
    s, run = config.shape, config.run
    T, W, H, KV, F, V, S = s.tokens, s.width, s.heads, s.kv_heads, s.ffn, s.vocab, s.seq
    D = s.head_width
    ents = entries(config)
    parameter_bytes = ents[-1].offset + ents[-1].bytes          # cgParameterBytes

    # sizes of the seed's items
    plane = 4 * T * W                       # cgPlaneBytes
    half_plane = 2 * T * W
    statistics = 8 * T
    qkv = 4 * T * s.qkv_width
    heads_half = 2 * H * T * D
    kv_half = 2 * KV * T * D
    scores = 4 * s.batch * H * S * S
    lse = 4 * H * T
    ffn, ffn_half = 4 * T * F, 2 * T * F
    rows = 4 * T
    row_bytes = 4 * V
    logits, logits_half = T * row_bytes, 2 * T * V
    rotary_table = 4 * S * s.rotary_columns

    off: dict[str, int] = {}
    size: dict[str, int] = {}

    def put(name: str, at: int, nbytes: int) -> int:
        off[name], size[name] = at, nbytes
        return at

    def after(name: str) -> int:
        """cgNext: the page after a plane."""
        return align(off[name] + size[name], BANK_ALIGNMENT)

    def chain(start: int, items: list[tuple[str, int]]) -> None:
        at = start
        for name, nbytes in items:
            put(name, at, nbytes)
            at = after(name)

    # the banks, the half copies, the boundaries, the rotary tables
    put("parameters", 0, parameter_bytes)
    put("gradients", align(parameter_bytes, BANK_ALIGNMENT), parameter_bytes)
    put("first-moments", align(off["gradients"] + parameter_bytes, BANK_ALIGNMENT), parameter_bytes)
    put("second-moments", align(off["first-moments"] + parameter_bytes, BANK_ALIGNMENT), parameter_bytes)
    put("half-copies", align(off["second-moments"] + parameter_bytes, BANK_ALIGNMENT), parameter_bytes // 2)
    boundary_start = align(off["half-copies"] + size["half-copies"], BANK_ALIGNMENT)
    put("boundaries", boundary_start, (s.layers + 1) * align(plane, BANK_ALIGNMENT))
    put("rotary-cosine", align(boundary_start + size["boundaries"], BANK_ALIGNMENT), rotary_table)
    put("rotary-sine", off["rotary-cosine"] + rotary_table, rotary_table)
    work = align(off["rotary-sine"] + rotary_table, BANK_ALIGNMENT)

    # the workspace: a layer's tensors, each page-aligned after the previous
    chain(work, [("norm1", plane), ("norm1-statistics", statistics), ("norm1-half", half_plane),
                 ("qkv", qkv), ("queries", heads_half), ("keys", kv_half), ("values-t", kv_half),
                 ("scores", scores), ("log-sum-exp", lse), ("row-terms", lse), ("values-heads", kv_half),
                 ("norm-scratch", plane), ("merged-half", half_plane), ("projection", plane),
                 ("norm2", plane), ("norm2-statistics", statistics), ("norm2-half", half_plane),
                 ("up", ffn), ("gate", ffn), ("gelu", ffn), ("gated", ffn), ("gated-half", ffn_half),
                 ("down", plane)])

    # the output's planes, from the workspace's start
    chain(off["norm1"], [("final-norm", plane), ("final-statistics", statistics), ("final-half", half_plane),
                         ("logits", logits), ("loss", rows), ("correct", rows), ("logits-gradient", logits)])
    put("logits-gradient-half", off["logits"], logits_half)
    chain(after("logits-gradient-half"), [("logits-gradient-t", logits_half)])
    chain(after("logits-gradient"), [("final-half-t", half_plane), ("final-gradient", plane),
                                      ("embedding-half-t", 2 * V * W)])

    # the backward's planes, in the scratch (the scores item) and the items
    # dead by then
    scratch = off["scores"]
    chain(scratch, [("down-gated-t", ffn_half), ("down-weight-t", 2 * F * W), ("down-dy-t", half_plane),
                    ("down-dy-half", half_plane)])
    put("gated-gradient", off["qkv"], ffn)
    chain(scratch, [("up-gradient", ffn), ("gelu-gradient", ffn), ("gate-gradient", ffn),
                    ("ffn-input-t", half_plane), ("ffn-gradient-half", 2 * ffn_half), ("ffn-gradient-t", ffn_half),
                    ("norm2-up-gradient", plane), ("ffn-weight-t", 2 * F * W)])
    put("norm2-gradient", off["down"], plane)
    put("norm2-input-gradient", off["norm-scratch"], plane)
    put("output-dy-half", off["norm2-half"], half_plane)
    chain(scratch, [("output-dy-t", half_plane), ("output-merged-t", half_plane), ("output-weight-t", 2 * W * W)])
    chain(off["up"], [("queries-t", heads_half), ("keys-t", kv_half), ("context-gradient-t", heads_half)])
    # where the ffn's items are smaller than the heads' planes (an ffn
    # below about width / 8), the gated half would end inside the row terms
    # the same launch writes in context-gradient-t: the plane goes past them
    put("context-gradient-heads", max(off["gated-half"], after("context-gradient-t")), heads_half)
    # the qkv gradient, transposed in the half format: the attention
    # backward writes its rows, the queries' and keys' turned back by the
    # rotary angles (the seed's gradients by head and its token-major
    # qkv-gradient-half are not made)
    put("qkv-gradient-half", off["gated"], 2 * T * s.qkv_width)
    chain(scratch, [("qkv-gradient-t", 2 * T * s.qkv_width), ("qkv-input-t", half_plane),
                    ("qkv-weight-t", 2 * s.qkv_width * W)])
    put("norm1-gradient", off["norm-scratch"], plane)
    put("norm1-input-gradient", off["down"], plane)

    # the residual gradients, x-hat and the report, past the workspace (x-hat's
    # plane holds the layer norm backward's column sums and, in its second
    # half, its gradient in the half format: launches.layer_norm_backward)
    work_end = max(off[name] + size[name] for name in ("down", "embedding-half-t", "context-gradient-heads"))
    staging = staging_layout(config)
    loss_block = staging["result-diagnostics"][1]
    put("residual-gradient", align(work_end, BANK_ALIGNMENT), plane)
    put("attention-residual-gradient", off["residual-gradient"] + plane, plane)
    put("normalized-input", off["attention-residual-gradient"] + plane, plane)
    put("report", off["normalized-input"] + plane, loss_block + row_bytes)

    # the saved activations: what each layer's backward reads of its forward
    # (not the seed's gelu plane: the backward works GELU out again from the
    # gate, as cheaply as it could read it; the values by head in the place
    # of the seed's V^T, cgSvValuesT: the forward and the backward both read
    # them in that layout; and the up and gate projections in the half
    # format, side by side in each row as their one product makes them, in
    # the place of the seed's binary32 up, cgSvUp, whose bytes they fill:
    # its gate, cgSvGate, is not kept)
    saved_items = [("norm1-statistics", statistics), ("norm1-half", half_plane), ("queries", heads_half),
                   ("keys", kv_half), ("values", kv_half), ("log-sum-exp", lse), ("merged-half", half_plane),
                   ("projection", plane), ("norm2-statistics", statistics), ("norm2-half", half_plane),
                   ("up-gate", ffn), ("gated-half", ffn_half)]
    saved_offsets, saved_sizes, cursor = {}, dict(saved_items), 0
    for name, nbytes in saved_items:
        saved_offsets[name] = cursor
        cursor = align(cursor + nbytes, BANK_ALIGNMENT)
    saved_layer_bytes = cursor
    put("saved-activations", align(off["report"] + size["report"], BANK_ALIGNMENT), s.layers * saved_layer_bytes)
    arena_bytes = align(off["saved-activations"] + size["saved-activations"], BANK_ALIGNMENT)
    if arena_bytes > run.arena_limit:
        raise ConfigError("run.arena_limit", run.arena_limit,
                          f"the seed layout needs an arena of {arena_bytes} bytes")

    windows = {name: ARENA for name in off}
    for name, (at, nbytes) in staging.items():
        off[name], size[name], windows[name] = at, nbytes, STAGING
    return Layout(config, ents, parameter_bytes, off, size, windows, saved_layer_bytes, saved_offsets, saved_sizes,
                  arena_bytes)


def staging_layout(config: Config) -> dict[str, tuple[int, int]]:
    """The staging window's planes (offset, bytes): the inputs the host
    writes, the results it reads, and the checkpoint window over all of it."""
    s, run = config.shape, config.run
    window = 4 * s.tokens                   # a loss window: every row's loss
    rows = len(run.prediction_rows)
    planes = [("input-ids", 4 * s.tokens), ("input-targets", 4 * s.tokens),
              ("result-diagnostics", LOSS_WINDOWS * window), ("result-record", rows * 4 * s.vocab),
              ("result-predictions", 4 * rows), ("result-loss-record", run.update_pieces * window)]
    out, cursor = {}, 0
    for name, nbytes in planes:
        cursor = align(cursor, STAGING_ALIGNMENT)
        out[name] = (cursor, nbytes)
        cursor += nbytes
    if cursor > run.staging_bytes:
        raise ConfigError("run.staging_bytes", run.staging_bytes,
                          f"the staging window must hold the step's inputs and results ({cursor} bytes)")
    out["checkpoint-window"] = (0, run.staging_bytes)
    return out


# ---- what a plane holds (for reports and pictures) ----

def _describe(config: Config, layout: Layout) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each plane's element type and shape; planes not listed are binary32
    vectors (a bank, a block of per-layer items)."""
    s = config.shape
    T, W, F, V, S, H, KV, B = s.tokens, s.width, s.ffn, s.vocab, s.seq, s.heads, s.kv_heads, s.batch
    half = "f16" if config.learner.half == "binary16" else "bf16"
    f32_planes = {"norm1", "norm2", "final-norm", "down", "norm-scratch", "projection", "final-gradient",
                  "norm2-up-gradient", "norm2-gradient", "norm2-input-gradient", "norm1-gradient",
                  "norm1-input-gradient", "residual-gradient", "attention-residual-gradient", "normalized-input"}
    half_planes = {"norm1-half", "norm2-half", "final-half", "merged-half", "final-half-t", "down-dy-t",
                   "down-dy-half", "ffn-input-t", "output-dy-half", "output-dy-t", "output-merged-t", "qkv-input-t"}
    d: dict[str, tuple[str, tuple[int, ...]]] = {n: ("f32", (T, W)) for n in f32_planes}
    d |= {n: (half, (T, W)) for n in half_planes}
    d |= {n: ("f32", (T, F)) for n in ("up", "gate", "gelu", "gated", "gated-gradient", "up-gradient",
                                         "gelu-gradient", "gate-gradient")}
    d |= {n: (half, (T, F)) for n in ("gated-half", "ffn-gradient-t", "down-gated-t")}
    d["ffn-gradient-half"] = (half, (T, 2 * F))   # each row the up gradient's, then the gate gradient's
    d |= {n: (half, (B, H, S, 64)) for n in ("queries", "queries-t", "context-gradient-heads", "context-gradient-t")}
    d |= {n: (half, (B, KV, S, 64)) for n in ("keys", "values-t", "values-heads", "keys-t")}
    d |= {"log-sum-exp": ("f32", (B, H, S)),
          "row-terms": ("f32", (B, H, S)), "scores": ("f32", (B, H, S, S)),
          "qkv": ("f32", (T, s.qkv_width)), "qkv-gradient-half": (half, (T, s.qkv_width)),
          "qkv-gradient-t": (half, (s.qkv_width, T)), "qkv-weight-t": (half, (W, s.qkv_width)),
          "logits": ("f32", (T, V)), "logits-gradient": ("f32", (T, V)), "logits-gradient-half": (half, (T, V)),
          "logits-gradient-t": (half, (V, T)), "embedding-half-t": (half, (W, V)),
          "down-weight-t": (half, (F, W)), "ffn-weight-t": (half, (W, F)), "output-weight-t": (half, (W, W)),
          "norm1-statistics": ("f32", (T, 2)), "norm2-statistics": ("f32", (T, 2)),
          "final-statistics": ("f32", (T, 2)), "loss": ("f32", (T,)), "correct": ("f32", (T,)),
          "rotary-cosine": ("f32", (s.rotary_columns, S)), "rotary-sine": ("f32", (s.rotary_columns, S)),
          "input-ids": ("i32", (T,)), "input-targets": ("i32", (T,)),
          "result-predictions": ("u32", (len(config.run.prediction_rows),)),
          "result-record": ("f32", (len(config.run.prediction_rows), V)),
          "result-loss-record": ("f32", (config.run.update_pieces, T)),
          "result-diagnostics": ("f32", (LOSS_WINDOWS, T)), "checkpoint-window": ("u8", (layout.staging_bytes,)),
          "half-copies": (half, (layout.parameter_bytes // 4,)),
          "boundaries": ("f32", (s.layers + 1, T, W))}
    for name, nbytes in layout.sizes.items():
        d.setdefault(name, ("f32", (nbytes // 4,)))
    return d


GLOBALS = ("parameters", "gradients", "first-moments", "second-moments", "half-copies", "boundaries",
           "residual-gradient", "attention-residual-gradient", "normalized-input", "report",
           "saved-activations")

# coppeliusDevicePhases: each phase's fresh planes, then its carried planes
PHASES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("coppelius/initialize", (), ()),
    ("coppelius/recast", (), ()),
    ("coppelius/checkpoint", ("checkpoint-window",), ()),
    ("coppelius/report", ("result-diagnostics", "result-record"), ()),
    ("coppelius/gradient-zero", (), ()),
    ("coppelius/embed", ("input-ids",), ()),
    ("coppelius/layer", ("norm1", "qkv", "norm2", "gated", "down", "rotary-cosine", "rotary-sine"), ()),
    ("coppelius/output", ("final-norm", "final-statistics", "final-half", "logits", "loss", "correct",
                          "logits-gradient", "result-record", "result-predictions", "input-targets",
                          "result-diagnostics"), ()),
    ("coppelius/output-gradient", ("logits-gradient-half", "logits-gradient-t", "final-half-t", "final-gradient",
                                   "embedding-half-t"), ("logits-gradient", "final-half", "final-statistics")),
    ("coppelius/ffn-down", ("down-gated-t", "down-weight-t", "down-dy-t", "down-dy-half", "gated-gradient"), ()),
    ("coppelius/ffn-gate", ("up-gradient", "gelu-gradient", "gate-gradient", "ffn-input-t", "ffn-gradient-half",
                            "ffn-gradient-t", "norm2-up-gradient", "ffn-weight-t", "norm2-gradient",
                            "norm2-input-gradient"), ("gated-gradient",)),
    ("coppelius/attention-output", ("output-dy-half", "output-dy-t", "output-merged-t", "output-weight-t"), ()),
    ("coppelius/head-layout", ("context-gradient-heads", "values-heads", "queries-t", "keys-t",
                               "context-gradient-t"), ()),
    # (the seed's: the attention backward's gradients by head, carried into
    # qkv, where a launch of its own turned them back into the qkv gradient;
    # ours: the attention backward's launches make the qkv gradient, reading
    # the rotary tables)
    ("coppelius/attention-head", ("row-terms", "qkv-gradient-t", "rotary-cosine", "rotary-sine"),
     ("context-gradient-heads", "values-heads", "queries-t", "keys-t", "context-gradient-t")),
    ("coppelius/qkv", ("qkv-gradient-half", "qkv-input-t", "qkv-weight-t", "norm1-gradient",
                       "norm1-input-gradient"), ("qkv-gradient-t",)),
    ("coppelius/scatter", ("input-ids",), ()),
    ("coppelius/adamw", (), ()),
    ("coppelius/diagnostics", ("result-diagnostics",), ()),
    ("coppelius/loss-record", ("result-diagnostics", "result-loss-record"), ()),
    ("coppelius/rotary", ("rotary-cosine", "rotary-sine"), ()),
)


def arena_declarations(config: Config, layout: Layout) -> tuple[tuple[Window, ...], tuple[Plane, ...],
                                                                tuple[str, ...], tuple[Phase, ...]]:
    """The windows, the named planes (those the certificate knows: globals
    and phase planes), the globals and the phases."""
    described = _describe(config, layout)
    named = set(GLOBALS) | {p for _, fresh, carried in PHASES for p in fresh + carried}
    planes = []
    for name in sorted(named, key=lambda n: (layout.windows[n], layout.offsets[n], n)):
        dtype, shape = described[name]
        alignment = STAGING_ALIGNMENT if layout.windows[name] == STAGING else (
            BANK_ALIGNMENT if layout.offsets[name] % BANK_ALIGNMENT == 0 else PARAMETER_ALIGNMENT)
        planes.append(Plane(name, layout.windows[name], layout.offsets[name], layout.sizes[name], alignment,
                            dtype, tuple(shape)))
    windows = (Window(ARENA, layout.arena_bytes, DEVICE), Window(STAGING, layout.staging_bytes, HOST_MAPPED))
    phases = tuple(Phase(n, fresh, carried) for n, fresh, carried in PHASES)
    return windows, tuple(planes), GLOBALS, phases
