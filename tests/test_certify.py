"""The certificate on plans broken the ways plans break: each query says sat
on a broken plan and unsat on the plan it was broken from; the reports name
what a fix needs; certificates are issued only for a full pass, kept in
files and found stale when the plan changes; `planner certify` exits as
documented."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from planner.certify import command, demand_certificate, issue, proofs, register
from planner.certify.findings import FAIL, PASS, UNKNOWN, MachineFindings, Violation
from planner.certify.properties import MACHINE_CHECKS, check
from planner.certify.report import render
from planner.certify.smt import Answer, Prover
from planner.model.config import DEFAULT
from planner.schedule.plan import HOST_WRITE, SUBMIT, WAIT, dumps
from tests.plans import (ARENA, Builder, drop_launch, move_plane, move_pointer, synthetic, with_step,
                         without_step)

GOOD = synthetic()


def answer(plan, prop: str) -> str:
    (r,) = check(plan, only=[prop]).results
    return r.answer


def _launch(plan, image_prefix: str, phase: str, k: int = 0) -> int:
    return [l.index for l in plan.launches if l.image.startswith(image_prefix) and l.phase == phase][k]


def two_phases(in_order: bool):
    """Phase a makes plane x, phase b plane y on the same bytes (a placement
    from launch-level liveness). a writes x, b writes y, a reads x: in that
    order x is still live when y is written."""
    b = Builder()
    x = b.plane("x", 0, 64)
    y = b.plane("y", 0, 64)
    src = b.plane("source", 256, 64, is_global=True)
    a_, b_ = b.phase("a", ["x"]), b.phase("b", ["y"])
    init = b.launch("fill", a_, 16, out=src)
    make_x = b.launch("copy", a_, 16, out=x, **{"in": src})
    make_y = b.launch("copy", b_, 16, out=y, **{"in": src})
    use_x = b.launch("copy", a_, 16, out=src, **{"in": x})
    order = [init, make_x, use_x, make_y] if in_order else [init, make_x, make_y, use_x]
    b.submit(b.submission(order[:2]))
    b.submit(b.submission(order[2:]), (0,))
    return b.build()


# ---- every query: sat on a broken plan, unsat on the good one ----

BROKEN = {
    # a pointer 8 bytes on: its extent runs past its plane's end
    "containment": lambda p: move_pointer(p, _launch(p, "copy", "layer", 1), "out", ARENA,
                                          p.plane["work1"].offset + 8),
    # the output phase's two planes on the same bytes
    "declared": lambda p: move_plane(p, "loss", p.plane["logits"].offset),
    # the second update no longer waits for the first's semaphore
    "ordering": lambda p: with_step(p, _second_update(p), replace(p.run[_second_update(p)], after=())),
    # nothing initialises the parameters any more
    "defined": lambda p: drop_launch(p, 0),
}


def _second_update(plan) -> int:
    updates = [k for k, s in enumerate(plan.run) if s.kind == SUBMIT and len(plan.submissions[s.submission].ranges) > 1]
    return updates[1]


@pytest.mark.parametrize("prop", sorted(BROKEN))
def test_the_query_is_sat_on_the_broken_plan_and_unsat_on_the_good_one(prop):
    assert answer(GOOD, prop) == "unsat"
    assert answer(BROKEN[prop](GOOD), prop) == "sat"


@pytest.mark.parametrize("prop", ["live", "survive"])
def test_liveness_queries_judge_the_run_order(prop):
    assert answer(two_phases(in_order=True), prop) == "unsat"
    assert answer(two_phases(in_order=False), prop) == "sat"
    # the seed's declaration per phase cannot see it
    assert answer(two_phases(in_order=False), "declared") == "unsat"


def test_the_model_is_the_counterexample():
    (r,) = check(two_phases(in_order=False), only=["live"]).results
    (v,) = r.violations
    assert {p.name for p in v.planes} == {"x", "y"}
    assert v.planes[0].start <= v.witness["b"] < v.planes[0].stop
    assert v.writer.argument == "out" and v.writer.phase == "b" and v.other.phase == "a"
    assert v.path_ordered is True


def test_an_unknown_is_never_a_pass(monkeypatch):
    monkeypatch.setattr(Prover, "decide", lambda self, query, limit=1: Answer(UNKNOWN, (), "timeout"))
    outcome = check(GOOD)
    assert {r.verdict for r in outcome.results} == {UNKNOWN}
    assert outcome.verdict == UNKNOWN and not outcome.ok
    with pytest.raises(proofs.Uncertified):
        proofs.issue(outcome)


# ---- the default plan, and the seed's history ----

def test_the_default_plan_is_certified(default_plan):
    outcome = check(default_plan)
    assert outcome.ok, render(outcome)
    assert outcome.seconds < 20, f"{outcome.seconds:.1f} s"


def _all(outcome) -> list[Violation]:
    return [v for r in outcome.results for v in r.violations]


def _names(v: Violation) -> set[str]:
    return {p.name for p in v.planes}


def test_cross_entropy_backward_writing_the_logits_gradient_over_the_loss(default_plan):
    """The seed's first recorded hazard: logits-gradient placed on the loss
    rows. (The seed's cross-entropy backward read the loss and wrote the
    gradient over it; ours writes both, from one reading of the logits:
    its two writes of the same bytes are unordered, and the planes share
    them while both live.)"""
    p = default_plan
    bad = move_plane(p, "logits-gradient", p.plane["loss"].offset)
    outcome = check(bad, only=["declared", "live", "ordering"], limit=20)
    assert {r.verdict for r in outcome.results} == {FAIL}
    ceb = _launch(p, "cross-entropy-backward", "coppelius/output")
    hits = {v.property: v for v in _all(outcome) if _names(v) == {"logits-gradient", "loss"}}
    assert set(hits) == {"declared", "live", "ordering"}
    ordering = hits["ordering"]
    assert {(a.launch, a.image, a.phase, a.argument) for a in (ordering.writer, ordering.other)} == \
        {(ceb, "cross-entropy-backward", "coppelius/output", argument) for argument in ("gradient", "loss")}
    assert "in one launch" in ordering.message
    for v in hits.values():
        assert v.overlap.stop - v.overlap.start == p.plane["loss"].bytes
    report = render(outcome)
    for word in ("logits-gradient", "loss", "cross-entropy-backward", "coppelius/output", "argument gradient"):
        assert word in report


def test_a_backward_phase_reusing_a_buffer_it_still_carries(default_plan):
    """attention-head carries context-gradient-t (the row terms) from
    head-layout; its own qkv gradient placed on those bytes has the
    attention backward's launch write its query rows over the row terms it
    still reads."""
    p = default_plan
    bad = move_plane(p, "qkv-gradient-t", p.plane["context-gradient-t"].offset)
    outcome = check(bad, only=["declared", "survive"], limit=20)
    hits = [v for v in _all(outcome) if "context-gradient-t" in _names(v)]
    assert {v.property for v in hits} == {"declared", "survive"}
    declared = next(v for v in hits if v.property == "declared")
    assert _names(declared) == {"qkv-gradient-t", "context-gradient-t"}
    survive = next(v for v in hits if v.property == "survive")
    assert survive.writer.phase == "coppelius/attention-head" and survive.writer.argument == "d_q"
    assert survive.writer.image.startswith("attention-backward") and survive.other.argument == "row_terms"
    s = DEFAULT.shape
    assert survive.overlap.stop - survive.overlap.start == s.tokens * s.heads * 4
    assert "written by launch" in survive.message and "head-layout" in survive.message


def test_a_pointer_slot_past_its_planes_end(default_plan):
    p = default_plan
    ce = next(l.index for l in p.launches if l.image == "cross-entropy" and l.phase == "coppelius/output")
    bad = move_pointer(p, ce, "loss", "arena", p.plane["loss"].offset + 256)
    (r,) = check(bad, only=["containment"], limit=20).results
    (v,) = [v for v in r.violations if v.writer and v.writer.launch == ce]
    assert v.planes[0].name == "loss" and (v.overlap.start, v.overlap.stop) == (p.plane["loss"].stop,
                                                                               p.plane["loss"].stop + 256)
    assert "256 bytes past the end of plane loss" in v.message


def test_a_launch_writing_the_global_it_reads(default_plan):
    """A layer's norm writes its output over the parameters it reads (its gamma)."""
    p = default_plan
    ln = _launch(p, "layernorm-forward", "coppelius/layer", 3)
    gamma = next(a for a in p.launches[ln].accesses if a.argument == "gamma")
    bad = move_pointer(p, ln, "out", "arena", gamma.start)
    outcome = check(bad, only=["survive", "ordering"], limit=20)
    for r in outcome.results:
        v = next(v for v in r.violations if v.writer.launch == ln and v.other.argument == "gamma")
        assert v.writer.argument == "out" and v.other.plane == "parameters"


@pytest.mark.parametrize("shift", [0, 4096])
def test_a_layer_norms_half_copy_over_its_own_block_sums(default_plan, shift):
    """Both in x-hat's plane, apart (the sums in its first half, the copy in
    its second): one launch writing the copy over the sums races with itself,
    whether over the same bytes or some of them."""
    p = default_plan
    norm = _launch(p, "layernorm-backward-add", "coppelius/qkv", 2)
    partials = next(a for a in p.launches[norm].accesses if a.argument == "partials")
    bad = move_pointer(p, norm, "dx_half", "arena", partials.start + shift)
    (r,) = check(bad, only=["ordering"], limit=20).results
    v = next(v for v in r.violations if v.writer.launch == norm and v.other.launch == norm)
    assert {v.writer.argument, v.other.argument} == {"dx_half", "partials"}
    assert "in one launch" in v.message
    (good,) = check(p, only=["ordering"]).results
    assert good.verdict == PASS


@pytest.mark.parametrize("shift, races", [(0, False), (256, True)])
def test_a_launch_reading_in_place_what_it_writes(default_plan, shift, races):
    """A product's residual read over the bytes it writes (each element read
    by the thread that writes it: tiled-add's C may be R) is in place; over
    some other bytes of them, the launch races with itself."""
    p = default_plan
    down = next(l.index for l in p.launches if l.image.startswith("tiled-rr") and l.image.endswith("-add")
                and l.phase == "coppelius/layer")
    c = next(a for a in p.launches[down].accesses if a.argument == "c")
    bad = move_pointer(p, down, "r", "arena", c.start + shift)
    (r,) = check(bad, only=["ordering"], limit=50).results
    own = [v for v in r.violations if v.writer.launch == down and v.other.launch == down]
    assert bool(own) == races
    if races:
        assert {own[0].writer.argument, own[0].other.argument} == {"c", "r"} and "in one launch" in own[0].message


def test_a_semaphore_removed_between_two_conflicting_submissions(default_plan):
    p = default_plan
    k = next(k for k, s in enumerate(p.run) if s.kind == SUBMIT and s.after and p.run[k - 1].kind == SUBMIT)
    bad = with_step(p, k, replace(p.run[k], after=()))
    (r,) = check(bad, only=["ordering"], limit=5).results
    assert r.verdict == FAIL
    # nothing waits for the submission before any more: it races with what follows
    for v in r.violations:
        assert k - 1 in {v.writer.run_step, v.other.run_step}
        assert v.path_ordered is False and v.path


def test_a_host_staging_write_racing_a_submission_that_still_reads_it(default_plan):
    p = default_plan
    # the host waits for an update before it writes the next update's token ids
    ids = [k for k, s in enumerate(p.run) if s.kind == HOST_WRITE and "token ids" in s.what]
    k = ids[len(ids) // 2]
    wait = max(j for j in range(k) if p.run[j].kind == WAIT)
    bad = without_step(p, wait)
    (r,) = check(bad, only=["ordering"], limit=20).results
    races = [v for v in r.violations if v.writer.launch is None and v.other.launch is not None]
    assert races, render(check(bad, only=["ordering"]))
    v = races[0]
    assert v.writer.mode == "write" and v.other.mode == "read" and v.overlap.window == "staging"
    assert v.path_ordered is False


def test_a_read_of_bytes_nothing_wrote(default_plan):
    p = default_plan
    rotary = _launch(p, "rotary-table", "coppelius/rotary")
    bad = drop_launch(p, rotary)
    (r,) = check(bad, only=["defined"], limit=20).results
    assert r.verdict == FAIL
    tables = {a.start for a in p.launches[rotary].accesses}
    v = next(v for v in r.violations if v.overlap.start in tables)
    assert v.other.mode == "read" and v.planes[0].name.startswith("rotary-")


# ---- reports ----

def test_reports_in_text_json_and_sarif():
    outcome = check(two_phases(in_order=False))
    text = render(outcome)
    assert "NOT certified" in text and "FAIL 2b live" in text and "path:" in text
    data = json.loads(render(outcome, "json"))
    assert data["verdict"] == FAIL and data["plan"] == outcome.digest
    live = next(p for p in data["properties"] if p["id"] == "live")
    assert live["violations"][0]["writer"]["phase"] == "b"
    sarif = json.loads(render(outcome, "sarif"))
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    (run,) = sarif["runs"]
    rules = {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert {"containment", "declared", "live", "survive", "ordering", "defined"} <= rules
    for result in run["results"]:
        assert result["ruleId"] in rules and result["level"] == "error" and result["message"]["text"]
        assert result["locations"][0]["logicalLocations"][0]["name"]
    assert any("codeFlows" in r for r in run["results"])


# ---- certificates ----

def test_a_certificate_only_for_a_full_pass():
    certificate = demand_certificate(GOOD)
    # properties 1-5 (2 twice) and the machine code of every image it launches
    assert certificate.admits(GOOD) and "7 properties proved" in certificate.summary()
    assert not certificate.admits(BROKEN["defined"](GOOD))
    with pytest.raises(proofs.Uncertified, match="defined fail"):
        demand_certificate(BROKEN["defined"](GOOD))


def test_certificate_files_are_current_then_stale(tmp_path):
    outcome = check(GOOD)
    proofs.write(outcome, tmp_path)
    stored = json.loads((tmp_path / "certificate.json").read_text())
    assert stored["plan"] == GOOD.digest and stored["solver"].startswith("Z3 ")
    assert (tmp_path / "ordering.smt2").read_text().startswith("; ordering")
    assert proofs.check(outcome, tmp_path, resolve=True).current
    changed = proofs.check(check(BROKEN["ordering"](GOOD)), tmp_path)
    assert not changed.current and any("stale" in p for p in changed.problems)
    (tmp_path / "live.smt2").write_text("(declare-const b Int)\n(assert (= b 1))\n")
    tampered = proofs.check(outcome, tmp_path, resolve=True)
    assert any("live.smt2" in p for p in tampered.problems)
    (tmp_path / "live.smt2").write_bytes(bytes(range(128, 256)))  # not text: named, not a traceback
    tampered = proofs.check(outcome, tmp_path, resolve=True)
    assert any(p.startswith("live.smt2: not the file the record names") for p in tampered.problems)
    (tmp_path / "certificate.json").write_bytes(bytes(range(128, 256)))
    assert proofs.check(outcome, tmp_path).problems == (f"{tmp_path / 'certificate.json'}: is not UTF-8 text",)
    (tmp_path / "certificate.json").unlink()
    assert proofs.check(outcome, tmp_path).problems == (f"{tmp_path / 'certificate.json'}: no certificate",)


def test_both_solvers_decide_the_stored_queries_again(tmp_path, monkeypatch):
    """Z3 and cvc5 each decide a stored query again, and either saying
    anything but unsat fails the check: a satisfiable query recorded as the
    certificate's (its SHA-256 the record's) is refused by both, and cvc5
    alone disagreeing is enough."""
    outcome = check(GOOD)
    proofs.write(outcome, tmp_path)
    assert proofs.second_answer((tmp_path / "live.smt2").read_text()) == "unsat"
    record = json.loads((tmp_path / "certificate.json").read_text())
    satisfiable = "(set-logic QF_LIA)\n(declare-const b Int)\n(assert (= b 1))\n(check-sat)\n"
    (tmp_path / "live.smt2").write_text(satisfiable)
    entry = next(e for e in record["properties"] if e["id"] == "live")
    entry["sha256"] = proofs._sha(satisfiable)
    (tmp_path / "certificate.json").write_text(json.dumps(record))
    live = [p for p in proofs.check(outcome, tmp_path, resolve=True).problems if p.startswith("live.smt2")]
    assert len(live) == 2 and all(p.endswith("now answers sat") for p in live)
    assert any(" Z3 " in p for p in live) and any(" cvc5 " in p for p in live)
    proofs.write(outcome, tmp_path)
    monkeypatch.setattr(proofs, "second_answer", lambda text: "sat")
    disagreeing = proofs.check(outcome, tmp_path, resolve=True).problems
    assert disagreeing and all(" cvc5 " in p and p.endswith("now answers sat") for p in disagreeing)
    assert {p.split(":")[0] for p in disagreeing} == {f"{r.property}.smt2" for r in outcome.results if r.query}


def test_a_query_a_solver_cannot_read_is_named(tmp_path):
    assert proofs.second_answer("(assert (= b 1))\n(check-sat)\n").startswith("that it cannot read it (")
    assert proofs.second_answer("(set-logic QF_LIA)\n(declare-const b Int)\n") == "no answer (no check-sat)"
    outcome = check(GOOD)
    proofs.write(outcome, tmp_path)
    record = json.loads((tmp_path / "certificate.json").read_text())
    unreadable = "(assert (= b 1))\n(check-sat)\n"   # b is not declared
    (tmp_path / "live.smt2").write_text(unreadable)
    next(e for e in record["properties"] if e["id"] == "live")["sha256"] = proofs._sha(unreadable)
    (tmp_path / "certificate.json").write_text(json.dumps(record))
    live = [p for p in proofs.check(outcome, tmp_path, resolve=True).problems if p.startswith("live.smt2")]
    assert len(live) == 2 and all("now answers that it cannot read it (" in p for p in live)


def test_a_machine_code_check_is_a_property():
    found = Violation("sass", "image fill: a read before its barrier clears")
    register("sass-test", lambda plan: MachineFindings((found,), attested={"fill@sm_90": "ab" * 32}))
    try:
        outcome = check(GOOD, only=["sass-test"])
        assert outcome.verdict == FAIL and outcome.results[0].violations == (found,)
        register("sass-test", lambda plan: MachineFindings(attested={"fill@sm_90": "ab" * 32}))
        certificate = issue(check(GOOD))
        assert certificate.cubins == {"fill@sm_90": "ab" * 32}
        register("sass-test", lambda plan: MachineFindings(unknown=("a call it cannot follow",)))
        assert check(GOOD, only=["sass-test"]).verdict == UNKNOWN
    finally:
        MACHINE_CHECKS.pop("sass-test")


def test_stored_attestations_go_stale_with_a_cubin_or_the_check(tmp_path):
    """A stored certificate vouches for the cubins its machine-code check
    passed and names that check: another cubin, one more or one fewer, or
    another check (its code, latency model or disassembler) leave it stale."""
    def machine(attested, checker="check-1"):
        register("sass-test", lambda plan: MachineFindings(attested=attested, checker=checker))
        return check(GOOD)

    try:
        proofs.write(machine({"fill@sm_90": "ab" * 32, "copy@sm_90": "cd" * 32}), tmp_path)
        stored = json.loads((tmp_path / "certificate.json").read_text())
        entry = next(e for e in stored["properties"] if e["id"] == "sass-test")
        assert entry["checker"] == "check-1" and entry["attested"]["fill@sm_90"] == "ab" * 32
        assert proofs.check(machine({"fill@sm_90": "ab" * 32, "copy@sm_90": "cd" * 32}), tmp_path).current
        for attested, checker, word in [({"fill@sm_90": "ef" * 32, "copy@sm_90": "cd" * 32}, "check-1", "fill@sm_90"),
                                        ({"fill@sm_90": "ab" * 32}, "check-1", "copy@sm_90"),
                                        ({"fill@sm_90": "ab" * 32, "copy@sm_90": "cd" * 32}, "check-2",
                                         "another machine-code check")]:
            found = proofs.check(machine(attested, checker), tmp_path)
            assert not found.current and any("sass-test" in p and word in p for p in found.problems), found.problems
    finally:
        MACHINE_CHECKS.pop("sass-test")


# ---- the command ----

def _certify(*argv: str) -> int:
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return command.run(p.parse_args(list(argv)))


def test_command_exit_statuses(tmp_path, capsys):
    store = tmp_path / "proofs"
    (tmp_path / "now").mkdir()
    (tmp_path / "later").mkdir()
    good, changed = tmp_path / "now" / "plan.json", tmp_path / "later" / "plan.json"
    good.write_text(dumps(GOOD))
    changed.write_text(dumps(BROKEN["ordering"](GOOD)))
    assert _certify("--plan", str(good), "--proofs", str(store), "--write-proofs") == 0
    out = capsys.readouterr().out
    assert "certified: 7 of 7 properties proved" in out and "6 queries in" in out
    assert (store / "plan" / "certificate.json").exists()
    assert _certify("--plan", str(good), "--proofs", str(store), "--check-proofs") == 0
    assert _certify("--plan", str(changed), "--proofs", str(store), "--check-proofs") == 1
    assert "stale" in capsys.readouterr().err
    assert _certify("--plan", str(changed), "--format", "sarif") == 1
    assert json.loads(capsys.readouterr().out)["version"] == "2.1.0"
    (tmp_path / "broken.json").write_text("{not json")
    assert _certify("--plan", str(tmp_path / "broken.json")) == 2
    assert _certify("--plan", str(tmp_path / "missing.json")) == 2
    (tmp_path / "config.json").write_text('{"shape": {"layers": 0}}')
    assert _certify("--config", str(tmp_path / "config.json")) == 2
    err = capsys.readouterr().err
    assert f"plan file {tmp_path / 'broken.json'}: $: is not JSON" in err and "cannot be read" in err
    assert "shape.layers" in err and "Traceback" not in err and len(err.strip().splitlines()) == 3
    # a file where the proofs' directory would go: refused before anything is decided
    (tmp_path / "a-file").write_text("")
    assert _certify("--plan", str(good), "--proofs", str(tmp_path / "a-file" / "more"), "--write-proofs") == 2
    captured = capsys.readouterr()
    assert captured.err == (f"planner certify: --proofs {tmp_path / 'a-file' / 'more' / 'plan'}: "
                            f"{tmp_path / 'a-file'} is not a directory\n") and captured.out == ""


def test_command_unknown(tmp_path, monkeypatch, capsys):
    """A solver with no answer: exit status 3 in every format, each saying
    unknown and none certified; a certificate written of it records the
    verdict, and checking it later refuses it though the plan proves."""
    good = tmp_path / "good.json"
    good.write_text(dumps(GOOD))
    store = str(tmp_path / "proofs")
    with monkeypatch.context() as m:
        m.setattr(Prover, "decide", lambda self, query, limit=1: Answer(UNKNOWN, (), "timeout"))
        assert _certify("--plan", str(good), "--format", "json") == 3
        assert json.loads(capsys.readouterr().out)["verdict"] == UNKNOWN
        assert _certify("--plan", str(good), "--proofs", store, "--write-proofs") == 3
        out = capsys.readouterr().out
        assert "UNKNOWN 1 containment:" in out and "the solver gave no answer (timeout)" in out
        assert "NOT certified (unknown)" in out and "\ncertified" not in out
        assert _certify("--plan", str(good), "--format", "sarif") == 3
        results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
        assert results and {r["kind"] for r in results} == {"open"}
        assert {r["level"] for r in results} == {"warning"}
    assert _certify("--plan", str(good), "--proofs", store, "--check-proofs") == 1
    assert "records verdict unknown, not pass" in capsys.readouterr().err


def test_the_seed_layout_that_fails_at_another_shape_points_to_a_placement(tmp_path, capsys, monkeypatch):
    """At the small shape the seed's placement fails property 2a only: the
    report says `--layout placed` places the arena, and that placement
    certifies (the machine code aside: the images are another test's)."""
    from planner.cli import main
    from planner.model.config import to_dict
    from tests.conftest import SMALL
    monkeypatch.setattr("planner.certify.command.with_machine_code", lambda: {})
    config = tmp_path / "small.json"
    config.write_text(json.dumps(to_dict(SMALL)))
    assert main(["certify", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "FAIL 2a declared" in out and "`--layout placed` places the arena" in out
    assert main(["certify", "--config", str(config), "--layout", "placed"]) == 0
    assert "--layout placed" not in capsys.readouterr().out
