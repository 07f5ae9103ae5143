"""The placed plan: every site of a moved tensor shifted to its new offset.

Pointer slots are rewritten and accesses recomputed from them through the
images' manifests, so the placed plan is a plan like any other and passes
`check_consistent`. Its planes are the tensors: the pinned planes and the
windows not placed keep theirs, every moved tensor becomes a plane named
after it, and the window shrinks to the placement. The phases are cut to
the launches' grain (`phases`). `notes["placement"]` lists each moved
plane's sites, so any checker can attribute every access to its plane.
"""

from __future__ import annotations

from dataclasses import replace

from planner.place.liveness import Liveness, Site, Tensor, host_site
from planner.place.phases import stretches
from planner.schedule.arena import align
from planner.schedule.order import ordered
from planner.schedule.plan import (Access, Address, HOST_READ, HOST_WRITE, Launch, Plan, Plane, Step, Window,
                                   check_consistent, launch_accesses)

LAYOUT = "placed"
PAGE = 0x1000   # the window's size is a whole number of pages, as the seed's


def _plane(plan: Plan, t: Tensor, offset: int) -> Plane:
    """The tensor as a plane; the element type and shape of the declared
    plane it fills exactly, bytes otherwise."""
    same = [p for p in plan.planes if p.window == t.window and p.offset == t.start and p.stop == t.stop]
    dtype, shape = (same[0].dtype, same[0].shape) if same else ("u8", (t.bytes,))
    return Plane(t.name, t.window, offset, t.bytes, t.alignment, dtype, shape)


def _moved_launches(plan: Plan, shift: dict[Site, int]) -> list[Launch]:
    out = []
    for launch in plan.launches:
        slots = tuple(replace(s, value=Address(s.value.window, s.value.offset + shift[(launch.index, s.argument)]))
                      if isinstance(s.value, Address) and (launch.index, s.argument) in shift else s
                      for s in launch.slots)
        if slots != launch.slots:
            launch = replace(launch, slots=slots, accesses=launch_accesses(plan.image[launch.image], slots))
        out.append(launch)
    return out


def _moved_run(plan: Plan, shift: dict[Site, int]) -> tuple[Step, ...]:
    out = []
    for n, step in enumerate(plan.run):
        delta = shift.get(host_site(n), 0) if step.kind in (HOST_WRITE, HOST_READ) else 0
        out.append(replace(step, start=step.start + delta, stop=step.stop + delta) if delta else step)
    return tuple(out)


def relocate(lv: Liveness, window: str, offsets: dict[str, int], notes: dict) -> Plan:
    """`lv.plan` with each tensor named in `offsets` moved to that offset
    of `window` (absolute); `notes` are added under notes["placement"]."""
    plan = lv.plan
    moved = [t for t in lv.tensors if t.name in offsets]
    shift: dict[Site, int] = {s: offsets[t.name] - t.start for t in moved for s in t.sites}

    pinned = {t.name for t in lv.tensors if t.pinned}
    planes = [p for p in plan.planes if p.window != window or p.name in pinned]
    planes += [_plane(plan, t, offsets[t.name]) for t in moved]
    planes.sort(key=lambda p: (p.window, p.offset, p.name))
    by_name = {p.name: p for p in planes}
    top = max((p.stop for p in planes if p.window == window), default=0)
    windows = tuple(Window(w.name, align(top, PAGE), w.memory) if w.name == window else w
                    for w in plan.windows)
    globals_ = tuple(g for g in plan.globals if g in by_name)
    tensor_of = lv.tensor_of()

    def home(launch: Launch, a: Access) -> Plane | None:
        """The plane an access of the placed plan lies in (None: a global)."""
        if a.window == window:
            plane = by_name.get(tensor_of[(launch.index, a.argument)].name)
        else:   # as the plan declared it: the smallest plane of its phase that holds it
            declared = plan.phase[launch.phase]
            fits = [plan.plane[n] for n in declared.fresh + declared.carried + plan.globals
                    if plan.plane[n].window == a.window and plan.plane[n].offset <= a.start
                    and a.stop <= plan.plane[n].stop]
            plane = min(fits, key=lambda p: (p.bytes, p.offset, p.name), default=None)
        return None if plane is None or plane.name in globals_ else plane

    launches = _moved_launches(plan, shift)
    of_launch, phases = stretches(tuple(launches), home)
    launches = [replace(launch, phase=of_launch[launch.index]) for launch in launches]
    placement = dict(notes, planes={t.name: [list(s) for s in t.sites] for t in moved})
    placed = Plan(plan.config, windows, tuple(planes), globals_, phases, plan.images, tuple(launches),
                  ordered(plan.submissions, launches), _moved_run(plan, shift), LAYOUT,
                  dict(plan.notes, placement=placement))
    check_consistent(placed)
    return placed
