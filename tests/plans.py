"""Plans for the certificate's tests: a builder for small plans out of the
elementwise images, a synthetic training-shaped plan (layers, a backward
that reuses the forward's workspace, AdamW, a checkpoint through staging)
at any size, and mutations that break a good plan the ways plans break."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.kernels.manifest import POINTER, image
from planner.schedule.plan import (DEVICE, HOST_MAPPED, HOST_READ, HOST_WRITE, SUBMIT, WAIT, Address, Phase, Plan,
                                   Plane, Slot, Step, Submission, Window, launch_accesses)
from planner.schedule.plan import Launch
from planner.schedule.submissions import merge_ranges

ARENA, STAGING = "arena", "staging"
# the elementwise images, and a scatter for an access that reads and writes
IMAGES = {name: image(name) for name in ("fill", "copy", "add")} | {
    "scatter": image("embedding-scatter", "scatter", rows=2, width=2, vocab=4)}


@dataclass
class Builder:
    windows: dict[str, int] = field(default_factory=lambda: {ARENA: 1 << 20, STAGING: 1 << 12})
    planes: list[Plane] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)
    phases: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    run: list[Step] = field(default_factory=list)

    def plane(self, name: str, offset: int, size: int, window: str = ARENA, is_global: bool = False) -> Plane:
        p = Plane(name, window, offset, size, 4, "f32", (size // 4,))
        self.planes.append(p)
        if is_global:
            self.globals.append(name)
        return p

    def phase(self, name: str, fresh: list[str] = (), carried: list[str] = ()) -> str:
        self.phases[name] = (list(fresh), list(carried))
        return name

    def launch(self, name: str, phase: str, elements: int, **pointers: tuple[str, int] | Plane) -> int:
        """A launch of one of `IMAGES` over `elements` (the elementwise
        ones); each pointer is a plane (its start) or (window, offset)."""
        img = IMAGES[name]
        slots = []
        for a, offset in zip(img.arguments, img.offsets):
            if a.kind == POINTER:
                where = pointers[a.name]
                address = Address(where.window, where.offset) if isinstance(where, Plane) else Address(*where)
                slots.append(Slot(a.name, offset, address))
            else:
                slots.append(Slot(a.name, offset, elements if a.name == "elements" else 0))
        slots = tuple(slots)
        scalars = {s.argument: s.value for s in slots if not isinstance(s.value, Address)}
        index = len(self.launches)
        self.launches.append(Launch(index, img.name, phase, img.grid(scalars), img.block, slots,
                                    launch_accesses(img, slots)))
        return index

    def submission(self, launches: list[int], after: list[tuple[int, ...]] | None = None) -> int:
        """Launches issued together, each after the one before it unless
        `after` says what each waits for."""
        if after is None:
            after = [tuple(launches[k - 1:k]) for k in range(len(launches))]
        self.submissions.append(Submission(len(self.submissions), _ranges(launches), len(self.submissions),
                                           tuple(map(tuple, after))))
        return len(self.submissions) - 1

    def submit(self, submission: int, after: tuple[int, ...] = ()) -> int:
        self.run.append(Step(SUBMIT, submission=submission, after=tuple(after)))
        return len(self.run) - 1

    def wait(self, position: int) -> int:
        self.run.append(Step(WAIT, after=(position,)))
        return len(self.run) - 1

    def host(self, kind: str, start: int, stop: int, plane: str, window: str = STAGING) -> int:
        self.run.append(Step(kind, window=window, start=start, stop=stop, plane=plane))
        return len(self.run) - 1

    def build(self) -> Plan:
        return Plan({}, tuple(Window(n, b, HOST_MAPPED if n == STAGING else DEVICE) for n, b in self.windows.items()),
                    tuple(self.planes), tuple(self.globals),
                    tuple(Phase(n, tuple(f), tuple(c)) for n, (f, c) in self.phases.items()),
                    tuple(IMAGES.values()), tuple(self.launches), tuple(self.submissions), tuple(self.run))


# ---- a training-shaped plan ----

def synthetic(layers: int = 4, chain: int = 3, pieces: int = 2, steps: int = 2, chunks: int = 3,
              n: int = 64) -> Plan:
    """Initialize; save and load a checkpoint through staging (host reads and
    writes between chunk submissions, each awaited); then `steps` rounds of
    `pieces` update submissions (forward through `layers` layers of `chain`
    launches each in a shared workspace, a loss, a backward whose planes
    reuse the workspace, one AdamW per piece); the final forward; a last
    checkpoint save. `n` elements per tensor."""
    b = Builder()
    size = 4 * n
    at = [0]

    def place(name: str, bytes_: int, is_global: bool = False, offset: int | None = None) -> Plane:
        if offset is None:
            offset, at[0] = at[0], at[0] + -(-bytes_ // 256) * 256
        return b.plane(name, offset, bytes_, ARENA, is_global)

    params = place("parameters", layers * 2 * size, True)
    grads = place("gradients", layers * 2 * size, True)
    moments = place("moments", layers * 2 * size, True)
    bounds = place("boundaries", (layers + 1) * size, True)
    saved = place("saved", layers * size, True)
    work = at[0]
    names = [f"work{i}" for i in range(chain)]
    ws = [place(nm, size) for nm in names]
    logits, loss = place("logits", size), place("loss", size)
    # the backward's planes reuse the forward's workspace
    ds = [place(f"grad{i}", size, offset=work + 256 * i) for i in range(chain)]
    window = b.plane("checkpoint-window", 0, size, STAGING)
    b.windows[ARENA] = at[0] + 4096

    init = b.phase("initialize")
    layer = b.phase("layer", names)
    out = b.phase("output", ["logits", "loss"])
    back = b.phase("backward", [d.name for d in ds], ["logits", "loss"])
    adam = b.phase("adamw")
    ckpt = b.phase("checkpoint", ["checkpoint-window"])

    def g(plane: Plane, k: int) -> tuple[str, int]:
        return plane.window, plane.offset + k * size

    first = [b.launch("fill", init, params.bytes // 4, out=params),
             b.launch("fill", init, grads.bytes // 4, out=grads),
             b.launch("fill", init, moments.bytes // 4, out=moments),
             b.launch("fill", init, n, out=g(bounds, 0))]

    def transfer(save: bool) -> list[list[int]]:
        per = []
        for c in range(chunks):
            k = c % (layers * 2)
            if save:
                per.append([b.launch("copy", ckpt, n, out=window, **{"in": g(params, k)})])
            else:
                per.append([b.launch("copy", ckpt, n, out=g(params, k), **{"in": window})])
        return per

    saves, loads = transfer(True), transfer(False)

    def forward() -> list[int]:
        ids = []
        for l in range(layers):
            ids.append(b.launch("add", layer, n, out=ws[0], left=g(bounds, l), right=g(params, 2 * l)))
            for i in range(1, chain):
                ids.append(b.launch("copy", layer, n, out=ws[i], **{"in": ws[i - 1]}))
            ids.append(b.launch("copy", layer, n, out=g(saved, l), **{"in": ws[0]}))
            ids.append(b.launch("add", layer, n, out=g(bounds, l + 1), left=ws[-1], right=g(params, 2 * l + 1)))
        ids.append(b.launch("add", out, n, out=logits, left=g(bounds, layers), right=g(params, 0)))
        ids.append(b.launch("copy", out, n, out=loss, **{"in": logits}))
        return ids

    update = forward()
    update.append(b.launch("add", back, n, out=ds[0], left=loss, right=logits))
    for l in reversed(range(layers)):
        for i in range(1, chain):
            update.append(b.launch("add", back, n, out=ds[i], left=ds[i - 1], right=g(saved, l)))
        update.append(b.launch("copy", back, n, out=g(grads, 2 * l), **{"in": ds[-1]}))
        update.append(b.launch("copy", back, n, out=g(grads, 2 * l + 1), **{"in": ds[-1]}))
        update.append(b.launch("copy", back, n, out=ds[0], **{"in": ds[-1]}))
    adams = [[b.launch("add", adam, moments.bytes // 4, out=moments, left=moments, right=grads),
              b.launch("add", adam, params.bytes // 4, out=params, left=params, right=moments),
              b.launch("fill", adam, grads.bytes // 4, out=grads)] for _ in range(pieces)]
    final = forward()

    s_init = b.submission(first)
    s_saves = [b.submission(ids) for ids in saves]
    s_loads = [b.submission(ids) for ids in loads]
    s_updates = [b.submission(update + adams[k]) for k in range(pieces)]
    s_final = b.submission(final)

    last = b.submit(s_init)

    def checkpoint(last: int, load: bool) -> int:
        for c in range(chunks):
            last = b.submit(s_saves[c], (last,))
            b.wait(last)
            b.host(HOST_READ, 0, size, "checkpoint-window")
            if load:
                b.host(HOST_WRITE, 0, size, "checkpoint-window")
                last = b.submit(s_loads[c], (last,))
                b.wait(last)
        return last

    last = checkpoint(last, True)
    for step in range(steps):
        for k in range(pieces):
            last = b.submit(s_updates[k], (last,))
        if step == 0 and steps > 1:
            last = checkpoint(last, False)
    last = b.submit(s_final, (last,))
    checkpoint(last, False)
    return b.build()


# ---- mutations ----

def with_launch(plan: Plan, launch: Launch) -> Plan:
    launches = list(plan.launches)
    launches[launch.index] = launch
    return replace(plan, launches=tuple(launches))


def move_pointer(plan: Plan, index: int, argument: str, window: str, offset: int) -> Plan:
    """Point launch `index`'s `argument` at (window, offset)."""
    launch = plan.launches[index]
    slots = tuple(replace(s, value=Address(window, offset)) if s.argument == argument else s for s in launch.slots)
    img = plan.image[launch.image]
    return with_launch(plan, replace(launch, slots=slots, accesses=launch_accesses(img, slots)))


def set_elements(plan: Plan, index: int, elements: int) -> Plan:
    launch = plan.launches[index]
    slots = tuple(replace(s, value=elements) if s.argument == "elements" else s for s in launch.slots)
    img = plan.image[launch.image]
    return with_launch(plan, replace(launch, slots=slots, accesses=launch_accesses(img, slots),
                                     grid=img.grid({s.argument: s.value for s in slots
                                                    if not isinstance(s.value, Address)})))


def move_plane(plan: Plan, name: str, offset: int) -> Plan:
    """Place plane `name` at `offset`, and with it every pointer into it of a
    launch whose phase holds it (other phases' planes may share its bytes)."""
    old = plan.plane[name]
    delta = offset - old.offset
    planes = tuple(replace(p, offset=offset) if p.name == name else p for p in plan.planes)
    out = replace(plan, planes=planes)
    for launch in plan.launches:
        phase = plan.phase[launch.phase]
        if name not in phase.fresh + phase.carried + plan.globals:
            continue
        for s in launch.slots:
            v = s.value
            if isinstance(v, Address) and v.window == old.window and old.offset <= v.offset < old.stop:
                out = move_pointer(out, launch.index, s.argument, v.window, v.offset + delta)
    return out


def with_step(plan: Plan, position: int, step: Step) -> Plan:
    run = list(plan.run)
    run[position] = step
    return replace(plan, run=tuple(run))


def without_step(plan: Plan, position: int) -> Plan:
    """Drop run step `position`; later references shift down (a wait on it
    is dropped too)."""
    run = []
    renumber = {}
    for k, step in enumerate(plan.run):
        if k == position or (step.kind == WAIT and step.after[0] == position):
            continue
        renumber[k] = len(run)
        after = tuple(renumber[a] for a in step.after if a != position)
        run.append(replace(step, after=after))
    return replace(plan, run=tuple(run))


def _ranges(launches: list[int]) -> tuple[tuple[int, int], ...]:
    return merge_ranges([(i, 1) for i in launches])


def drop_launch(plan: Plan, index: int) -> Plan:
    """Every submission stops issuing launch `index`; what waited for it
    waits for what it waited for."""
    subs = []
    for s in plan.submissions:
        waits = dict(s.waits())
        dropped = waits.pop(index, ())
        after = tuple(tuple(sorted(set(a for w in ws for a in ((w,) if w != index else dropped))))
                      for ws in waits.values())
        subs.append(replace(s, ranges=_ranges(list(waits)), after=after))
    return replace(plan, submissions=tuple(subs))
