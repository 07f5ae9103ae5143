"""The tile sweep's choices from measured times (its --measured mode, no GPU): a
sweep of some shapes keeps the table's other rows, a half C is held to its own
error bound, a recorded tile stays unless another is clearly faster alone or
inside the update (a tie inside it decided alone), an unknown shape is
refused; the update `--step` times has the tile it is given for the shape, and
the others' recorded tiles."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
tile_sweep = pytest.importorskip("tile_sweep")

KEY = "rr-m1024-n1536-k512-rope"  # its C in the half format (by head)
TABLE = Path(__file__).resolve().parents[1] / "kernels" / "tiles.json"
DEVICE, SHARED_LIMIT = "NVIDIA H200", 232448  # the card an earlier run measured on, and its block's limit


def _measured(tmp_path: Path, tiles: dict[str, dict] | None, device: str = DEVICE,
              shared_limit: int = SHARED_LIMIT) -> Path:
    """An earlier run's tile-sweep.json (--measured): KEY's tiles' times, or
    (tiles None) no shape at all."""
    measured = tmp_path / "tile-sweep.json"
    shapes = {} if tiles is None else {KEY: {"torch_us": 4.6, "same_us": 4.7, "tiles": tiles}}
    measured.write_text(json.dumps({"device": device, "shared_limit": shared_limit, "shapes": shapes}))
    return measured


def _sweep(monkeypatch, tmp_path: Path, tiles: dict[str, dict], keys: str = KEY,
           step_ms: dict[str, float] | None = None, device: str = DEVICE,
           shared_limit: int = SHARED_LIMIT, status: int = 0) -> dict:
    measured = _measured(tmp_path, tiles, device, shared_limit)
    table = tmp_path / "tiles.json"
    recorded = json.loads(TABLE.read_text())
    if step_ms:
        recorded["choices"][KEY]["step_ms"] = step_ms
    table.write_text(json.dumps(recorded))
    monkeypatch.setattr(sys, "argv", ["tile_sweep.py", str(tmp_path / "out"), "--batches", "1", "--measured",
                                      str(measured), "--write", str(table), "--keys", keys])
    before = table.read_text()
    assert tile_sweep.main() == status
    if status:  # refused: the table as it was
        assert table.read_text() == before
        return {}
    return json.loads(table.read_text())["choices"]


def _refusal(capsys) -> str:
    """The one line a refused sweep printed (stderr), nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("tile_sweep: ")
    return err


def test_a_sweep_of_some_shapes_keeps_the_other_rows(monkeypatch, tmp_path):
    before = json.loads(TABLE.read_text())["choices"]
    # tile 0 fastest, its error within a half C's bound but not a binary32 one's
    choices = _sweep(monkeypatch, tmp_path, {"0": {"us": 4.0, "error": 5e-4}, "40": {"us": 5.1, "error": 2e-4}},
                     device="NVIDIA H100 80GB HBM3")
    assert choices[KEY] == {"tile": 0, "us": 4.0, "cublas_us": 4.6, "cublas_same_us": 4.7,
                            "device": "NVIDIA H100 80GB HBM3"}
    # the others keep their rows, each with the device it was measured on
    assert {k: v for k, v in choices.items() if k != KEY} == {k: v for k, v in before.items() if k != KEY}
    assert all(row["device"] for row in choices.values())


def test_a_sweep_of_some_shapes_on_a_device_of_another_shared_limit_is_refused(monkeypatch, tmp_path, capsys):
    """The table's tiles fit one limit a block: a shape measured under
    another would take tiles the others' limit refuses, or the reverse."""
    _sweep(monkeypatch, tmp_path, {"40": {"us": 5.1, "error": 2e-4}}, shared_limit=101376, status=2)
    assert "sweep every shape" in _refusal(capsys)


def test_a_tile_past_the_half_bound_is_never_chosen(monkeypatch, tmp_path):
    choices = _sweep(monkeypatch, tmp_path, {"0": {"us": 4.0, "error": 2e-3}, "40": {"us": 5.1, "error": 2e-4}})
    assert choices[KEY]["tile"] == 40


def test_a_recorded_tile_stays_unless_another_beats_it_by_the_margin(monkeypatch, tmp_path):
    recorded = json.loads(TABLE.read_text())["choices"][KEY]["tile"]
    other = "40" if recorded != 40 else "38"
    near = 5.0 / tile_sweep.MARGIN * 1.01   # the recorded tile within the margin of the fastest
    choices = _sweep(monkeypatch, tmp_path, {str(recorded): {"us": 5.0, "error": 2e-4},
                                             other: {"us": near, "error": 2e-4}})
    assert choices[KEY]["tile"] == recorded
    far = 5.0 / tile_sweep.MARGIN * 0.99
    choices = _sweep(monkeypatch, tmp_path, {str(recorded): {"us": 5.0, "error": 2e-4},
                                             other: {"us": far, "error": 2e-4}})
    assert choices[KEY]["tile"] == int(other)


def test_the_fastest_update_chooses_among_the_tiles_that_fit(monkeypatch, tmp_path):
    tiles = {"0": {"us": 4.0, "error": 2e-3}, "40": {"us": 5.1, "error": 2e-4}, "38": {"us": 4.5, "error": 2e-4}}
    # tile 0 the fastest update but past the half bound; 40's update faster than 38's, though slower alone
    choices = _sweep(monkeypatch, tmp_path, tiles, step_ms={"0": 2.0, "40": 2.1, "38": 2.2})
    assert choices[KEY]["tile"] == 40 and choices[KEY]["step_ms"] == {"0": 2.0, "40": 2.1, "38": 2.2}


def test_a_tie_inside_the_update_is_decided_alone(monkeypatch, tmp_path):
    """Tiles whose updates lie within the step margin of the fastest are a
    tie: of them the recorded tile stays unless another beats it alone by
    the margin; past the step margin the fastest update wins, however slow
    alone."""
    recorded = json.loads(TABLE.read_text())["choices"][KEY]["tile"]
    other = "40" if recorded != 40 else "38"
    near = 2.1 / tile_sweep.STEP_MARGIN * 1.001   # the other faster inside the update, within the margin
    far = 2.1 / tile_sweep.STEP_MARGIN * 0.999
    close = {str(recorded): {"us": 5.0, "error": 2e-4}, other: {"us": 5.0 / tile_sweep.MARGIN * 1.01, "error": 2e-4}}
    choices = _sweep(monkeypatch, tmp_path, close, step_ms={str(recorded): 2.1, other: near})
    assert choices[KEY]["tile"] == recorded
    faster_alone = {str(recorded): {"us": 5.0, "error": 2e-4}, other: {"us": 4.0, "error": 2e-4}}
    choices = _sweep(monkeypatch, tmp_path, faster_alone, step_ms={str(recorded): 2.1, other: near})
    assert choices[KEY]["tile"] == int(other)
    # the recorded tile's update the faster, within the margin: the tie still goes to the faster alone
    choices = _sweep(monkeypatch, tmp_path, faster_alone, step_ms={str(recorded): near, other: 2.1})
    assert choices[KEY]["tile"] == int(other)
    slower_alone = {str(recorded): {"us": 4.0, "error": 2e-4}, other: {"us": 5.0, "error": 2e-4}}
    choices = _sweep(monkeypatch, tmp_path, slower_alone, step_ms={str(recorded): 2.1, other: far})
    assert choices[KEY]["tile"] == int(other)


def test_an_unknown_shape_is_refused(monkeypatch, tmp_path, capsys):
    _sweep(monkeypatch, tmp_path, {"40": {"us": 5.1, "error": 2e-4}}, keys="rr-m1-n1-k1", status=2)
    assert "no product of the plans is rr-m1-n1-k1" in _refusal(capsys)


@pytest.mark.parametrize("arguments, message", [
    (["--tiles", "40", "--write", "{tmp}/tiles.json"], "cannot choose the table's tiles"),
    (["--keys", KEY, "--step", "rr-m1024-n2816-k512-gated=57,59"],
     "--step rr-m1024-n2816-k512-gated: not among the shapes swept"),
    (["--tiles", "40,x"], "--tiles takes tile numbers joined by commas, not '40,x'"),
    (["--tiles", "4000"], "--tiles: no tile 4000"),
    (["--keys", KEY, "--step", f"{KEY}=40,"], f"--step {KEY} takes tile numbers"),
    (["--keys", KEY, "--step", KEY], f"--step {KEY} takes tile numbers"),
    (["--rounds", "0"], "--rounds 0: at least one round"),
    (["--measured", "{tmp}/missing.json"], "--measured {tmp}/missing.json: "),
    (["--write", "{tmp}/no/tiles.json"], "--write {tmp}/no/tiles.json: its directory does not exist"),
])
def test_bad_arguments_are_refused_before_any_work(monkeypatch, tmp_path, capsys, arguments, message):
    """One line naming what is wrong, status 2, before anything is compiled
    or the GPU asked for, and nothing written."""
    monkeypatch.setattr(tile_sweep, "precompile", lambda *a: pytest.fail("compiled for refused arguments"))
    monkeypatch.setattr(tile_sweep, "open_gpu", lambda: pytest.fail("asked for the GPU for refused arguments"))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["tile_sweep.py", str(out), *(a.format(tmp=tmp_path) for a in arguments)])
    assert tile_sweep.main() == 2
    assert message.format(tmp=tmp_path) in _refusal(capsys)
    assert not out.exists()


def test_a_measured_run_without_the_shape_is_refused(monkeypatch, tmp_path, capsys):
    measured = _measured(tmp_path, None)
    monkeypatch.setattr(sys, "argv", ["tile_sweep.py", str(tmp_path / "out"), "--measured", str(measured),
                                      "--keys", KEY])
    assert tile_sweep.main() == 2
    assert f"no times for {KEY}" in _refusal(capsys)


def test_no_gpu_is_one_line(monkeypatch, tmp_path, capsys):
    """Where the sweep needs the GPU (here the update --step times, the
    tiles' times coming from an earlier run) and there is none."""
    from planner.runtime.cuda import NoDevice

    def no_gpu():
        raise NoDevice("no NVIDIA GPU to run on (no driver)")

    measured = _measured(tmp_path, {})
    monkeypatch.setattr(tile_sweep, "open_gpu", no_gpu)
    monkeypatch.setattr(sys, "argv", ["tile_sweep.py", str(tmp_path / "out"), "--measured", str(measured),
                                      "--keys", KEY, "--step", f"{KEY}=40,60"])
    assert tile_sweep.main() == 2
    assert _refusal(capsys) == "tile_sweep: no NVIDIA GPU to run on (no driver)\n"
    assert not (tmp_path / "out").exists()


def test_the_stepped_plan_takes_the_given_tile_for_the_shape_only():
    from planner.kernels.manifest import PRODUCT_FAMILIES, recorded_tiles, tile_of

    def tiles(plan) -> dict[str, int]:
        return {img.name: tile_of(img) for img in plan.images if img.family in PRODUCT_FAMILIES}

    key = "rr-m1024-n2816-k512-gated"
    assert tile_sweep.batch_of(key, [1, 8]) == 1
    given = 64 if recorded_tiles()[key] != 64 else 59
    base = tiles(tile_sweep.plan_with(key, recorded_tiles()[key], 1))
    stepped = tiles(tile_sweep.plan_with(key, given, 1))
    assert stepped["tiled-" + key] == given != base["tiled-" + key]
    assert {n: t for n, t in stepped.items() if n != "tiled-" + key} == {n: t for n, t in base.items()
                                                                        if n != "tiled-" + key}
    assert len(base) > 5
    with pytest.raises(SystemExit, match="no product of the plans is"):
        tile_sweep.batch_of(key, [8])


def test_a_tile_whose_image_does_not_wait_for_the_launch_before_is_not_admitted(monkeypatch, default_plan):
    """On sm_90, where a launch starts while the one before drains, an image
    that may touch memory or end before griddepcontrol.wait refuses the plan,
    so the sweep never chooses it; sm_86 has no such wait."""
    from dataclasses import replace
    from planner.runtime.nvrtc import compile_image
    img = next(i for i in default_plan.images if i.family == "tiled-add")
    real = tile_sweep.check_cubin

    def ends_first(cubin, arch):
        report = real(cubin, arch)
        kernel = replace(report.kernels[0], before_wait=(0x40, "@P0 EXIT"))
        return replace(report, kernels=(kernel,))

    for arch in ("sm_86", "sm_90"):
        assert tile_sweep.admitted(img, compile_image(img, arch), arch)
    monkeypatch.setattr(tile_sweep, "check_cubin", ends_first)
    assert tile_sweep.admitted(img, compile_image(img, "sm_86"), "sm_86")
    assert not tile_sweep.admitted(img, compile_image(img, "sm_90"), "sm_90")
