"""The configuration: defaults, validation, reading."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest

from planner.cli import main
from planner.model.config import DEFAULT, ConfigError, from_dict, to_dict, validate


def test_default_is_the_seed_shape():
    s = DEFAULT.shape
    assert (s.layers, s.width, s.heads, s.kv_heads, s.ffn, s.vocab, s.seq, s.batch) == \
        (16, 512, 8, 8, 1408, 12288, 1024, 1)
    assert s.head_width == 64 and s.tokens == 1024 and s.qkv_width == 1536
    assert validate(DEFAULT) is DEFAULT


@pytest.mark.parametrize("change, field_name", [
    (dict(width=500), "shape.heads"),
    (dict(heads=4), "shape.heads"),            # head width 128
    (dict(kv_heads=3), "shape.kv_heads"),
    (dict(seq=1000), "shape.seq"),
    (dict(vocab=12300), "shape.vocab"),
    (dict(vocab=70016), "shape.vocab"),
    (dict(ffn=1400), "shape.ffn"),
    (dict(layers=0), "shape.layers"),
    (dict(layers=1025), "shape.layers"),
    (dict(batch=-1), "shape.batch"),
])
def test_shape_rules_name_the_field(change, field_name):
    with pytest.raises(ConfigError) as info:
        validate(replace(DEFAULT, shape=replace(DEFAULT.shape, **change)))
    assert info.value.field_name == field_name
    assert str(info.value).startswith(f"{field_name} = ")


@pytest.mark.parametrize("section, change, field_name", [
    ("learner", dict(beta1=Fraction(1)), "learner.beta1"),
    ("learner", dict(loss_scale=1000), "learner.loss_scale"),
    ("learner", dict(half="fp8"), "learner.half"),
    ("run", dict(staging_bytes=64 << 20), "run.staging_bytes"),
    ("run", dict(prediction_rows=(5000,)), "run.prediction_rows"),
    ("run", dict(seed=1 << 40), "run.seed"),
    ("run", dict(update_pieces=1025), "run.update_pieces"),
    ("run", dict(prediction_rows=(-1,) * 1025), "run.prediction_rows"),
    ("run", dict(arena_limit=(1 << 48) + 1), "run.arena_limit"),
    ("run", dict(staging_bytes=1 << 49, copy_piece_bytes=1 << 40, transfer_pieces=1 << 10), "run.staging_bytes"),
    ("run", dict(copy_piece_bytes=1 << 49), "run.copy_piece_bytes"),
])
def test_learner_and_run_rules(section, change, field_name):
    with pytest.raises(ConfigError) as info:
        validate(replace(DEFAULT, **{section: replace(getattr(DEFAULT, section), **change)}))
    assert info.value.field_name == field_name


def test_counts_that_grow_the_plan_are_bounded(tmp_path, capsys):
    """The bounds are taken; past them a configuration is refused on one
    line before any planning (2^31 layers would exhaust the memory while
    the parameter entries are listed)."""
    at_bounds = replace(DEFAULT, run=replace(DEFAULT.run, update_pieces=1024, prediction_rows=(-1,) * 1024,
                                             staging_bytes=1 << 30, copy_piece_bytes=1 << 28))
    assert validate(at_bounds) is at_bounds
    bad = tmp_path / "deep.json"
    bad.write_text(json.dumps({"shape": {"layers": 1 << 31}}))
    assert main(["plan", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"planner plan: shape.layers = {1 << 31}: must be at most 1024\n"


def test_arena_limit_is_checked_by_the_layout():
    from planner.schedule import build_plan
    with pytest.raises(ConfigError) as info:
        build_plan(replace(DEFAULT, run=replace(DEFAULT.run, arena_limit=1 << 30)))
    assert info.value.field_name == "run.arena_limit"


def test_round_trip_through_dict():
    data = json.loads(json.dumps(to_dict(DEFAULT)))
    assert from_dict(data) == DEFAULT
    assert from_dict({"learner": {"beta2": "0.999", "epsilon": [1, 10**6]}}).learner.beta2 == Fraction(999, 1000)


@pytest.mark.parametrize("data, field_name", [
    ({"shape": {"width": "512"}}, "shape.width"),
    ({"shape": {"depth": 3}}, "shape.depth"),
    ({"optimizer": {}}, "optimizer"),
    ({"learner": {"beta1": "nine tenths"}}, "learner.beta1"),
    ({"learner": {"beta1": True}}, "learner.beta1"),
    ([], "configuration"),
])
def test_bad_dicts(data, field_name):
    with pytest.raises(ConfigError) as info:
        from_dict(data)
    assert info.value.field_name == field_name


def test_cli_reports_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"shape": {"heads": 7}}))
    assert main(["plan", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shape.heads = 7" in err and "Traceback" not in err
    (tmp_path / "broken.json").write_text("{")
    assert main(["plan", "--config", str(tmp_path / "broken.json")]) == 2
    assert main(["plan", "--config", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "binary.json").write_bytes(bytes(range(128, 256)))
    assert main(["plan", "--config", str(tmp_path / "binary.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and f"'{tmp_path / 'binary.json'}': is not UTF-8 text" in err
    assert err.count("\n") == 3 and "Traceback" not in err
