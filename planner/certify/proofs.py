"""Certificates: what the runtime demands before it launches a plan, and the
files that record them for the shipped configurations.

A `Certificate` holds a plan's digest and every property's verdict; only an
outcome where every property passed (none failed, none unknown) yields one,
and it admits only the plan whose digest it holds.

On disk a certificate is a directory (one per configuration, under the
repository's proofs/): certificate.json (the plan's digest, the solver and
its version, each property's verdict, candidates and time, each query
file's SHA-256, and for the machine code each cubin it attests and the
check that decided it) and one SMT-LIB 2 file per query, the exact text Z3
decided. Checking a directory derives the plan, its queries and its cubins
afresh and compares: a different digest, query text, cubin or check means
the stored certificate is stale. Resolving it decides every stored query
file again, by Z3 and by a second solver written apart from it (cvc5),
so that a proof does not rest on one solver's soundness: both must answer
unsat.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import z3

from planner.certify.findings import PASS, Outcome
from planner.certify.smt import UNSAT, solver_version
from planner.files import Unreadable, read_json, written_whole
from planner.schedule.plan import Plan

SCHEMA = "planner-certificate/1"
RECORD = "certificate.json"
TIMEOUT_MS = 60_000   # for deciding a stored query again


class Uncertified(RuntimeError):
    """A plan without a certificate: it must not be launched."""


@dataclass(frozen=True)
class Certificate:
    digest: str                              # the plan's digest
    verdicts: tuple[tuple[str, str], ...]    # (property, verdict): all pass
    solver: str
    # "image@arch" -> SHA-256 of each cubin a machine-code check passed
    cubins: dict[str, str] = field(default_factory=dict)

    def admits(self, plan: Plan) -> bool:
        return plan.digest == self.digest

    def require(self, plan: Plan) -> None:
        if not self.admits(plan):
            raise Uncertified(f"plan {plan.digest[:16]} is not the certified plan {self.digest[:16]}")

    def summary(self) -> str:
        return f"{len(self.verdicts)} properties proved ({', '.join(p for p, _ in self.verdicts)}), {self.solver}"


def issue(outcome: Outcome) -> Certificate:
    """The certificate of a full pass; `Uncertified` otherwise."""
    if outcome.verdict != PASS:
        bad = ", ".join(f"{r.property} {r.verdict}" for r in outcome.results if r.verdict != PASS)
        raise Uncertified(f"plan {outcome.digest[:16]} is not certified: {bad}")
    cubins: dict[str, str] = {}
    for r in outcome.results:
        cubins.update(r.attested)
    return Certificate(outcome.digest, tuple((r.property, r.verdict) for r in outcome.results), outcome.solver,
                       cubins)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def record(outcome: Outcome) -> dict:
    return {
        "schema": SCHEMA,
        "plan": outcome.digest,
        "solver": outcome.solver,
        "verdict": outcome.verdict,
        "seconds": round(outcome.seconds, 3),
        "properties": [{
            "id": r.property, "number": r.number, "verdict": r.verdict, "answer": r.answer,
            "candidates": r.candidates, "seconds": round(r.seconds, 3),
            **({"query": f"{r.property}.smt2", "sha256": _sha(r.query)} if r.query else {}),
            **({"attested": r.attested} if r.attested else {}),
            **({"checker": r.checker} if r.checker else {}),
        } for r in outcome.results],
    }


def write(outcome: Outcome, directory: Path) -> Path:
    """Write the certificate of `outcome` (passed or not: the record says)
    to `directory`, replacing what was there."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.smt2"):
        old.unlink()
    for r in outcome.results:
        if r.query:
            (directory / f"{r.property}.smt2").write_text(r.query)
    path = directory / RECORD
    with written_whole(path, "w") as f:  # the record, which names the queries, last and whole
        f.write(json.dumps(record(outcome), indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Check:
    """How a stored certificate compares with the plan's own."""

    current: bool
    problems: tuple[str, ...]


def check(outcome: Outcome, directory: Path, resolve: bool = False) -> Check:
    """Compare the certificate in `directory` with `outcome` (the plan's,
    decided now): the same plan, the same queries, all proved. With
    `resolve`, Z3 decides every stored query file again as well."""
    path = directory / RECORD
    if not path.is_file():
        return Check(False, (f"{path}: no certificate",))
    try:
        stored = read_json(path)
    except Unreadable as error:
        return Check(False, (f"{path}: {error}",))
    problems = []
    if not isinstance(stored, dict) or stored.get("schema") != SCHEMA:
        return Check(False, (f"{path}: not a {SCHEMA} record",))
    if stored.get("plan") != outcome.digest:
        problems.append(f"stale: it certifies plan {str(stored.get('plan'))[:16]}, the plan now is {outcome.digest[:16]}")
    if stored.get("verdict") != PASS:
        problems.append(f"it records verdict {stored.get('verdict')}, not pass")
    entries = {e.get("id"): e for e in stored.get("properties", []) if isinstance(e, dict)}
    for r in outcome.results:
        entry = entries.pop(r.property, None)
        if entry is None:
            problems.append(f"property {r.property}: missing")
            continue
        if r.query and entry.get("sha256") != _sha(r.query):
            problems.append(f"property {r.property}: stale query (the plan's query is not the stored one)")
        stored_attested = entry.get("attested", {})
        changed = sorted(k for k in stored_attested.keys() | r.attested.keys()
                         if stored_attested.get(k) != r.attested.get(k))
        if changed:
            problems.append(f"property {r.property}: stale attestations ({len(changed)} cubins differ, "
                            f"{changed[0]} first)")
        if entry.get("checker", "") != r.checker:
            problems.append(f"property {r.property}: stale: decided by another machine-code check "
                            f"({str(entry.get('checker'))[:16]}, now {r.checker[:16]})")
        if resolve and r.query:
            problems += _resolve(directory / f"{r.property}.smt2", entry.get("sha256"))
    problems += [f"property {name}: recorded but no longer checked" for name in entries]
    return Check(not problems, tuple(problems))


def _resolve(path: Path, sha: str | None) -> list[str]:
    """Z3 and cvc5 decide a stored query file again; it must be the recorded
    one, and both must answer unsat."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return [f"{path.name}: missing"]
    if _sha(text) != sha:
        return [f"{path.name}: not the file the record names (SHA-256 differs)"]
    solver = z3.Solver()
    solver.set("timeout", TIMEOUT_MS)
    try:
        solver.add(z3.parse_smt2_string(text))
        first = str(solver.check())
    except z3.Z3Exception as error:
        first = f"that it cannot read it ({error})"
    answers = {solver_version(): first, second_solver_version(): second_answer(text)}
    return [f"{path.name}: {name} now answers {answer}" for name, answer in answers.items() if answer != UNSAT]


def second_solver_version() -> str:
    import cvc5

    version = cvc5.Solver(cvc5.TermManager()).getVersion()
    return f"cvc5 {version.decode() if isinstance(version, bytes) else version}"


def second_answer(text: str) -> str:
    """cvc5's answer to an SMT-LIB 2 query (its last check-sat's: sat,
    unsat or unknown), or why it could not read it."""
    import cvc5

    solver = cvc5.Solver(cvc5.TermManager())
    solver.setOption("tlimit-per", str(TIMEOUT_MS))
    parser = cvc5.InputParser(solver)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "query")
    symbols, answer = parser.getSymbolManager(), "no answer (no check-sat)"
    try:
        while not (command := parser.nextCommand()).isNull():
            answer = command.invoke(solver, symbols).strip() or answer
    except RuntimeError as error:
        return f"that it cannot read it ({error})"
    return answer
