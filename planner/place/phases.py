"""A placed plan's phases: its liveness declared at the launches' grain.

A phase declares planes live together while its launches run. In a placed
plan tensors that are never live together share bytes, so a seed phase (one
name for every layer's forward, say) cannot declare its planes any more:
they would overlap. Each seed phase is cut into stretches of consecutive
launches whose planes are pairwise disjoint (one launch's own planes always
are: they are all live while it runs), named `<seed phase>@<first launch>`.
A stretch declares the planes its launches write as fresh and those they
only read as carried; the globals stay globals. So every access lies in
exactly one plane of its phase or a global, the declarations hold as
declared, and a certificate that computes live intervals per plane sees
each access in the plane it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from planner.schedule.plan import Access, Launch, Phase, Plane

SEPARATOR = "@"


def seed_phase(name: str) -> str:
    """The seed phase a stretch was cut from (a seed phase is its own)."""
    return name.split(SEPARATOR)[0]


@dataclass
class _Stretch:
    phase: str
    first: int
    planes: dict[str, Plane] = field(default_factory=dict)
    fresh: dict[str, None] = field(default_factory=dict)
    read: dict[str, None] = field(default_factory=dict)

    def admits(self, phase: str, planes: list[Plane]) -> bool:
        return phase == self.phase and all(
            p.name in self.planes or all(q.window != p.window or q.stop <= p.offset or p.stop <= q.offset
                                         for q in self.planes.values())
            for p in planes)

    @property
    def name(self) -> str:
        return f"{self.phase}{SEPARATOR}{self.first}"


def stretches(launches: tuple[Launch, ...], home: Callable[[Launch, Access], Plane | None]
              ) -> tuple[dict[int, str], tuple[Phase, ...]]:
    """Each launch's new phase, and the phases; `home` gives the plane an
    access lies in (None for a global)."""
    of_launch: dict[int, str] = {}
    done: list[_Stretch] = []
    current: _Stretch | None = None
    for launch in launches:
        homes = [(a, home(launch, a)) for a in launch.accesses]
        planes = [p for _, p in homes if p is not None]
        phase = seed_phase(launch.phase)
        if current is None or not current.admits(phase, planes):
            current = _Stretch(phase, launch.index)
            done.append(current)
        for a, p in homes:
            if p is not None:
                current.planes[p.name] = p
                (current.fresh if a.writes else current.read)[p.name] = None
        of_launch[launch.index] = current.name
    phases = tuple(Phase(s.name, tuple(s.fresh), tuple(n for n in s.read if n not in s.fresh)) for s in done)
    return of_launch, phases
