"""The certificate's verdicts for a person (text), a program (JSON) and a
code-scanning tool (SARIF 2.1.0).

A counterexample names what a fix needs: the planes and their byte ranges,
the bytes in question, the launch (index, image, phase, argument) that
writes while the other access still needs the bytes, that other access, and
the path through the schedule between the two.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import metadata

from planner.certify.findings import FAIL, PASS, UNKNOWN, Outcome, Result, Violation

FORMATS = ("text", "json", "sarif")


def render(outcome: Outcome, fmt: str = "text", plan_name: str = "") -> str:
    if fmt == "json":
        return json.dumps(to_json(outcome), indent=2) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif(outcome, plan_name), indent=2) + "\n"
    return text(outcome)


# ---- text ----

def text(outcome: Outcome) -> str:
    lines = [f"plan {outcome.digest[:16]}"]
    for r in outcome.results:
        how = f"{r.candidates} candidates, Z3 {r.answer}" if r.query else "machine code"
        lines.append(f"  {r.number:<3} {r.property:<12} {r.verdict:<8} ({how}, {r.seconds:.2f} s)")
    for r in outcome.results:
        if r.verdict == UNKNOWN:
            lines.append(f"\nUNKNOWN {r.number} {r.property}: {r.title}: the solver gave no answer"
                         + (f" ({r.reason})" if r.reason else ""))
        for v in r.violations:
            lines.append("")
            lines += violation_lines(r, v)
    lines.append("")
    lines.append(summary(outcome))
    return "\n".join(lines) + "\n"


def summary(outcome: Outcome) -> str:
    counts = {PASS: 0, FAIL: 0, UNKNOWN: 0}
    for r in outcome.results:
        counts[r.verdict] += 1
    proved = ", ".join(r.property for r in outcome.results if r.verdict == PASS) or "nothing"
    head = {PASS: "certified", FAIL: "NOT certified", UNKNOWN: "NOT certified (unknown)"}[outcome.verdict]
    return (f"{head}: {counts[PASS]} of {len(outcome.results)} properties proved ({proved}); "
            f"{counts[FAIL]} failed, {counts[UNKNOWN]} unknown; {outcome.queries} queries in "
            f"{outcome.seconds:.2f} s ({outcome.solver})")


def violation_lines(r: Result, v: Violation) -> list[str]:
    lines = [f"FAIL {r.number} {r.property}: {v.message}"]
    for k, p in enumerate(v.planes):
        lines.append(f"  {'planes:' if k == 0 else '':<10}{p}")
    if v.overlap is not None:
        lines.append(f"  {'bytes:':<10}{v.overlap}")
    if v.writer is not None:
        lines.append(f"  {'writer:':<10}{v.writer}")
    if v.other is not None:
        lines.append(f"  {'other:':<10}{v.other}")
    if v.path:
        how = {True: "happens before", False: "NOT ordered", None: ""}[v.path_ordered]
        lines.append(f"  {'path:':<10}({how})" if how else "  path:")
        lines += [f"    {step}" for step in v.path]
    if v.witness:
        # the byte in hex, as every address in the report
        lines.append(f"  {'model:':<10}" + " ".join(f"{k}={val:#x}" if k == "b" else f"{k}={val}"
                                                   for k, val in v.witness.items()))
    return lines


# ---- JSON ----

def to_json(outcome: Outcome) -> dict:
    return {
        "plan": outcome.digest,
        "verdict": outcome.verdict,
        "seconds": round(outcome.seconds, 3),
        "solver": outcome.solver,
        "queries": outcome.queries,
        "properties": [{
            "id": r.property, "number": r.number, "title": r.title, "verdict": r.verdict,
            "answer": r.answer, "reason": r.reason, "candidates": r.candidates, "seconds": round(r.seconds, 3),
            "violations": [asdict(v) for v in r.violations],
        } for r in outcome.results],
    }


# ---- SARIF 2.1.0 ----

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _version() -> str:
    try:
        return metadata.version("planner")
    except metadata.PackageNotFoundError:
        return "0"


def to_sarif(outcome: Outcome, plan_name: str = "") -> dict:
    rules = [{"id": r.property, "name": r.property, "shortDescription": {"text": r.title},
              "properties": {"number": r.number}} for r in outcome.results]
    index = {r.property: i for i, r in enumerate(outcome.results)}
    results = []
    for r in outcome.results:
        if r.verdict == UNKNOWN:
            results.append({"ruleId": r.property, "ruleIndex": index[r.property], "kind": "open",
                            "level": "warning",
                            "message": {"text": f"{r.title}: the solver gave no answer ({r.reason or 'unknown'})"}})
        for v in r.violations:
            results.append(_sarif_result(r, v, index[r.property], plan_name))
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "planner certify", "version": _version(), "rules": rules}},
            "invocations": [{"executionSuccessful": outcome.verdict != UNKNOWN,
                             "properties": {"plan": outcome.digest, "seconds": round(outcome.seconds, 3),
                                            "solver": outcome.solver, "verdict": outcome.verdict}}],
            "results": results,
        }],
    }


def _sarif_result(r: Result, v: Violation, rule_index: int, plan_name: str) -> dict:
    located = []
    for actor in (v.writer, v.other):
        if actor is None:
            continue
        name = f"launch {actor.launch}" if actor.launch is not None else f"run step {actor.run_step}"
        located.append({"logicalLocations": [{
            "name": f"{name} {actor.argument}",
            "fullyQualifiedName": f"{actor.phase}/{name}/{actor.image}/{actor.argument}",
            "kind": "parameter"}]})
    if not located:
        located = [{"logicalLocations": [{"name": p.name, "kind": "variable"} for p in v.planes] or
                    [{"name": plan_name or "plan", "kind": "module"}]}]
    out = {"ruleId": r.property, "ruleIndex": rule_index, "kind": "fail", "level": "error",
           "message": {"text": v.message}, "locations": located[:1],
           "properties": asdict(v)}
    if len(located) > 1:
        out["relatedLocations"] = [dict(loc, id=i) for i, loc in enumerate(located[1:])]
    if v.path:
        out["codeFlows"] = [{"threadFlows": [{"locations": [
            {"location": {"message": {"text": step.strip()}}} for step in v.path]}]}]
    return out
