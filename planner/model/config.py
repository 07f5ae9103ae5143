"""Coppelius's configuration: the shape, the learner and the run.

Everything the plan contains is derived from one `Config`. Values the seed
imports from modules we do not have (the learner's and the run's) get common
defaults, each documented once here. A bad value is refused with a
`ConfigError` that names the field, the value and the rule it breaks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from planner.files import Unreadable, read_json


class ConfigError(ValueError):
    """A configuration value breaks a rule the kernels or the layout rely on."""

    def __init__(self, field_name: str, value: Any, rule: str):
        super().__init__(f"{field_name} = {value!r}: {rule}")
        self.field_name = field_name
        self.value = value
        self.rule = rule


# The head width the streaming attention images are written for (seed 002:
# fragments of 64 columns), and the query/key tile they stream.
HEAD_WIDTH = 64
ATTENTION_TILE = 64
# The vocabulary is walked in tiles of 128 (the cross-entropy backward's
# blocks; the seed's 256 would refuse GPT-2's padded 50304).
VOCAB_TILE = 128
# The counts the plan's lists grow with (every layer's launches, every update
# piece's submission, every prediction row's copy) are held to MAX_COUNT, so
# that planning a configuration takes seconds to minutes, not memory without
# end (a plan keeps about 3 KB a launch: 2^31 layers would take terabytes);
# sizes to MAX_BYTES, the most a plan file's sizes and offsets hold.
MAX_COUNT = 1024
MAX_BYTES = 1 << 48


@dataclass(frozen=True)
class Shape:
    """The model (seed `Coppelius.Build.Graph`, `cg*`) and the step's batch."""

    layers: int = 16          # cgLayers
    width: int = 512          # cgWidth
    heads: int = 8            # cgHeads
    kv_heads: int = 8         # K/V heads (grouped attention); the seed's equal heads
    ffn: int = 1408           # cgFfn
    vocab: int = 12288        # cgVocab
    seq: int = 1024           # cgSeq: tokens in one sequence
    batch: int = 1            # sequences per step

    @property
    def head_width(self) -> int:
        return self.width // self.heads

    @property
    def tokens(self) -> int:
        """Rows of every token-major plane: the step's sequences end to end."""
        return self.batch * self.seq

    @property
    def qkv_width(self) -> int:
        """Columns of the qkv projection: the queries' heads, then keys', then values'."""
        return (self.heads + 2 * self.kv_heads) * self.head_width

    @property
    def rotary_columns(self) -> int:
        return self.head_width // 2


@dataclass(frozen=True)
class Learner:
    """AdamW and the half format, as exact rationals (numerator, denominator)."""

    learning_rate: Fraction = Fraction(3, 10000)
    beta1: Fraction = Fraction(9, 10)
    beta2: Fraction = Fraction(95, 100)
    epsilon: Fraction = Fraction(1, 10**8)
    weight_decay: Fraction = Fraction(1, 10)
    # The logits' gradient is scaled by this so binary16 gradients keep their
    # small values; AdamW's epsilon is scaled alike, so nothing is unscaled.
    loss_scale: int = 1024
    # Every matrix is drawn with this deviation (GPT-2's 0.02).
    init_deviation: Fraction = Fraction(1, 50)
    half: str = "binary16"    # or "bfloat16"
    first_step: int = 1       # coppeliusFirstStep: the moment correction's t


HALF_FORMATS = ("binary16", "bfloat16")


@dataclass(frozen=True)
class Run:
    """What one invocation does, and the host window it talks through."""

    seed: int = 1234
    # coppeliusUpdatePieces: updates per invocation; each has its own AdamW
    # launch (its step size) and loss-record window ("ten loss-record copies
    # close the updates").
    update_pieces: int = 10
    # Rows whose greedy next token the prediction reports (counted from the
    # end of the step's rows when negative).
    prediction_rows: tuple[int, ...] = (-769, -257, -1)
    # The staging window: host memory the device maps; the checkpoint passes
    # through it in chunks of its size.
    staging_bytes: int = 4 << 20
    # Launches a checkpoint chunk may take (cgTransferPieces), each copying at
    # most `copy_piece_bytes` (cgPieceBytes: 1024 blocks of 256 words).
    transfer_pieces: int = 8
    copy_piece_bytes: int = 1 << 20
    # The device arena must fit in this many bytes.
    arena_limit: int = 16 << 30


@dataclass(frozen=True)
class Config:
    shape: Shape = field(default_factory=Shape)
    learner: Learner = field(default_factory=Learner)
    run: Run = field(default_factory=Run)

    def prediction_row(self, index: int) -> int:
        row = self.run.prediction_rows[index]
        return row + self.shape.tokens if row < 0 else row


def _rule(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise ConfigError(name, value, rule)


def validate(config: Config) -> Config:
    """Check every rule the images and the layout rely on; return the config."""
    s, lr, r = config.shape, config.learner, config.run
    for f in fields(Shape):
        v = getattr(s, f.name)
        _rule(isinstance(v, int) and not isinstance(v, bool) and v > 0,
              f"shape.{f.name}", v, "must be a positive integer")
    _rule(s.layers <= MAX_COUNT, "shape.layers", s.layers, f"must be at most {MAX_COUNT}")
    _rule(s.width % s.heads == 0, "shape.heads", s.heads, f"must divide shape.width ({s.width})")
    _rule(s.head_width == HEAD_WIDTH, "shape.heads", s.heads,
          f"width / heads must be {HEAD_WIDTH}, the head width the attention images are written for")
    _rule(s.heads % s.kv_heads == 0, "shape.kv_heads", s.kv_heads,
          f"must divide shape.heads ({s.heads}): each K/V head serves a whole group of query heads")
    _rule(s.seq % ATTENTION_TILE == 0, "shape.seq", s.seq, f"must be a multiple of {ATTENTION_TILE}")
    _rule(s.vocab % VOCAB_TILE == 0, "shape.vocab", s.vocab, f"must be a multiple of {VOCAB_TILE}")
    _rule(s.vocab <= 1 << 16, "shape.vocab", s.vocab, "must be at most 65536 (tokens are stored as uint16)")
    _rule(s.width % 64 == 0, "shape.width", s.width, "must be a multiple of 64 (the products' tiles)")
    _rule(s.ffn % 64 == 0, "shape.ffn", s.ffn, "must be a multiple of 64 (the products' tiles)")
    _rule(s.tokens % 64 == 0, "shape.batch", s.batch, "batch x seq must be a multiple of 64")

    for name in ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "init_deviation"):
        v = getattr(lr, name)
        _rule(isinstance(v, Fraction), f"learner.{name}", v, "must be an exact rational")
    _rule(0 < lr.learning_rate < 1, "learner.learning_rate", str(lr.learning_rate), "must lie in (0, 1)")
    for name in ("beta1", "beta2"):
        v = getattr(lr, name)
        _rule(0 <= v < 1, f"learner.{name}", str(v), "must lie in [0, 1)")
    _rule(lr.epsilon > 0, "learner.epsilon", str(lr.epsilon), "must be positive")
    _rule(0 <= lr.weight_decay and lr.learning_rate * lr.weight_decay < 1, "learner.weight_decay",
          str(lr.weight_decay), "must be non-negative with learning_rate x weight_decay < 1")
    _rule(lr.init_deviation > 0, "learner.init_deviation", str(lr.init_deviation), "must be positive")
    _rule(isinstance(lr.loss_scale, int) and lr.loss_scale >= 1 and lr.loss_scale & (lr.loss_scale - 1) == 0,
          "learner.loss_scale", lr.loss_scale, "must be a power of two (so scaling is exact)")
    _rule(lr.half in HALF_FORMATS, "learner.half", lr.half, f"must be one of {', '.join(HALF_FORMATS)}")
    _rule(isinstance(lr.first_step, int) and lr.first_step >= 1, "learner.first_step", lr.first_step,
          "must be a positive integer")

    _rule(isinstance(r.seed, int) and 0 <= r.seed < 1 << 32, "run.seed", r.seed, "must be a 32-bit unsigned integer")
    _rule(isinstance(r.update_pieces, int) and 1 <= r.update_pieces <= MAX_COUNT, "run.update_pieces",
          r.update_pieces, f"must be a positive integer, at most {MAX_COUNT}")
    _rule(len(r.prediction_rows) >= 1, "run.prediction_rows", r.prediction_rows, "must name at least one row")
    _rule(len(r.prediction_rows) <= MAX_COUNT, "run.prediction_rows", len(r.prediction_rows),
          f"names that many rows; at most {MAX_COUNT}")
    for row in r.prediction_rows:
        _rule(isinstance(row, int) and -s.tokens <= row < s.tokens, "run.prediction_rows", r.prediction_rows,
              f"every row must lie in [-{s.tokens}, {s.tokens})")
    _rule(0 < r.copy_piece_bytes <= MAX_BYTES and r.copy_piece_bytes % 1024 == 0, "run.copy_piece_bytes",
          r.copy_piece_bytes, f"must be a positive multiple of 1024, at most {MAX_BYTES}")
    _rule(0 < r.staging_bytes <= MAX_BYTES and r.staging_bytes % 0x1000 == 0, "run.staging_bytes", r.staging_bytes,
          f"must be a positive multiple of 4096, at most {MAX_BYTES}")
    # A chunk crosses at most one bank's end, so it needs one piece more than
    # its bytes alone; the seed's transfer takes at most `transfer_pieces`.
    _rule(isinstance(r.transfer_pieces, int)
          and r.staging_bytes <= (r.transfer_pieces - 1) * r.copy_piece_bytes,
          "run.staging_bytes", r.staging_bytes,
          f"a checkpoint chunk must fit in transfer_pieces - 1 ({r.transfer_pieces - 1}) copy pieces "
          f"of {r.copy_piece_bytes} bytes")
    _rule(isinstance(r.arena_limit, int) and 0 < r.arena_limit <= MAX_BYTES, "run.arena_limit", r.arena_limit,
          f"must be a positive integer, at most {MAX_BYTES}")
    return config


DEFAULT = Config()


# ---- reading a configuration: JSON with the same field names ----

def _fraction(name: str, value: Any) -> Fraction:
    if isinstance(value, bool):
        raise ConfigError(name, value, "must be a rational: an integer, 'p/q' or a decimal string")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, str):
        try:
            return Fraction(value)
        except (ValueError, ZeroDivisionError):
            pass
    if isinstance(value, list) and len(value) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                          for x in value) and value[1] != 0:
        return Fraction(value[0], value[1])
    raise ConfigError(name, value, "must be a rational: an integer, 'p/q', a decimal string or [p, q]")


def _section(cls: type, name: str, data: Any, base: Any) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(name, data, "must be an object")
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{name}.{key}", value, f"is not a field of {name} ({', '.join(known)})")
        default = getattr(base, key)
        if isinstance(default, Fraction):
            value = _fraction(f"{name}.{key}", value)
        elif isinstance(default, tuple):
            if not isinstance(value, list):
                raise ConfigError(f"{name}.{key}", value, "must be a list")
            value = tuple(value)
        elif isinstance(default, bool) or type(value) is not type(default):
            raise ConfigError(f"{name}.{key}", value, f"must be of type {type(default).__name__}")
        values[key] = value
    return replace(base, **values)


def from_dict(data: Any) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("configuration", data, "must be an object with shape, learner and run")
    for key in data:
        if key not in ("shape", "learner", "run"):
            raise ConfigError(key, data[key], "is not a section (shape, learner, run)")
    return validate(Config(
        shape=_section(Shape, "shape", data.get("shape", {}), DEFAULT.shape),
        learner=_section(Learner, "learner", data.get("learner", {}), DEFAULT.learner),
        run=_section(Run, "run", data.get("run", {}), DEFAULT.run),
    ))


def load(path: str | Path) -> Config:
    try:
        data = read_json(path)
    except Unreadable as error:
        raise ConfigError("configuration", str(path), str(error)) from None
    return from_dict(data)


def to_dict(config: Config) -> dict:
    """The configuration as JSON-ready data (rationals as 'p/q' strings)."""
    def plain(value: Any) -> Any:
        if isinstance(value, Fraction):
            return f"{value.numerator}/{value.denominator}"
        if isinstance(value, tuple):
            return list(value)
        return value
    return {section: {k: plain(v) for k, v in asdict(getattr(config, section)).items()}
            for section in ("shape", "learner", "run")}
