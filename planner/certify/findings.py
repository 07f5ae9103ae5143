"""What the certificate finds: a property's verdict and, when it fails, the
counterexamples, each with what a person needs to fix it."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"


@dataclass(frozen=True)
class Span:
    """Bytes [start, stop) of a window, and the plane's name when they are one."""

    window: str
    start: int
    stop: int
    name: str = ""

    def __str__(self) -> str:
        where = f"{self.window} [{self.start:#x}, {self.stop:#x}) ({self.stop - self.start} bytes)"
        return f"{self.name} {where}" if self.name else where


@dataclass(frozen=True)
class Actor:
    """An access as the run performs it: a launch's argument or a host step."""

    run_step: int               # the run position (of the submit step, for a launch)
    launch: int | None          # launch index
    image: str                  # image name, or "host"
    phase: str                  # phase name, or "host"
    argument: str               # argument name, or what the host step moves
    mode: str                   # read | write | read-write
    span: Span
    plane: str | None = None    # the plane the access lies in

    def __str__(self) -> str:
        if self.launch is None:
            return f"host step {self.run_step} {self.mode}s {self.span}"
        return (f"launch {self.launch} {self.image} ({self.phase}) argument {self.argument} "
                f"{self.mode}s {self.span}")


@dataclass(frozen=True)
class Violation:
    """One counterexample: Z3's model read back into the plan's terms."""

    property: str                      # property id
    message: str                       # one line
    planes: tuple[Span, ...] = ()      # the planes involved, with their byte ranges
    overlap: Span | None = None        # the bytes in question
    writer: Actor | None = None        # the access that writes (while the other is live)
    other: Actor | None = None         # the access it clashes with
    path: tuple[str, ...] = ()         # the schedule between the two accesses
    path_ordered: bool | None = None   # whether that path is directed (one happens before the other)
    witness: dict[str, int] = field(default_factory=dict)   # the model's values


@dataclass(frozen=True)
class Result:
    """A property's verdict over a plan."""

    property: str
    number: int
    title: str
    verdict: str                       # pass | fail | unknown
    violations: tuple[Violation, ...] = ()
    candidates: int = 0                # rows of the query Z3 decided
    seconds: float = 0.0
    query: str = ""                    # the SMT-LIB text (empty for checks that are not queries)
    answer: str = ""                   # Z3's answer: sat | unsat | unknown
    reason: str = ""                   # why unknown
    attested: dict[str, str] = field(default_factory=dict)   # what a machine-code check vouches for
    checker: str = ""                  # the machine-code check that decided it (its fingerprint)


@dataclass(frozen=True)
class MachineFindings:
    """What a machine-code check (property 6) returns."""

    violations: tuple[Violation, ...] = ()
    unknown: tuple[str, ...] = ()      # what it could not decide, each a line
    # "image@arch" -> SHA-256 of each cubin it passed: the runtime loads only these
    attested: dict[str, str] = field(default_factory=dict)
    # the check itself: its code, its latency model and its disassembler
    # (what else the verdicts rest on), as a digest
    checker: str = ""


@dataclass(frozen=True)
class Outcome:
    """Every property's result over one plan."""

    digest: str                        # the plan's digest
    results: tuple[Result, ...]
    seconds: float
    solver: str                        # the solver and its version

    @property
    def verdict(self) -> str:
        verdicts = {r.verdict for r in self.results}
        return FAIL if FAIL in verdicts else UNKNOWN if UNKNOWN in verdicts else PASS

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    @property
    def queries(self) -> int:
        return sum(1 for r in self.results if r.query)
