"""The arena's picture: real plans drawn as PNG, SVG and HTML, and a failure
report's planes and launch drawn in red."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET

import pytest

from planner import cli
from planner.model.config import to_dict
from planner.place.check import declared_tensors, overlaps
from planner.place.liveness import liveness, run_order
from planner.place.placement import place
from planner.place.problem import problem
from planner.place.relocate import relocate
from planner.schedule.explain import Mark, ReportError, picture, read_report, render
from planner.schedule.plan import dumps
from tests.conftest import SMALL, refused

PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def small_placed(small_plan):
    return place(small_plan, budget_s=1.0).plan


@pytest.fixture(scope="module")
def aliased(small_plan):
    """A placement of the small plan with one tensor moved onto another it
    is live with, and the overlaps found in it."""
    lv = liveness(small_plan)
    p = problem(lv, "arena")
    offsets = {t.name: t.start for t in p.tensors}
    a = max(range(len(p.tensors)), key=lambda i: len(p.conflicts[i]))
    b = p.conflicts[a][0]
    offsets[p.tensors[a].name] = offsets[p.tensors[b].name]
    bad = relocate(lv, "arena", offsets, {"liveness": "launch"})
    events = run_order(bad)
    return bad, overlaps(declared_tensors(bad, "arena", events), events)


def test_the_default_placed_arena_as_png(tmp_path, default_plan):
    out = tmp_path / "arena.png"
    render(picture(place(default_plan).plan), out)
    width, height = png_size(out)
    assert (width, height) == (1600, 900)
    assert 20_000 < out.stat().st_size < 5_000_000


def test_the_seed_layout_drawn_from_its_accesses(tmp_path, small_plan):
    pic = picture(small_plan)
    assert {t.name for t in pic.tensors if t.pinned} >= {"parameters", "half-copies"}
    assert all(t.live for t in pic.tensors)
    out = tmp_path / "seed.svg"
    render(pic, out)
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    assert 20_000 < out.stat().st_size < 20_000_000


def test_html_names_every_rectangle(tmp_path, small_placed):
    out = tmp_path / "arena.html"
    pic = picture(small_placed, positions=(0, 2000), movable=True)
    render(pic, out)
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    svg = text[text.index("<svg"):text.index("</svg>") + 6]
    rects = ET.fromstring(svg).findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) == sum(len(pic.shown(t)) for t in pic.tensors)
    assert all(r.find("{http://www.w3.org/2000/svg}title") is not None for r in rects)


def test_a_failure_is_drawn_in_red(tmp_path, aliased):
    bad, found = aliased
    assert found
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"overlaps": [o.to_json() for o in found[:1]]}))
    marks = read_report(json.loads(report.read_text()))
    pic = picture(bad, marks=marks)
    html = tmp_path / "failure.html"
    render(pic, html)
    text = html.read_text()
    assert f">{marks[0].plane_a}</text>" in text and f">{marks[0].plane_b}</text>" in text
    assert 'class="failures"' in text and f"launch {marks[0].launch_index} " in text
    assert pic.launch_positions(marks[0]) == [found[0].position]
    png = tmp_path / "failure.png"
    render(pic, png)
    assert png_size(png) == (1600, 900)


def test_planner_explain_draws_a_report_and_finds_overlaps(tmp_path, monkeypatch, capsys, aliased):
    monkeypatch.setitem(cli.COMMANDS, "explain", ("planner.schedule.explain_command", "add_arguments", "run",
                                          "draw the arena; failures in red"))
    bad, found = aliased
    plan_file = tmp_path / "bad.json"
    plan_file.write_text(dumps(bad))
    report = tmp_path / "report.json"
    report.write_text(json.dumps([o.to_json() for o in found]))
    out = tmp_path / "bad.png"
    assert cli.main(["explain", "--load", str(plan_file), "--report", str(report), "--out", str(out)]) == 0
    assert png_size(out) == (1600, 900)
    assert cli.main(["explain", "--load", str(plan_file), "--check", "--out", str(tmp_path / "c.svg")]) == 1
    assert "overlap:" in capsys.readouterr().out
    config = tmp_path / "small.json"
    config.write_text(json.dumps(to_dict(SMALL)))
    ok = tmp_path / "ok.png"
    assert cli.main(["explain", "--config", str(config), "--placed", "--check", "--out", str(ok)]) == 0
    assert cli.main(["explain", "--config", str(config), "--out", str(tmp_path / "x.gif")]) == 2


def test_the_certificates_report_is_drawn(tmp_path, aliased):
    certify = pytest.importorskip("planner.certify")
    from planner.certify.report import to_json
    bad, _ = aliased
    outcome = certify.certify(bad, only=["live"], limit=2)
    assert outcome.verdict == "fail"
    marks = read_report(json.loads(json.dumps(to_json(outcome))))
    assert marks and all(m.launch_index >= 0 and m.step is not None for m in marks)
    pic = picture(bad, marks=marks)
    assert all(pic.launch_positions(m) for m in marks)
    assert all(pic.named(m.plane_a) and pic.named(m.plane_b) for m in marks)
    out = tmp_path / "certificate.svg"
    render(pic, out)
    assert ET.parse(out).getroot().tag.endswith("svg")


def test_a_report_must_name_two_planes_and_a_launch():
    assert read_report([{"plane_a": "a", "plane_b": "b", "launch_index": 3, "extra": 1}]) == [Mark("a", "b", 3)]
    with pytest.raises(ReportError):
        read_report({"overlaps": [{"plane_a": "a", "launch_index": 3}]})
    with pytest.raises(ReportError):
        read_report("nonsense")
    for properties in ([{"violations": 5}], [3]):  # a certificate's report whose properties are damaged
        with pytest.raises(ReportError):
            read_report({"properties": properties})
    machine_code = {"message": "image fill (sm_90) does not compile", "planes": [], "writer": None}
    assert read_report({"properties": [{"violations": [machine_code]}]}) == []


def test_a_report_of_another_plan_is_refused(tmp_path, capsys):
    """A report naming a plane, a launch or a run position the plan has not
    is refused in one line, and no picture is written."""
    for record, what in (({"plane_a": "nope", "plane_b": "logits", "launch_index": 3}, "plane 'nope'"),
                         ({"plane_a": "qkv", "plane_b": "logits", "launch_index": 10 ** 9}, "launch 1000000000"),
                         ({"plane_a": "qkv", "plane_b": "logits", "launch_index": 3, "position": -7},
                          "run position -7")):
        report = tmp_path / "report.json"
        report.write_text(json.dumps([record]))
        assert cli.main(["explain", "--report", str(report), "--out", str(tmp_path / "arena.svg")]) == 2
        err = capsys.readouterr().err
        assert f"record 0 names {what}, which this plan has not" in err and err.count("\n") == 1
        assert not (tmp_path / "arena.svg").exists()


def test_a_report_that_is_not_json_is_refused(tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_bytes(bytes(range(128, 256)))
    assert cli.main(["explain", "--report", str(report), "--out", str(tmp_path / "arena.svg")]) == 2
    assert capsys.readouterr().err == f"planner explain: report {report}: is not UTF-8 text\n"
    assert not (tmp_path / "arena.svg").exists()


def test_a_seed_plane_named_in_a_report_is_found(small_plan):
    pic = picture(small_plan, marks=[Mark("logits", "qkv", 0)])
    assert pic.named("logits") and pic.named("qkv")
    assert pic.named("no-such-plane") == []


@pytest.mark.parametrize("args, message", [
    (["--out", "{tmp}/arena.gif"], "planner explain: --out {tmp}/arena.gif: the picture is written as .png, .svg"),
    (["--window", "nowhere"], "planner explain: --window nowhere: the plan has windows arena"),
    (["--positions", "3"], "planner explain: --positions 3: must be FIRST:LAST (integers)"),
    (["--positions", "a:b"], "planner explain: --positions a:b: must be FIRST:LAST (integers)"),
    (["--positions", "1:2:3"], "planner explain: --positions 1:2:3: must be FIRST:LAST (integers)"),
    (["--positions", "5:2"], "planner explain: --positions 5:2: must have 0 <= FIRST <= LAST"),
    (["--positions=-1:2"], "planner explain: --positions -1:2: must have 0 <= FIRST <= LAST"),
    (["--check"], "planner explain: --check draws a placed plan's live overlaps; this plan is not placed"),
    (["--out", "{tmp}/nowhere/arena.svg"], "planner explain: --out {tmp}/nowhere/arena.svg: cannot be written"),
])
def test_planner_explain_refuses_bad_input_in_one_line(tmp_path, capsys, small_config, args, message):
    out = [] if "--out" in args else ["--out", "{tmp}/arena.svg"]
    refused(capsys, tmp_path, ["explain", "--config", str(small_config), *out, *args], message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json"]   # nothing drawn
