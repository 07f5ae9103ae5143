"""The plan file: a documented, versioned schema; byte-identical round trips;
untrusted input refused with the JSON path of what is wrong."""

from __future__ import annotations

import copy
import json
from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st

from planner.cli import main, summary
from planner.schedule.plan import PlanError, dumps, from_json, loads, to_json


def test_round_trip_is_byte_identical(small_plan):
    text = dumps(small_plan)
    again = loads(text)
    assert again == small_plan and dumps(again) == text and again.digest == small_plan.digest


def test_cli_round_trip(tmp_path, capsys, monkeypatch):
    import io
    assert main(["plan", "--json"]) == 0
    text = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["plan", "--load", "-", "--json"]) == 0
    assert capsys.readouterr().out == text
    # bytes that are not UTF-8, on standard input or in a file, whatever the locale decodes
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe{"), errors="strict"))
    assert main(["plan", "--load", "-"]) == 2
    assert capsys.readouterr().err == "planner plan: plan on standard input: is not UTF-8 text\n"
    (tmp_path / "binary.json").write_bytes(b'{"schema": "\xff"}')
    assert main(["plan", "--load", str(tmp_path / "binary.json")]) == 2
    assert capsys.readouterr().err == f"planner plan: plan file {tmp_path / 'binary.json'}: is not UTF-8 text\n"
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 57,705,472" in out and "coppelius/attention-head" in out


@pytest.fixture(scope="module")
def small_json(small_plan):
    return to_json(small_plan)


def _refused(data, path_prefix: str) -> PlanError:
    with pytest.raises(PlanError) as info:
        from_json(data)
    assert info.value.path.startswith(path_prefix), info.value
    return info.value


def test_unknown_image_family_is_refused(small_json):
    data = copy.deepcopy(small_json)
    data["images"][0]["family"] = "os-system"
    _refused(data, "$.images[0]")


def test_image_that_differs_from_its_manifest_is_refused(small_json):
    data = copy.deepcopy(small_json)
    data["images"][0]["arguments"][0]["access"] = "read"
    assert "manifest" in str(_refused(data, "$.images[0]"))


def test_image_constants_must_be_words_or_integers_the_source_takes(small_json):
    k = next(k for k, i in enumerate(small_json["images"]) if i["family"] == "tiled-add")
    for key, value, problem in (("wgmma", "c", "is not an integer"), ("block_m", 2 ** 31, "is not an integer"),
                                ("a_layout", "x", "is not one of r, c"), ("half", "binary8", "is not one of")):
        data = copy.deepcopy(small_json)
        data["images"][k]["constants"][key] = value
        assert problem in str(_refused(data, f"$.images[{k}]"))


def test_the_configuration_must_be_one(small_json):
    """The configuration the plan was derived from is checked as --config is."""
    for section, key, value, problem in (("shape", "width", 0, "positive"), ("shape", "wdth", 3, "not a field"),
                                         ("learner", "epsilon", {"a": 1}, "rational")):
        data = copy.deepcopy(small_json)
        data["config"].setdefault(section, {})[key] = value
        assert problem in str(_refused(data, "$.config"))


def test_notes_are_checked(small_json):
    """The notes the summary and the runtime read name launches and
    submissions the plan has."""
    launches, submissions = len(small_json["launches"]), len(small_json["submissions"])
    for change, path, problem in (
            (lambda n: n["submissions"].__setitem__("update", 2), "$.notes.submissions.update", "list"),
            (lambda n: n["submissions"].__setitem__("update", []), "$.notes.submissions.update", "no submission"),
            (lambda n: n["submissions"].__setitem__("update", [submissions]), "$.notes.submissions.update[0]",
             "outside"),
            (lambda n: n["stretches"].__setitem__("update", [launches - 1, 2]), "$.notes.stretches.update",
             "reaches launch"),
            (lambda n: n.__setitem__("parameters", "many"), "$.notes.parameters", "integer"),
            (lambda n: n.__setitem__("remarks", []), "$.notes.remarks", "no note")):
        data = copy.deepcopy(small_json)
        change(data["notes"])
        assert problem in str(_refused(data, path))


def test_a_placements_sites_are_checked(small_plan):
    """A placed plan's sites (what `planner explain` draws its tensors from)
    name its planes and accesses it makes."""
    from planner.place.placement import place
    placed = to_json(place(small_plan, budget_s=0.5).plan)
    from_json(placed)
    name = next(iter(placed["notes"]["placement"]["planes"]))
    submit = next(k for k, s in enumerate(placed["run"]) if s["kind"] == "submit")
    where = f"$.notes.placement.planes.{name}"
    for sites, path, problem in ((5, where, "must be a list"), ([[3]], f"{where}[0]", "[launch index, argument]"),
                                 ([[10 ** 6, "out"]], f"{where}[0]", "is no access"),
                                 ([[0, "nope"]], f"{where}[0]", "is no access"),
                                 ([[-1 - submit, "host"]], f"{where}[0]", "is no access")):
        data = copy.deepcopy(placed)
        data["notes"]["placement"]["planes"][name] = sites
        assert problem in str(_refused(data, path))
    data = copy.deepcopy(placed)
    data["notes"]["placement"]["planes"]["nope"] = []
    assert "names no plane" in str(_refused(data, "$.notes.placement.planes.nope"))


def test_stated_accesses_must_be_the_manifests(small_json):
    data = copy.deepcopy(small_json)
    data["launches"][5]["accesses"][0]["stop"] -= 4
    _refused(data, "$.launches[5].accesses")


def test_a_gated_gelu_backward_ending_inside_a_row_is_refused(small_json):
    # its pair gradient is written in whole rows of ffn (up, then gate)
    data = copy.deepcopy(small_json)
    k = next(k for k, l in enumerate(data["launches"]) if l["image"] == "gated-gelu-backward")
    slot = next(s for s in data["launches"][k]["slots"] if s["argument"] == "elements")
    slot["word"] -= 1
    assert "not whole rows" in str(_refused(data, f"$.launches[{k}]"))


def test_a_launch_waits_only_for_launches_issued_before_it(small_json):
    update = small_json["notes"]["submissions"]["update"][0]
    s = small_json["submissions"][update]
    first, count = s["ranges"][0]
    later = next(k for k, a in enumerate(s["after"]) if a)
    for after, problem in (([first + count - 1], "is not issued by this submission before"),
                           ([10 ** 6], "is not issued by this submission before"),
                           (s["after"][later] * 2, "names a launch twice")):
        data = copy.deepcopy(small_json)
        data["submissions"][update]["after"][later] = after
        assert problem in str(_refused(data, f"$.submissions[{update}].after[{later}]"))
    data = copy.deepcopy(small_json)
    data["submissions"][update]["after"].pop()
    assert "entries for" in str(_refused(data, f"$.submissions[{update}].after"))


def test_sizes_are_bounded_before_arithmetic(small_json):
    data = copy.deepcopy(small_json)
    data["planes"][0]["bytes"] = 10 ** 400
    _refused(data, "$.planes[0].bytes")
    data = copy.deepcopy(small_json)
    data["launches"][0]["grid"] = [1, 1, 1, 1]
    _refused(data, "$.launches[0].grid")


def test_a_key_named_twice_is_refused(small_plan):
    """Of two values for one key Python keeps the last, silently: a plan
    file naming a key twice in an object is refused instead."""
    text = dumps(small_plan)
    doubled = text.replace('"schema":', '"layout": "placed", "schema":', 1)
    assert doubled != text
    with pytest.raises(PlanError, match="names 'layout' twice in one object"):
        loads(doubled)


def test_truncated_and_malformed_text():
    for text in ("", "{", "[1, 2", '{"schema": "planner-plan/3"}', "null", "[" * 100000):
        with pytest.raises(PlanError):
            loads(text)


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data[:3]):
            yield from _paths(v, prefix + (i,))


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=5),
                 st.sampled_from(["r", "c", "binary16", "bfloat16"]), st.integers(0, 3),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@lru_cache(maxsize=1)
def fuzz_base() -> dict:
    """A plan small enough to fuzz quickly: one layer, one sequence."""
    from dataclasses import replace
    from planner.schedule import build_plan
    from tests.conftest import SMALL
    return to_json(build_plan(replace(SMALL, shape=replace(SMALL.shape, layers=1, batch=1))))


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_fuzzed_plans_never_crash(data):
    """Replace or delete any value: the reader refuses with a PlanError (or
    accepts a plan the summary of `planner plan --load` reads), never
    another exception."""
    doc = copy.deepcopy(fuzz_base())
    paths = [p for p in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(JUNK)
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    try:
        plan = from_json(doc)
    except PlanError:
        return
    summary(plan)


@given(cut=st.integers(0, 10 ** 9))
@settings(max_examples=40, deadline=None)
def test_truncations_never_crash(cut):
    text = json.dumps(fuzz_base())
    with pytest.raises(PlanError):
        loads(text[:cut % (len(text) - 1)])


def _launch_with(data, pointer: bool) -> int:
    """A launch with a pointer slot (or a scalar slot)."""
    return next(k for k, l in enumerate(data["launches"])
                if any(("window" in s) == pointer for s in l["slots"]))


def _host_step(data) -> int:
    return next(k for k, s in enumerate(data["run"]) if s["kind"] in ("read", "write"))


def _set(path, value):
    """A change that sets data[path...] = value, the path's steps being keys
    or functions of the data giving one."""
    def change(data):
        target = data
        steps = [step(data) if callable(step) else step for step in path]
        for step in steps[:-1]:
            target = target[step]
        target[steps[-1]] = value
    return change


def _twice(kind: str):
    def change(data):
        data[kind].append(copy.deepcopy(data[kind][0]))
    return change


@pytest.mark.parametrize("change, path, problem", [
    (_twice("windows"), "$.windows", "appears twice"),
    (_twice("planes"), "$.planes", "appears twice"),
    (_twice("phases"), "$.phases", "appears twice"),
    (_twice("images"), "$.images", "appears twice"),
    (_set(["planes", 0, "window"], "nowhere"), "$.planes[0].window", "names no window"),
    (_set(["globals", 0], "nothing"), "$.globals", "names no plane"),
    (_set(["phases", 0, "fresh"], ["nothing"]), "$.phases[0]", "names no plane"),
    (_set(["launches", 0, "image"], "nothing"), "$.launches[0].image", "names no image"),
    (_set(["launches", 0, "phase"], "nothing"), "$.launches[0].phase", "names no phase"),
    (_set(["launches", 0, "slots"], []), "$.launches[0].slots", "exactly the arguments"),
    (_set(["launches", lambda d: _launch_with(d, True), "slots", 0, "offset"], 4), "$.launches[",
     "does not match argument"),
    (_set(["launches", lambda d: _launch_with(d, True), "slots", 0, "window"], "nowhere"), "$.launches[",
     "names no window"),
    (_set(["launches", 0, "grid"], [3, 1, 1]), "$.launches[0].grid", "launches grid"),
    (_set(["launches", 0, "block"], 32), "$.launches[0].grid", "launches grid"),
    (_set(["submissions", 0, "ranges"], [[0, 10 ** 6]]), "$.submissions[0].ranges", "reach launch"),
    (_set(["submissions", 0, "ranges"], [[0, 1], [0, 1]]), "$.submissions[0].after", "entries for"),
    (_set(["run", 0, "submission"], 10 ** 4), "$.run[0].submission", "names no submission"),
    (_set(["run", 1, "after"], [1]), "$.run[1].after", "not an earlier submit step"),
    (_set(["run", _host_step, "window"], "nowhere"), "$.run[", "names no window"),
    (_set(["run", _host_step, "plane"], "parameters"), "$.run[", "names no plane of window staging"),
    (_set(["run", _host_step, "stop"], 0), "$.run[", "at least one byte"),
])
def test_every_name_and_count_a_plan_gives_is_checked(small_json, change, path, problem):
    """Each rule that makes a plan file well formed refuses a file breaking
    it, on one line naming where."""
    data = copy.deepcopy(small_json)
    change(data)
    assert problem in str(_refused(data, path))


def test_a_launch_issued_twice_is_refused(small_json):
    data = copy.deepcopy(small_json)
    s = data["submissions"][0]
    first, count = s["ranges"][0]
    s["ranges"] = [[first, count], [first, 1]]
    s["after"] = s["after"] + [[]]
    assert "twice" in str(_refused(data, "$.submissions[0].ranges"))
