"""The certificate: a plan's safety properties decided by Z3 before anything
runs (`certify`), and what the runtime demands before it launches a plan
(`demand_certificate`)."""

from typing import Iterable

from planner.certify.findings import MachineFindings, Outcome, Violation
from planner.certify.machine import ARCHS, NAME, sass_check
from planner.certify.proofs import Certificate, Uncertified, issue
from planner.certify.properties import check as certify
from planner.certify.properties import register
from planner.schedule.plan import Plan


def demand_certificate(plan: Plan, archs: Iterable[str] = ARCHS) -> Certificate:
    """Decide every property over `plan` now, machine code for `archs`
    included; its certificate, or `Uncertified` naming what failed."""
    return issue(certify(plan, machine=with_machine_code(archs)))


def with_machine_code(archs: Iterable[str] = ARCHS) -> dict:
    """The registered machine-code checks and the SASS schedule check."""
    from planner.certify.properties import MACHINE_CHECKS
    return MACHINE_CHECKS | {NAME: sass_check(archs)}


__all__ = ["Certificate", "MachineFindings", "Outcome", "Uncertified", "Violation", "certify",
           "demand_certificate", "register"]
