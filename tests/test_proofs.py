"""The stored certificate of the shipped configuration is current: CI fails
when the plan changed and `proofs/` was not written again."""

from __future__ import annotations

from pathlib import Path

from planner.certify import certify, proofs, with_machine_code

PROOFS = Path(__file__).resolve().parents[1] / "proofs"


def test_default_certificate_is_current(default_plan):
    outcome = certify(default_plan, machine=with_machine_code())
    found = proofs.check(outcome, PROOFS / "default", resolve=True)
    assert found.current, "proofs/default is stale (planner certify --write-proofs): " + "; ".join(found.problems)
    assert outcome.ok
