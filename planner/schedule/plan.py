"""The plan as data: windows, planes, phases, images, launches, submissions
and the run the host issues.

A plan is plain, frozen data. It is written to JSON (schema `SCHEMA`) with
every launch's accesses computed, and read back from JSON as untrusted input:
names, sizes and offsets are checked and bounded before any arithmetic, every
image must be one the package ships (rebuilt here from its family and
constants, never taken from the file), and every stated access must equal the
one the image's manifest gives. Nothing in a plan file is ever executed.
The digest (SHA-256 of the canonical JSON) names the plan everywhere.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator

from planner.files import Unreadable, parse_json
from planner.kernels.manifest import (POINTER, READ, READ_WRITE, WRITE, Image, ImageError, image)
from planner.model.config import MAX_BYTES, ConfigError, from_dict

SCHEMA = "planner-plan/3"
NOTES = ("parameters", "stretches", "submissions", "placement")
DEVICE, HOST_MAPPED = "device", "host-mapped"
# Sizes, offsets and counts in a plan file are bounded before any arithmetic
# (sizes by MAX_BYTES, which bounds a configuration's too).
MAX_ITEMS = 1 << 22


@dataclass(frozen=True)
class Window:
    """An address space the plan places planes in: the device arena or the
    host staging window the device maps."""

    name: str
    bytes: int
    memory: str


@dataclass(frozen=True)
class Plane:
    """Where a tensor lives: a byte range of a window."""

    name: str
    window: str
    offset: int
    bytes: int
    alignment: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def stop(self) -> int:
        return self.offset + self.bytes


@dataclass(frozen=True)
class Phase:
    """The seed's liveness declaration: planes a phase makes (fresh) and
    planes it reads from an earlier phase (carried); globals are always live."""

    name: str
    fresh: tuple[str, ...]
    carried: tuple[str, ...]


@dataclass(frozen=True)
class Address:
    window: str
    offset: int


@dataclass(frozen=True)
class Slot:
    """One argument of a launch's parameter block: a pointer (window, offset)
    or a 32-bit word."""

    argument: str
    offset: int
    value: Address | int


@dataclass(frozen=True)
class Access:
    """Bytes [start, stop) of a window one launch argument reads or writes."""

    argument: str
    mode: str
    window: str
    start: int
    stop: int

    @property
    def reads(self) -> bool:
        return self.mode in (READ, READ_WRITE)

    @property
    def writes(self) -> bool:
        return self.mode in (WRITE, READ_WRITE)


@dataclass(frozen=True)
class Launch:
    index: int
    image: str
    phase: str
    grid: tuple[int, int, int]
    block: int
    slots: tuple[Slot, ...]
    accesses: tuple[Access, ...]

    def scalars(self) -> dict[str, int]:
        return {s.argument: s.value for s in self.slots if not isinstance(s.value, Address)}

    def parameter_block(self, image: Image, relocate: dict[str, int] | None = None) -> bytes:
        """The byte image of the parameter block; pointers relocated by the
        base of their window when `relocate` names it (0 otherwise)."""
        addresses = {slot.argument: (relocate or {}).get(slot.value.window, 0) + slot.value.offset
                     for slot in self.slots if isinstance(slot.value, Address)}
        return image.parameter_block(addresses, self.scalars())


@dataclass(frozen=True)
class Submission:
    """Ranges of the launch order issued together, what each of those
    launches waits for, and the semaphore the device releases when all of
    them have completed.

    `after[k]` names the launches of this submission (each issued before
    it) that the k-th launch starts after; a launch with none starts when
    the submission does. Launches ordered by no chain of these run side by
    side (`planner.schedule.order` derives them from the accesses)."""

    index: int
    ranges: tuple[tuple[int, int], ...]   # (first launch, count)
    semaphore: int
    after: tuple[tuple[int, ...], ...]

    def launches(self) -> Iterator[int]:
        for first, count in self.ranges:
            yield from range(first, first + count)

    def waits(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Each launch with the launches it starts after."""
        return zip(self.launches(), self.after)


SUBMIT, WAIT, HOST_WRITE, HOST_READ = "submit", "wait", "write", "read"


@dataclass(frozen=True)
class Step:
    """One step of the host's program (the run).

    submit: issue `submission`; the device starts it once the semaphores of
      the submit steps at run positions `after` are released.
    wait: the host blocks until the submit step at run position `after[0]`
      has released its semaphore.
    write / read: the host writes or reads bytes [start, stop) of `window`,
      which lie in its staging plane `plane` (`what` says which data): the
      runtime's data for the step is that plane's, and the certificate takes
      the step's bytes as that plane's (a checkpoint chunk may be smaller
      than an input plane it shares bytes with).
    """

    kind: str
    submission: int | None = None
    after: tuple[int, ...] = ()
    window: str | None = None
    start: int = 0
    stop: int = 0
    what: str = ""
    plane: str = ""


@dataclass(frozen=True)
class Plan:
    config: dict
    windows: tuple[Window, ...]
    planes: tuple[Plane, ...]
    globals: tuple[str, ...]
    phases: tuple[Phase, ...]
    images: tuple[Image, ...]
    launches: tuple[Launch, ...]
    submissions: tuple[Submission, ...]
    run: tuple[Step, ...]
    layout: str = "seed"
    notes: dict = field(default_factory=dict, compare=False)

    @cached_property
    def plane(self) -> dict[str, Plane]:
        return {p.name: p for p in self.planes}

    @cached_property
    def window(self) -> dict[str, Window]:
        return {w.name: w for w in self.windows}

    @cached_property
    def phase(self) -> dict[str, Phase]:
        return {p.name: p for p in self.phases}

    @cached_property
    def image(self) -> dict[str, Image]:
        return {i.name: i for i in self.images}

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self)).hexdigest()

    def parameter_count(self) -> int:
        return int(self.notes.get("parameters", 0))


# ---- JSON ----

def _image_json(img: Image) -> dict:
    return {"name": img.name, "family": img.family, "constants": dict(img.constants), "block": img.block,
            "shared_bytes": img.shared_bytes, "registers": img.registers,
            "arguments": [{"name": a.name, "kind": a.kind, "offset": o, "access": a.access}
                          for a, o in zip(img.arguments, img.offsets)]}


def _slot_json(s: Slot) -> dict:
    if isinstance(s.value, Address):
        return {"argument": s.argument, "offset": s.offset, "window": s.value.window, "address": s.value.offset}
    return {"argument": s.argument, "offset": s.offset, "word": s.value}


def to_json(plan: Plan) -> dict:
    return {
        "schema": SCHEMA,
        "layout": plan.layout,
        "config": plan.config,
        "notes": plan.notes,
        "windows": [{"name": w.name, "bytes": w.bytes, "memory": w.memory} for w in plan.windows],
        "planes": [{"name": p.name, "window": p.window, "offset": p.offset, "bytes": p.bytes,
                    "alignment": p.alignment, "dtype": p.dtype, "shape": list(p.shape)} for p in plan.planes],
        "globals": list(plan.globals),
        "phases": [{"name": p.name, "fresh": list(p.fresh), "carried": list(p.carried)} for p in plan.phases],
        "images": [_image_json(i) for i in plan.images],
        "launches": [{"index": l.index, "image": l.image, "phase": l.phase, "grid": list(l.grid),
                      "block": l.block, "slots": [_slot_json(s) for s in l.slots],
                      "accesses": [{"argument": a.argument, "mode": a.mode, "window": a.window,
                                    "start": a.start, "stop": a.stop} for a in l.accesses]}
                     for l in plan.launches],
        "submissions": [{"index": s.index, "ranges": [list(r) for r in s.ranges], "semaphore": s.semaphore,
                         "after": [list(a) for a in s.after]} for s in plan.submissions],
        "run": [_step_json(s) for s in plan.run],
    }


def _step_json(s: Step) -> dict:
    out: dict[str, Any] = {"kind": s.kind}
    if s.kind == SUBMIT:
        out |= {"submission": s.submission, "after": list(s.after)}
    elif s.kind == WAIT:
        out |= {"after": list(s.after)}
    else:
        out |= {"window": s.window, "start": s.start, "stop": s.stop, "what": s.what, "plane": s.plane}
    return out


def canonical_json(plan: Plan) -> bytes:
    return json.dumps(to_json(plan), sort_keys=True, separators=(",", ":")).encode()


def dumps(plan: Plan) -> str:
    """The plan file: canonical JSON, so a round trip is byte-identical."""
    return canonical_json(plan).decode() + "\n"


class PlanError(ValueError):
    """A plan file that is malformed or inconsistent; `path` names where."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _Reader:
    """Typed, bounded access to untrusted JSON, each error naming its path."""

    def __init__(self, data: Any, path: str = "$"):
        self.data, self.path = data, path

    def fail(self, problem: str) -> PlanError:
        return PlanError(self.path, problem)

    def __getitem__(self, key: str | int) -> "_Reader":
        if isinstance(key, str):
            if not isinstance(self.data, dict):
                raise self.fail("must be an object")
            if key not in self.data:
                raise PlanError(f"{self.path}.{key}", "is missing")
            return _Reader(self.data[key], f"{self.path}.{key}")
        if not isinstance(self.data, list):
            raise self.fail("must be a list")
        if not 0 <= key < len(self.data):
            raise self.fail(f"must have more than {key} items")
        return _Reader(self.data[key], f"{self.path}[{key}]")

    def get(self, key: str, default: Any) -> "_Reader":
        if isinstance(self.data, dict) and key in self.data:
            return self[key]
        return _Reader(default, f"{self.path}.{key}")

    def items(self, limit: int = MAX_ITEMS) -> list["_Reader"]:
        if not isinstance(self.data, list):
            raise self.fail("must be a list")
        if len(self.data) > limit:
            raise self.fail(f"has {len(self.data)} items, more than {limit}")
        return [self[i] for i in range(len(self.data))]

    def integer(self, low: int = 0, high: int = MAX_BYTES) -> int:
        if isinstance(self.data, bool) or not isinstance(self.data, int):
            raise self.fail("must be an integer")
        if not low <= self.data <= high:
            raise self.fail(f"{self.data} is outside [{low}, {high}]")
        return self.data

    def text(self, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(self.data, str) or len(self.data) > 200:
            raise self.fail("must be a string of at most 200 characters")
        if choices is not None and self.data not in choices:
            raise self.fail(f"{self.data!r} is not one of {', '.join(choices)}")
        return self.data

    def mapping(self) -> dict:
        if not isinstance(self.data, dict):
            raise self.fail("must be an object")
        return self.data


def _read_image(r: _Reader) -> Image:
    constants = {}
    for key, value in r["constants"].mapping().items():
        c = r["constants"][key]
        constants[key] = c.text() if isinstance(value, str) else c.integer(0, MAX_BYTES)
    try:
        img = image(r["family"].text(), r["name"].text(), **constants)
    except ImageError as error:
        raise r.fail(str(error)) from None
    if _image_json(img) != r.data:
        raise r.fail(f"image {img.name!r} does not match the manifest planner ships for family {img.family!r}")
    return img


def _read_step(r: _Reader, positions: int) -> Step:
    kind = r["kind"].text((SUBMIT, WAIT, HOST_WRITE, HOST_READ))
    if kind == SUBMIT:
        return Step(kind, submission=r["submission"].integer(0, MAX_ITEMS),
                    after=tuple(a.integer(0, positions) for a in r["after"].items()))
    if kind == WAIT:
        after = tuple(a.integer(0, positions) for a in r["after"].items(1))
        if len(after) != 1:
            raise r["after"].fail("a wait names exactly one submit step")
        return Step(kind, after=after)
    return Step(kind, window=r["window"].text(), start=r["start"].integer(), stop=r["stop"].integer(),
                what=r["what"].text(), plane=r["plane"].text())


def _pair(r: _Reader) -> tuple[int, int]:
    items = r.items(2)
    if len(items) != 2:
        raise r.fail("must be [first launch, count]")
    return items[0].integer(0, MAX_ITEMS), items[1].integer(0, MAX_ITEMS)


def _read_config(r: _Reader) -> dict:
    """The configuration the plan was derived from, as written: it must be
    one (the runtime and the bench read it), though certifying a plan file
    rests on its launches alone."""
    try:
        from_dict(r.mapping())
    except ConfigError as error:
        raise r.fail(str(error)) from None
    return r.data


def _read_notes(r: _Reader, launches: int, submissions: int) -> dict:
    """What the planner noted beside the plan: the parameter count, the
    stretches of launches the runtime issues by name ([first, count]), the
    submissions of each kind, and a placed plan's placement: its planes'
    sites, {plane: [[launch index, argument], ...]}, a host step as
    [-1 - run position, "host"] (check_consistent holds them to the plan)."""
    notes = r.mapping()
    for key in notes:
        if key not in NOTES:
            raise r[key].fail(f"is no note planner writes ({', '.join(NOTES)})")
    if "parameters" in notes:
        r["parameters"].integer()
    for name in r.get("stretches", {}).mapping():
        first, count = _pair(r["stretches"][name])
        if first + count > launches:
            raise r["stretches"][name].fail(f"reaches launch {first + count - 1} of {launches}")
    for name in r.get("submissions", {}).mapping():
        indices = r["submissions"][name].items()
        if not indices:
            raise r["submissions"][name].fail("names no submission")
        for index in indices:
            index.integer(0, submissions - 1)
    if "placement" in notes:
        r["placement"].mapping()
        for name in r["placement"].get("planes", {}).mapping():
            for site in r["placement"]["planes"][name].items():
                pair = site.items(2)
                if len(pair) != 2:
                    raise site.fail("must be [launch index, argument]")
                pair[0].integer(-MAX_ITEMS, MAX_ITEMS), pair[1].text()
    return notes


def from_json(data: Any) -> Plan:
    """Read a plan from untrusted JSON data; raise PlanError naming the path."""
    root = _Reader(data)
    if root["schema"].text() != SCHEMA:
        raise root["schema"].fail(f"is not {SCHEMA!r}")
    windows = tuple(Window(w["name"].text(), w["bytes"].integer(1), w["memory"].text((DEVICE, HOST_MAPPED)))
                    for w in root["windows"].items(16))
    planes = tuple(Plane(p["name"].text(), p["window"].text(), p["offset"].integer(), p["bytes"].integer(1),
                         p["alignment"].integer(1, 1 << 20), p["dtype"].text(),
                         tuple(d.integer(0) for d in p["shape"].items(8)))
                   for p in root["planes"].items())
    phases = tuple(Phase(p["name"].text(), tuple(x.text() for x in p["fresh"].items()),
                         tuple(x.text() for x in p["carried"].items())) for p in root["phases"].items())
    images = tuple(_read_image(i) for i in root["images"].items(4096))
    launches = []
    for n, l in enumerate(root["launches"].items()):
        slots = []
        for s in l["slots"].items(64):
            if isinstance(s.data, dict) and "window" in s.data:
                value: Address | int = Address(s["window"].text(), s["address"].integer())
            else:
                value = s["word"].integer(0, (1 << 32) - 1)
            slots.append(Slot(s["argument"].text(), s["offset"].integer(0, 4096), value))
        accesses = tuple(Access(a["argument"].text(), a["mode"].text((READ, WRITE, READ_WRITE)),
                                a["window"].text(), a["start"].integer(), a["stop"].integer())
                         for a in l["accesses"].items(64))
        launches.append(Launch(l["index"].integer(n, n), l["image"].text(), l["phase"].text(),
                               tuple(g.integer(1, 1 << 31) for g in l["grid"].items(3)),
                               l["block"].integer(1, 1024), tuple(slots), accesses))
    submissions = tuple(Submission(s["index"].integer(n, n),
                                   tuple(_pair(r) for r in s["ranges"].items()),
                                   s["semaphore"].integer(0, MAX_ITEMS),
                                   tuple(tuple(a.integer(0, MAX_ITEMS) for a in after.items(4096))
                                         for after in s["after"].items()))
                        for n, s in enumerate(root["submissions"].items()))
    steps = root["run"].items()
    run = tuple(_read_step(s, len(steps)) for s in steps)
    notes = _read_notes(root.get("notes", {}), len(launches), len(submissions))
    plan = Plan(_read_config(root["config"]), windows, planes, tuple(g.text() for g in root["globals"].items()),
                phases, images, tuple(launches), submissions, run, root.get("layout", "seed").text(), notes)
    check_consistent(plan)
    return plan


def loads(text: str) -> Plan:
    try:
        data = parse_json(text)
    except json.JSONDecodeError as error:
        raise PlanError("$", f"is not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except Unreadable as error:
        raise PlanError("$", str(error)) from None
    except RecursionError:
        raise PlanError("$", "is nested too deeply") from None
    return from_json(data)


# ---- consistency: what every plan must satisfy before it is certified ----

def launch_accesses(img: Image, slots: tuple[Slot, ...]) -> tuple[Access, ...]:
    """Each pointer argument's access: from its slot and the manifest's extent."""
    scalars = {s.argument: s.value for s in slots if not isinstance(s.value, Address)}
    extents = img.extents(scalars)
    out = []
    for s in slots:
        if isinstance(s.value, Address):
            a = img.argument(s.argument)
            out.append(Access(a.name, a.access, s.value.window, s.value.offset, s.value.offset + extents[a.name]))
    return tuple(out)


def _check_placement(plan: Plan) -> None:
    """A placed plan's sites name its planes, and accesses of its launches
    or its host steps."""
    where = "$.notes.placement.planes"
    for name, sites in plan.notes.get("placement", {}).get("planes", {}).items():
        if name not in plan.plane:
            raise PlanError(f"{where}.{name}", "names no plane of the plan")
        for k, (index, argument) in enumerate(sites):
            if index >= 0:
                known = index < len(plan.launches) and any(a.argument == argument
                                                           for a in plan.launches[index].accesses)
            else:
                position = -1 - index
                known = argument == "host" and position < len(plan.run) and \
                    plan.run[position].kind in (HOST_WRITE, HOST_READ)
            if not known:
                raise PlanError(f"{where}.{name}[{k}]", f"[{index}, {argument!r}] is no access of the plan")


def check_consistent(plan: Plan) -> None:
    """Names resolve, every slot matches its image's ABI, every stated access
    is the manifest's, grids and blocks are the images', submissions and the
    run refer to what exists. Safety is the certificate's business; this
    only makes the plan well formed."""
    def unique(kind: str, names: list[str]) -> None:
        seen = set()
        for n in names:
            if n in seen:
                raise PlanError(f"$.{kind}", f"name {n!r} appears twice")
            seen.add(n)

    unique("windows", [w.name for w in plan.windows])
    unique("planes", [p.name for p in plan.planes])
    unique("phases", [p.name for p in plan.phases])
    unique("images", [i.name for i in plan.images])
    for n, p in enumerate(plan.planes):
        if p.window not in plan.window:
            raise PlanError(f"$.planes[{n}].window", f"names no window ({p.window!r})")
    for g in plan.globals:
        if g not in plan.plane:
            raise PlanError("$.globals", f"names no plane ({g!r})")
    for n, ph in enumerate(plan.phases):
        for x in ph.fresh + ph.carried:
            if x not in plan.plane:
                raise PlanError(f"$.phases[{n}]", f"names no plane ({x!r})")
    for n, l in enumerate(plan.launches):
        where = f"$.launches[{n}]"
        img = plan.image.get(l.image)
        if img is None:
            raise PlanError(f"{where}.image", f"names no image of the plan ({l.image!r})")
        if l.phase not in plan.phase:
            raise PlanError(f"{where}.phase", f"names no phase ({l.phase!r})")
        wanted = {a.name: (a, o) for a, o in zip(img.arguments, img.offsets)}
        if sorted(s.argument for s in l.slots) != sorted(wanted):
            raise PlanError(f"{where}.slots", f"must set exactly the arguments of {img.name}: {sorted(wanted)}")
        for k, s in enumerate(l.slots):
            a, offset = wanted[s.argument]
            if s.offset != offset or isinstance(s.value, Address) != (a.kind == POINTER):
                raise PlanError(f"{where}.slots[{k}]", f"does not match argument {a.name!r} of {img.name} "
                                f"({a.kind} at byte {offset})")
            if isinstance(s.value, Address) and s.value.window not in plan.window:
                raise PlanError(f"{where}.slots[{k}].window", f"names no window ({s.value.window!r})")
        try:
            grid = img.grid(l.scalars())
            expected = launch_accesses(img, l.slots)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            raise PlanError(f"{where}", f"its scalars do not fit image {img.name} ({error})") from None
        if l.grid != grid or l.block != img.block:
            raise PlanError(f"{where}.grid", f"image {img.name} launches grid {grid} block {img.block}, "
                            f"not {l.grid} block {l.block}")
        if l.accesses != expected:
            raise PlanError(f"{where}.accesses", f"are not what image {img.name}'s manifest gives")
    count = len(plan.launches)
    for n, s in enumerate(plan.submissions):
        for first, c in s.ranges:
            if first + c > count:
                raise PlanError(f"$.submissions[{n}].ranges", f"reach launch {first + c - 1} of {count}")
        issues = sum(c for _, c in s.ranges)
        if len(s.after) != issues:
            raise PlanError(f"$.submissions[{n}].after", f"has {len(s.after)} entries for {issues} launches")
        issued: set[int] = set()
        for k, (index, after) in enumerate(s.waits()):
            for a in after:
                if a not in issued:
                    raise PlanError(f"$.submissions[{n}].after[{k}]", f"launch {a} is not issued by this "
                                    f"submission before launch {index}")
            if len(set(after)) != len(after):
                raise PlanError(f"$.submissions[{n}].after[{k}]", "names a launch twice")
            if index in issued:
                raise PlanError(f"$.submissions[{n}].ranges", f"issue launch {index} twice")
            issued.add(index)
    _check_placement(plan)
    for n, step in enumerate(plan.run):
        where = f"$.run[{n}]"
        if step.kind == SUBMIT and step.submission >= len(plan.submissions):
            raise PlanError(f"{where}.submission", f"names no submission ({step.submission})")
        for a in step.after:
            if a >= n or plan.run[a].kind != SUBMIT:
                raise PlanError(f"{where}.after", f"run position {a} is not an earlier submit step")
        if step.kind in (HOST_WRITE, HOST_READ):
            if step.window not in plan.window:
                raise PlanError(f"{where}.window", f"names no window ({step.window!r})")
            if step.plane not in plan.plane or plan.plane[step.plane].window != step.window:
                raise PlanError(f"{where}.plane", f"names no plane of window {step.window} ({step.plane!r})")
            if not step.start < step.stop:
                raise PlanError(f"{where}", "must cover at least one byte (start < stop)")
