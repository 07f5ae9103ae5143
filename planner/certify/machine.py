"""Property 6 over a plan: every image it launches compiled for each
architecture and its SASS schedule checked (`planner.certify.sass`); the
SHA-256 of each cubin that passes is attested, and the runtime loads only
attested cubins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from planner.certify.findings import MachineFindings, Violation
from planner.kernels.manifest import ARCHS, dependent_launch
from planner.schedule.plan import Plan

if TYPE_CHECKING:   # for the annotation: `check` imports the SASS package when it runs
    from planner.certify.sass.check import Report

NAME = "machine-code"


def unwaited(report: Report, arch: str) -> list[tuple[str, tuple[int, str]]]:
    """The kernels of a cubin's report that may touch memory, or end, before
    griddepcontrol.wait, where launches start while those before drain
    (sm_90 on): (kernel, (offset, instruction)). Such a cubin is refused."""
    if not dependent_launch(arch):
        return []
    return [(k.kernel, k.before_wait) for k in report.kernels if k.before_wait is not None]


def sass_check(archs: Iterable[str] = ARCHS):
    """A machine-code check (property 6) for `archs`."""
    archs = tuple(dict.fromkeys(archs))

    def check(plan: Plan) -> MachineFindings:
        from planner.certify.sass import check_cubins, fingerprint
        from planner.runtime.nvrtc import CompileError, cache_directory, compile_image

        violations, unknown, attested = [], [], {}
        for arch in archs:
            cubins = {}
            for img in plan.images:
                try:
                    cubins[img.name] = compile_image(img, arch)
                except CompileError as error:
                    violations.append(Violation(NAME, f"image {img.name} ({arch}) does not compile: "
                                                      f"{error.reason()}"))
            for name, report in check_cubins(cubins, arch, cache_directory() / "sass").items():
                waits_late = unwaited(report, arch)
                if report.status == "pass" and not waits_late:
                    attested[f"{name}@{arch}"] = report.sha256
                for finding in report.findings:
                    violations.append(Violation(NAME, f"image {name} ({arch}): {finding.text()}"))
                for kernel, (offset, text) in waits_late:
                    violations.append(Violation(NAME, f"image {name} ({arch}): {kernel} reaches {offset:#06x} {text} "
                                                      f"before griddepcontrol.wait: it may touch memory, or end, "
                                                      f"while the launch before it is still running (the launches "
                                                      f"after it wait for that one through it)"))
                for u in report.unknowns:
                    unknown.append(f"image {name} ({arch}): {u.describe()}")
        return MachineFindings(tuple(violations), tuple(unknown), attested, fingerprint())

    return check
