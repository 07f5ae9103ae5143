"""What the properties read from a plan: every access with the plane it lies
in, and the run's nodes that perform them.

An access of a launch belongs to the plane of the launch's phase (fresh or
carried) or the global that contains it; a host step's access to the plane
the step names, if that contains it. An access no such plane contains
belongs to none: property 1 reports it, and the liveness properties leave it
out (its writes still count as writes of the bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.schedule.graph import LAUNCH, STEP, RunGraph, host_access
from planner.schedule.plan import HOST_READ, HOST_WRITE, Access, Plan, Plane


@dataclass(frozen=True, slots=True)
class Site:
    """One access of a launch, or the access of a host step, where it lies."""

    id: int
    launch: int          # launch index, or -1 for a host step
    step: int            # the host step's run position, or -1
    access: Access
    plane: str | None    # the plane it lies in

    @property
    def start(self) -> int:
        return self.access.start

    @property
    def stop(self) -> int:
        return self.access.stop


def phase_planes(plan: Plan, phase: str) -> tuple[Plane, ...]:
    """The planes a launch of `phase` may touch: its fresh and carried planes
    and the globals, each once."""
    p = plan.phase[phase]
    names = dict.fromkeys(p.fresh + p.carried + plan.globals)
    return tuple(plan.plane[n] for n in names)


def containing(planes: tuple[Plane, ...], access: Access) -> Plane | None:
    """The smallest plane of `planes` that holds all of `access`."""
    fits = [p for p in planes
            if p.window == access.window and p.offset <= access.start and access.stop <= p.stop]
    return min(fits, key=lambda p: (p.bytes, p.offset, p.name), default=None)


class Facts:
    """A plan's sites, and its run: the graph and, for every node, its sites."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.run = RunGraph(plan)
        self.sites: list[Site] = []
        self.launch_sites: list[tuple[Site, ...]] = []
        allowed = {phase.name: phase_planes(plan, phase.name) for phase in plan.phases}
        # Launches repeat the same accesses (a layer's, a chunk's): look each up once.
        homes: dict[tuple[str, Access], Plane | None] = {}
        for launch in plan.launches:
            sites = []
            for a in launch.accesses:
                key = (launch.phase, a)
                if key not in homes:
                    homes[key] = containing(allowed[launch.phase], a)
                sites.append(self._site(launch.index, -1, a, homes[key]))
            self.launch_sites.append(tuple(sites))
        self.step_sites: dict[int, Site] = {}
        for position, step in enumerate(plan.run):
            if step.kind in (HOST_WRITE, HOST_READ):
                a = host_access(step)
                self.step_sites[position] = self._site(-1, position, a, containing((plan.plane[step.plane],), a))

    def _site(self, launch: int, step: int, access: Access, plane: Plane | None) -> Site:
        site = Site(len(self.sites), launch, step, access, plane.name if plane else None)
        self.sites.append(site)
        return site

    def node_sites(self, n: int) -> tuple[Site, ...]:
        node = self.run.nodes[n]
        if node.kind == LAUNCH:
            return self.launch_sites[node.launch]
        if node.kind == STEP and node.step in self.step_sites:
            return (self.step_sites[node.step],)
        return ()
