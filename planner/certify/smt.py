"""Queries as SMT-LIB 2 text, and the one Z3 solver that decides them.

A query asks: is there a candidate k, and witness integers (a byte b, a
time t), such that candidate k's facts put the witnesses where the property
fails? Each candidate is one ground disjunct `(and (= k i) ...)` over the
witnesses, in quantifier-free linear integer arithmetic: intervals as their
bounds, never bytes one by one. A model is a counterexample: k names the
candidate, b a byte it gets wrong, t a moment it does.

The text is the certificate's record of the query, and Z3 reads that same
text: what the proof file says is what was decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import z3

SAT, UNSAT, UNKNOWN = "sat", "unsat", "unknown"


@dataclass(frozen=True)
class Query:
    name: str                       # the property's id
    title: str                      # one line: what a model would be
    witnesses: tuple[str, ...]      # integer constants besides k the rows speak of
    rows: tuple[str, ...]           # candidate i's ground constraint, without (= k i)

    @cached_property
    def text(self) -> str:
        head = [f"; {self.name}: {self.title}", "(set-logic QF_LIA)", "(declare-const k Int)"]
        head += [f"(declare-const {w} Int)" for w in self.witnesses]
        if self.rows:
            body = ["(assert (or"] + [f" (and (= k {i}) {row})" for i, row in enumerate(self.rows)] + ["))"]
        else:
            body = ["(assert false)"]
        return "\n".join(head + body + ["(check-sat)", ""])


@dataclass(frozen=True)
class Answer:
    verdict: str                         # sat | unsat | unknown
    models: tuple[dict[str, int], ...]   # one per counterexample found (k and the witnesses)
    reason: str = ""                     # why unknown


def solver_version() -> str:
    return f"Z3 {z3.get_full_version()}"


class Prover:
    """One solver for every query: each in its own push/pop scope."""

    def __init__(self, timeout_ms: int = 60_000):
        self.solver = z3.Solver()
        self.solver.set("timeout", timeout_ms)

    def decide(self, query: Query, limit: int = 1) -> Answer:
        """Z3's verdict on `query`, with up to `limit` counterexamples (each
        later one excluded the candidates found before)."""
        s = self.solver
        s.push()
        try:
            s.add(z3.parse_smt2_string(query.text))
            verdict = s.check()
            if verdict == z3.unknown:
                return Answer(UNKNOWN, (), s.reason_unknown())
            models = []
            found = verdict
            k = z3.Int("k")
            names = ("k",) + query.witnesses
            while found == z3.sat and len(models) < limit:
                m = s.model()
                models.append({n: m.eval(z3.Int(n), model_completion=True).as_long() for n in names})
                s.add(k != models[-1]["k"])
                found = s.check()
            return Answer(SAT if verdict == z3.sat else UNSAT, tuple(models))
        finally:
            s.pop()
