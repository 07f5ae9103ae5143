"""The picture of an arena: where each tensor lives and when.

x is the run order (launch instances and host actions, as the host issues
them), y the address in the window; each tensor's live interval is a
rectangle coloured by the (seed) phase that first writes it; pinned planes,
live for the whole run, are grey. A placed plan's tensors are its planes
(with the sites its notes list); any other plan's are found from its
accesses (`planner.place.liveness`).

A failure report marks what went wrong: each record names two planes and a
launch (see `read_report`); both planes are drawn in red with their names,
and the launch as a red line at each position it is issued (or only at the
record's position when it gives one).

PNG and SVG through matplotlib (Agg, no display; imported only to draw);
HTML as one page with an inline SVG whose rectangles name their tensor when
pointed at.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from planner.place.check import declared_tensors
from planner.place.liveness import ARENA, Event, Tensor, listed_sites, liveness, run_order
from planner.place.phases import seed_phase
from planner.schedule.plan import Plan

FORMATS = ("png", "svg", "html")
PINNED_COLOUR = "#b0b0b0"
RED = "#d62728"
MIB = 1 << 20


class ReportError(ValueError):
    """A failure report this module cannot read (see `read_report`)."""


@dataclass(frozen=True)
class Mark:
    """One failure to draw: two planes that share bytes while live, and the
    launch at which they do: its `position` in the run order, or the run
    `step` that issues it, when known."""

    plane_a: str
    plane_b: str
    launch_index: int
    position: int | None = None
    note: str = ""
    step: int | None = None


def read_report(data: object) -> list[Mark]:
    """The marks of a failure report (JSON data).

    The report is a list of records, or an object holding them under
    "overlaps", "failures" or "violations", or the certificate's JSON report
    (`planner certify`: an object whose "properties" each hold "violations").
    A record is either

      {"plane_a": name, "plane_b": name, "launch_index": launch (-1: a host
       action), "position": run-order position (optional), "note": text
       (optional)}

    or a certificate violation: {"message", "planes": [{"name", ...}, ...],
    "writer" / "other": {"launch", "run_step", ...}}, drawn with the first
    two planes it names and the launch that writes. Other keys are ignored.
    """
    if isinstance(data, dict):
        results = data.get("properties", data.get("results"))
        if isinstance(results, list):
            if not all(isinstance(r, dict) and isinstance(r.get("violations") or [], list) for r in results):
                raise ReportError("a certificate's report must hold properties that each list their violations")
            # a violation naming no plane (the machine code's) has nothing in a window to draw
            data = [v for r in results for v in r.get("violations") or []
                    if not (isinstance(v, dict) and v.get("planes") == [])]
        else:
            data = next((data[k] for k in ("overlaps", "failures", "violations") if k in data), None)
    if not isinstance(data, list):
        raise ReportError("a report must be a list of records, an object holding one under 'overlaps', "
                          "'failures' or 'violations', or the certificate's JSON report")
    return [_mark(n, r) for n, r in enumerate(data)]


def _mark(n: int, r: object) -> Mark:
    if isinstance(r, dict) and isinstance(r.get("planes"), list):
        names = [p.get("name") for p in r["planes"] if isinstance(p, dict) and p.get("name")]
        actor = next((a for a in (r.get("writer"), r.get("other")) if isinstance(a, dict)), {})
        launch, step = actor.get("launch"), actor.get("run_step")
        if len(names) < 1 or not (launch is None or isinstance(launch, int)) or \
                not (step is None or isinstance(step, int)):
            raise ReportError(f"violation {n} must name a plane, and its writer a launch and run step")
        return Mark(names[0], names[-1], -1 if launch is None else launch, None, str(r.get("message", "")), step)
    if not (isinstance(r, dict) and isinstance(r.get("plane_a"), str) and isinstance(r.get("plane_b"), str)
            and isinstance(r.get("launch_index"), int)):
        raise ReportError(f"record {n} must have plane_a, plane_b (strings) and launch_index (an integer)")
    position = r.get("position")
    if position is not None and not isinstance(position, int):
        raise ReportError(f"record {n}: position must be an integer")
    return Mark(r["plane_a"], r["plane_b"], r["launch_index"], position, str(r.get("note", "")))


@dataclass(frozen=True)
class Picture:
    plan: Plan
    window: str
    tensors: tuple[Tensor, ...]
    events: tuple[Event, ...]
    marks: tuple[Mark, ...]
    first: int          # the positions shown: [first, last]
    last: int
    low: int            # the addresses shown: [low, high)
    high: int

    @property
    def bytes(self) -> int:
        return self.plan.window[self.window].bytes

    def phases(self) -> list[str]:
        """The seed phases that first write the tensors (a placed plan's
        phases are cut from them)."""
        return sorted({seed_phase(t.phase) for t in self.tensors if not t.pinned})

    def colours(self) -> dict[str, str]:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex
        # tab20 without its two reds (red is for failures), then tab20b
        palette = [c for k, c in enumerate(colormaps["tab20"].colors) if k not in (6, 7)] + \
            list(colormaps["tab20b"].colors)
        return {ph: to_hex(palette[k % len(palette)]) for k, ph in enumerate(self.phases())}

    def shown(self, t: Tensor) -> list[tuple[int, int]]:
        """t's live intervals clipped to the positions shown, as [start, stop)
        (none when its bytes are not shown)."""
        if t.stop <= self.low or t.start >= self.high:
            return []
        return [(max(a, self.first), min(b, self.last) + 1) for a, b in t.live if b >= self.first and a <= self.last]

    def named(self, name: str) -> list[tuple[int, int, list[tuple[int, int]]]]:
        """Where a report's plane is drawn: (start, stop, intervals shown) of
        that tensor, or of every tensor of a declared plane of that name (a
        plan not placed), or else the declared plane over the whole run."""
        tensors = [t for t in self.tensors if t.name == name] or \
            [t for t in self.tensors if t.name.startswith(name + "@")]
        if tensors:
            return [(t.start, t.stop, self.shown(t)) for t in tensors]
        plane = self.plan.plane.get(name)
        if plane is not None and plane.window == self.window:
            return [(plane.offset, plane.stop, [(self.first, self.last + 1)])]
        return []

    def red_planes(self) -> list[tuple[str, int, int, list[tuple[int, int]], int]]:
        """Each plane the marks name, once: (name, start, stop, intervals
        shown, where its name goes: at a failing launch while the plane is
        live there, else where it is first shown)."""
        out, seen = [], set()
        for mark in self.marks:
            spots = self.launch_positions(mark)
            for name in (mark.plane_a, mark.plane_b):
                for lo, hi, shown in self.named(name):
                    if shown and (name, lo) not in seen:
                        seen.add((name, lo))
                        at = next((p for p in spots for a, b in shown if a <= p < b), shown[0][0])
                        out.append((name, lo, hi, shown, at))
        return out

    def red_launches(self) -> dict[int, tuple[str, str, bool]]:
        """Each position a mark's launch is drawn at: the launch, what the
        marks say happens there, and whether to label it (at the first
        position of each launch only, so labels do not pile up)."""
        described: dict[int, dict[str, None]] = {}
        for mark in self.marks:
            for p in self.launch_positions(mark):
                described.setdefault(p, {})[self.describe(mark, note=False)] = None
        out: dict[int, tuple[str, str, bool]] = {}
        labelled: set[int] = set()
        for p in sorted(described):
            launch = self.events[p].launch
            what = self.launch_text(Mark("", "", launch))
            out[p] = (what, "; ".join(described[p]), launch not in labelled)
            labelled.add(launch)
        return out

    def launch_positions(self, mark: Mark) -> list[int]:
        """Where the mark's launch is drawn: its position, or each position
        that issues it (from its run step, when the mark names one)."""
        if mark.position is not None:
            return [mark.position] if self.first <= mark.position <= self.last else []
        return [p for p in range(self.first, self.last + 1) if self.events[p].launch == mark.launch_index
                and (mark.step is None or self.events[p].step == mark.step)]

    def foreign(self, mark: Mark) -> str | None:
        """What a report's mark names that this plan has not (the report
        is another plan's), or None."""
        for name in (mark.plane_a, mark.plane_b):
            if name not in self.plan.plane and not any(t.name == name or t.name.startswith(name + "@")
                                                       for t in self.tensors):
                return f"plane {name!r}"
        if not -1 <= mark.launch_index < len(self.plan.launches):
            return f"launch {mark.launch_index}"
        if mark.position is not None and not 0 <= mark.position < len(self.events):
            return f"run position {mark.position}"
        return None

    def launch_text(self, mark: Mark) -> str:
        if 0 <= mark.launch_index < len(self.plan.launches):
            launch = self.plan.launches[mark.launch_index]
            return f"launch {launch.index} {launch.image} ({launch.phase})"
        return "a host action"

    def describe(self, mark: Mark, note: bool = True) -> str:
        return f"{self.launch_text(mark)}: {mark.plane_a} / {mark.plane_b}" + \
            (f" ({mark.note})" if note and mark.note else "")


def picture(plan: Plan, window: str = ARENA, marks: list[Mark] | tuple[Mark, ...] = (),
            positions: tuple[int, int] | None = None, movable: bool = False) -> Picture:
    """The picture of `window`; `positions` limits the run order shown,
    `movable` the addresses to those above the pinned planes."""
    events = run_order(plan)
    if listed_sites(plan):
        tensors = tuple(declared_tensors(plan, window, events))
    else:
        tensors = tuple(t for t in liveness(plan, windows=(window,)).tensors if t.window == window)
    last = max(len(events) - 1, 0)
    first, end = positions if positions is not None else (0, last)
    size = plan.window[window].bytes
    low = min((t.start for t in tensors if not t.pinned), default=0) if movable else 0
    return Picture(plan, window, tensors, events, tuple(marks), max(0, first), min(last, end), low, size)


def render(pic: Picture, path: str | Path) -> None:
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{path}: the picture is written as {', '.join('.' + f for f in FORMATS)}")
    if fmt == "html":
        Path(path).write_text(_html(pic))
    else:
        _figure(pic).savefig(path, format=fmt)


def _title(pic: Picture) -> str:
    return (f"{pic.plan.layout} plan {pic.plan.digest[:12]}: window {pic.window}, {pic.bytes:,} bytes "
            f"({pic.bytes / MIB:,.1f} MiB), {sum(not t.pinned for t in pic.tensors)} tensors")


def _figure(pic: Picture):
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    colours = pic.colours()
    fig = Figure(figsize=(16, 9), dpi=100)
    ax = fig.add_subplot()
    boxes, faces = [], []
    for t in pic.tensors:
        y0, y1 = t.start / MIB, t.stop / MIB
        for a, b in pic.shown(t):
            boxes.append(((a, y0), (b, y0), (b, y1), (a, y1)))
            faces.append(PINNED_COLOUR if t.pinned else colours[seed_phase(t.phase)])
        if t.pinned and t.stop > pic.low:
            ax.text((pic.first + pic.last) / 2, (max(y0, pic.low / MIB) + y1) / 2, t.name, ha="center",
                    va="center", fontsize=8)
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="none", linewidths=0))
    labels: list[tuple[int, int]] = []
    for name, lo, hi, shown, at in pic.red_planes():
        top = max(hi, lo + (pic.high - pic.low) // 150)   # a few pixels at least, so a small plane shows
        for a, b in shown:
            ax.add_patch(_red_box(a, b, lo / MIB, top / MIB))
        # names of planes close together are stacked, not written over each other
        near = sum(1 for x, y in labels if x == at and abs(y - top) < (pic.high - pic.low) // 40)
        labels.append((at, top))
        ax.annotate(name, (at, top / MIB), xytext=(0, 11 * near), textcoords="offset points", color=RED,
                    fontsize=9, fontweight="bold", va="bottom")
    for p, (launch, _, labelled) in pic.red_launches().items():
        ax.axvline(p + 0.5, color=RED, linewidth=1.2)
        if labelled:
            ax.annotate(launch, (p + 0.5, pic.high / MIB), color=RED, fontsize=9, rotation=90, ha="right", va="top")
    ax.set_xlim(pic.first, pic.last + 1)
    ax.set_ylim(pic.low / MIB, pic.high / MIB)
    ax.set_xlabel("run order (launch instances and host actions)")
    ax.set_ylabel(f"address in {pic.window} (MiB)")
    ax.set_title(_title(pic), fontsize=10)
    handles = [Patch(color=c, label=ph) for ph, c in colours.items()] + [Patch(color=PINNED_COLOUR, label="pinned")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.subplots_adjust(left=0.06, right=0.84, top=0.95, bottom=0.07)   # room for the legend on the right
    return fig


def _red_box(a: float, b: float, y0: float, y1: float):
    from matplotlib.patches import Rectangle
    return Rectangle((a, y0), b - a, y1 - y0, facecolor=RED, alpha=0.45, edgecolor=RED, linewidth=1.5)


# ---- HTML: an inline SVG written here, so every rectangle can carry its name ----

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 1400, 800, 70, 40, 30


def _html(pic: Picture) -> str:
    colours = pic.colours()
    span = max(pic.last + 1 - pic.first, 1)
    x = lambda p: LEFT + (p - pic.first) * (WIDTH - LEFT - 10) / span
    y = lambda b: TOP + (HEIGHT - TOP - BOTTOM) * (1 - (min(max(b, pic.low), pic.high) - pic.low)
                                                   / max(pic.high - pic.low, 1))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" shape-rendering="crispEdges">']

    def rect(a: float, b: float, lo: int, hi: int, fill: str, title: str, extra: str = "",
             least: float = 0.5) -> None:
        tall = max(y(lo) - y(hi), least)
        out.append(f'<rect x="{x(a):.2f}" y="{y(lo) - tall:.2f}" width="{max(x(b) - x(a), 0.5):.2f}" '
                   f'height="{tall:.2f}" fill="{fill}"{extra}><title>{html.escape(title)}</title></rect>')

    for t in pic.tensors:
        fill = PINNED_COLOUR if t.pinned else colours[seed_phase(t.phase)]
        for a, b in pic.shown(t):
            rect(a, b, t.start, t.stop, fill, f"{t.name}: bytes [{t.start:#x}, {t.stop:#x}) "
                 f"({t.bytes:,}), live {a}..{b - 1}, {t.phase or 'pinned'}")
    red = f' fill-opacity="0.45" stroke="{RED}" stroke-width="1.5"'
    for name, lo, hi, shown, at in pic.red_planes():
        for a, b in shown:
            rect(a, b, lo, hi, RED, f"{name}: bytes [{lo:#x}, {hi:#x}) (failure)", red, least=4)
        out.append(f'<text x="{x(at):.2f}" y="{min(y(hi), y(lo) - 4) - 3:.2f}" fill="{RED}" font-size="12" '
                   f'font-weight="bold">{html.escape(name)}</text>')
    for p, (_, happens, _) in pic.red_launches().items():
        out.append(f'<line x1="{x(p + 0.5):.2f}" x2="{x(p + 0.5):.2f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" '
                   f'stroke="{RED}" stroke-width="1.5"><title>{html.escape(happens)}</title></line>')
    out.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" font-size="12">run order {pic.first} .. {pic.last} '
               f'(launch instances and host actions)</text>')
    for k in range(5):
        b = pic.low + (pic.high - pic.low) * k // 4
        out.append(f'<text x="4" y="{y(b):.2f}" font-size="11">{b / MIB:,.0f} MiB</text>')
    out.append("</svg>")
    legend = "".join(f'<li><span style="background:{c}"></span>{html.escape(ph)}</li>' for ph, c in colours.items())
    failures = "".join(f"<li>{html.escape(pic.describe(m))}</li>" for m in pic.marks)
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>arena</title><style>"
            "body{font-family:sans-serif} ul.legend{columns:4;list-style:none}"
            "ul.legend span{display:inline-block;width:12px;height:12px;margin-right:6px}"
            f".failures{{color:{RED}}}</style></head><body>"
            f"<h1>{html.escape(_title(pic))}</h1>"
            + (f'<ul class="failures">{failures}</ul>' if failures else "")
            + "\n".join(out)
            + f'<ul class="legend">{legend}<li><span style="background:{PINNED_COLOUR}"></span>pinned</li></ul>'
            "</body></html>\n")
