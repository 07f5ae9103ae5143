"""`planner bench`'s arguments: each bad one refused before the GPU is asked
for (and minutes of timing spent), with exit status 2, nothing written."""

from __future__ import annotations

import json
import sys

import pytest

from planner.bench import batches_argument
from planner.cli import main


def test_batches_are_positive_integers():
    assert batches_argument("1,8") == (1, 8)
    assert batches_argument("3") == (3,)


@pytest.mark.parametrize("args, named", [
    (["--batches", "x"], "argument --batches: 'x' is not a comma-separated list of positive integers"),
    (["--batches", "1,"], "argument --batches: '1,' is not"),
    (["--batches", "0,8"], "argument --batches: '0,8' is not"),
    (["--anchors", "eager,fast"], "argument --anchors: 'fast' is not a setup the bench times"),
])
def test_a_bad_argument_is_named(capsys, args, named):
    with pytest.raises(SystemExit) as exit:
        main(["bench", *args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert named in err.splitlines()[-1] and "Traceback" not in err


def test_a_json_file_nowhere_is_refused_first(tmp_path, capsys):
    target = tmp_path / "missing" / "bench.json"
    assert main(["bench", "--batches", "1", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"planner bench: --json {target}: its directory does not exist\n"
    assert not target.parent.exists()


def test_without_pytorch_the_bench_is_refused_first(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    assert main(["bench", "--batches", "1"]) == 2
    assert capsys.readouterr().err == "planner bench: needs PyTorch (pip install torch)\n"


def test_a_bad_configuration_is_refused_first(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text('{"shape": {"seq": 1000}}')
    assert main(["bench", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planner bench: shape.seq = 1000: must be a multiple of 64") and err.count("\n") == 1



def test_a_plan_whose_losses_are_not_finite_is_not_timed(tmp_path, monkeypatch, capsys):
    # an update on NaNs runs faster than on finite numbers: its time would
    # flatter the plan, so the bench refuses it and writes nothing
    import numpy as np

    import planner.certify
    import planner.runtime.cuda
    from planner import bench
    monkeypatch.setattr(planner.runtime.cuda, "open_gpu", lambda: object())
    monkeypatch.setattr(planner.certify, "demand_certificate", lambda plan: None)
    monkeypatch.setattr(bench, "measure_ceilings", lambda half: pytest.fail("timed on past the refusal"))
    monkeypatch.setattr(bench, "plan_step_ms", lambda plan, gpu, certificate: bench.StepTiming(
        2.1, 2.0, [9.5, 9.4, float("nan"), float("nan")], np.zeros(1), 0, {}))
    target = tmp_path / "bench.json"
    assert main(["bench", "--batches", "1", "--json", str(target)]) == 1
    assert capsys.readouterr().err == ("planner bench: refused: the plan's loss of update 3 (of the 4 run) is nan, "
                                       "not a finite number: an update on NaNs runs faster, so it is not timed\n")
    assert list(tmp_path.iterdir()) == []
    bench.require_finite([9.5, 9.4])  # finite losses pass
    with pytest.raises(bench.NotFinite, match=r"update 1 \(of the 1 run\) is inf"):
        bench.require_finite([float("inf")])


def _fixed_figures(monkeypatch) -> tuple[dict, dict, object]:
    """The GPU's parts of the bench replaced by fixed figures: what is left
    is the bench's own work, its printing and the JSON from the rows it
    gathers. Gives the plan and update last timed, the products and the
    device's ceilings."""
    import numpy as np

    import planner.certify
    import planner.runtime.cuda
    from planner import bench
    from planner.schedule.urgency import Ceilings
    monkeypatch.setattr(planner.runtime.cuda, "open_gpu", lambda: object())
    monkeypatch.setattr(planner.certify, "demand_certificate", lambda plan: None)
    ceilings = Ceilings(bandwidth=1e12, matrix_rate=1e14)
    monkeypatch.setattr(bench, "measure_ceilings", lambda half: ceilings)
    timed = {}

    def step(plan, gpu, certificate):  # a microsecond a launch of the update
        update = plan.notes["submissions"]["update"][0]
        timed["plan"], timed["update"] = plan, update
        return bench.StepTiming(2.1, 2.0, [9.5, 9.4, 9.3, 9.2], np.zeros(1), update,
                                {i: 1.0 for i in plan.submissions[update].launches()})
    monkeypatch.setattr(bench, "plan_step_ms", step)
    product = {"tile": 57, "us": 10.0, "torch_us": 7.0, "ratio": 0.7, "same_us": 7.0, "same_ratio": 0.7,
               "floor_us": 5.0, "reach": 1.4}
    # its own bytes take longer than the anchor's whole product: no tile reaches the bar
    heavy = {"tile": 59, "us": 20.0, "torch_us": 9.0, "ratio": 0.45, "same_us": 24.0, "same_ratio": 1.2,
             "floor_us": 14.0, "reach": 9.0 / 14.0}
    products = {"tiled-x": product, "tiled-y": heavy}
    monkeypatch.setattr(bench, "products_vs_matmul", lambda plan, kernels: products)
    monkeypatch.setattr(bench, "attention_vs_sdpa", lambda config, gpu: {
        "attention_us": 20.0, "sdpa_us": 60.0, "output_difference": 1e-4})
    anchors = {"eager": 40.0, "compile+graph": 4.0}
    monkeypatch.setattr(bench, "torch_step_ms", lambda config, parameters, setup: anchors[setup])
    return timed, products, ceilings


def test_the_measurements_are_written_whole(tmp_path, monkeypatch, capsys):
    from planner import bench
    from planner.schedule.urgency import floor_us
    timed, products, ceilings = _fixed_figures(monkeypatch)
    target = tmp_path / "bench.json"
    assert main(["bench", "--batches", "1", "--anchors", "eager,compile+graph", "--json", str(target)]) == 0
    rows = json.loads(target.read_text())
    assert [(r["batch"], r["plan_events_ms"], r["torch_eager_ms"], r["torch_compile+graph_ms"]) for r in rows] == [
        (1, 2.0, 40.0, 4.0)]
    assert rows[0]["plan_losses"] == [9.5, 9.4, 9.3] and rows[0]["products"] == products
    # the floors are over the ceilings measured on the device
    plan, update = timed["plan"], timed["update"]
    launches = list(plan.submissions[update].launches())
    floors = {i: floor_us(plan, i, ceilings) for i in launches}
    assert rows[0]["ceilings"] == {"bandwidth": 1e12, "matrix_rate": 1e14}
    assert sum(k["floor_us"] for k in rows[0]["kernels"].values()) == pytest.approx(sum(floors.values()))
    assert rows[0]["chain_ms"] == bench.longest_chain_us(plan, update, dict.fromkeys(launches, 1.0)) / 1e3
    assert rows[0]["floor_chain_ms"] == bench.longest_chain_us(plan, update, floors) / 1e3
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    out = capsys.readouterr().out
    assert "1 of 2 at 0.7x of torch.matmul or more; 1 as fast as cuBLAS" in out and "4.00 ( 0.50x)" in out
    assert "floor    14.0 us (0.64x)" in out and "at its floor over these ceilings, still under 0.7x: tiled-y" in out
    assert "ceilings, measured here: copies 1.00 TB/s (bytes read and written), products 100 TFLOP/s" in out
    assert (f"{len(launches)} launches, kernels {len(launches) / 1e3:.2f} ms against floors of "
            f"{sum(floors.values()) / 1e3:.2f} ms") in out
    # the same launches and floors by kind: the products, the attention walks and the rest
    kinds = {}
    for i in launches:
        name = plan.launches[i].image
        k = "products" if plan.image[name].family.startswith("tiled") else (
            "attention" if plan.image[name].family.startswith("attention") else "memory")
        us, floor = kinds.get(k, (0.0, 0.0))
        kinds[k] = (us + 1.0, floor + floors[i])
    assert sorted(kinds) == ["attention", "memory", "products"]
    assert "; ".join(f"{k} {us / 1e3:.2f} ms against {floor / 1e3:.2f}" for k, (us, floor) in sorted(kinds.items())) in out


class _Cut(Exception):
    """A run stopped where it stood (a time limit)."""


def test_a_run_cut_short_has_printed_what_it_measured(tmp_path, monkeypatch, capsys):
    # the second row's anchors never come back: the first row's step beside
    # its anchors is in the log already, its launches and products before
    # them, and no JSON is written
    from planner import bench
    _fixed_figures(monkeypatch)
    fixed = bench.torch_step_ms

    def anchor(config, parameters, setup):
        if config.shape.batch == 2:
            raise _Cut
        return fixed(config, parameters, setup)
    monkeypatch.setattr(bench, "torch_step_ms", anchor)
    target = tmp_path / "bench.json"
    with pytest.raises(_Cut):
        main(["bench", "--batches", "1,2", "--anchors", "eager,compile+graph", "--json", str(target)])
    out = capsys.readouterr().out
    first = ("1024 tokens/step: step 2.000 ms by events (2.100 by the host's clock) against eager 40.000 ms "
             "(0.050x); compile+graph 4.000 ms (0.500x); a layer's attention 20.0 us against SDPA's 60.0 (3.00x)")
    assert first in out.splitlines()
    assert out.index("1024 tokens/step: products alone") < out.index(first) < out.index("2048 tokens/step")
    # the second row's launches and products were printed before it was cut; its step was never timed
    assert "2048 tokens/step: products alone" in out and "2048 tokens/step: step" not in out
    assert list(tmp_path.iterdir()) == []


def test_a_products_row_is_a_launchs_mean_beside_the_anchors():
    from planner.bench import product_row
    # 16 launches of 10 us with floors of 4 us; torch.matmul 7 us, cuBLAS making the same C 12 us
    row = product_row(57, {"launches": 16, "us": 160.0, "floor_us": 64.0}, 7.0, 12.0)
    assert row == pytest.approx({"tile": 57, "us": 10.0, "torch_us": 7.0, "ratio": 0.7, "same_us": 12.0,
                                 "same_ratio": 1.2, "floor_us": 4.0, "reach": 1.75})


def test_the_longest_chain_follows_the_dependencies(default_plan):
    from planner import bench
    from planner.schedule.urgency import H200_CEILINGS, depth, floor_us, slack

    plan = default_plan
    update = plan.notes["submissions"]["update"][0]
    launches = list(plan.submissions[update].launches())
    ones = {index: 1.0 for index in launches}
    chain = bench.longest_chain_us(plan, update, ones)
    # a microsecond a launch: the most launches one waits for after another
    assert chain == depth(plan.submissions[update]) and 1 < chain < len(launches)
    # a launch on the chain lengthens it by what it takes longer; one with slack only by what it takes beyond that
    _, spare = slack(plan.submissions[update].waits(), ones)
    on = next(i for i in launches if spare[i] == 0)
    off = next(i for i in launches if spare[i] >= 2)
    assert bench.longest_chain_us(plan, update, ones | {on: 11.0}) == chain + 10
    assert bench.longest_chain_us(plan, update, ones | {off: 1 + spare[off]}) == chain
    assert bench.longest_chain_us(plan, update, ones | {off: 4 + spare[off]}) == chain + 3
    floors = {i: floor_us(plan, i, H200_CEILINGS) for i in launches}
    sums = bench.by_image(plan, ones, floors)
    assert sum(n for n, _, _ in sums.values()) == len(launches)
    assert all(total == n for n, total, _ in sums.values())
    assert sum(f for _, _, f in sums.values()) == pytest.approx(sum(floors.values()))


def test_a_floor_is_over_the_ceiling_its_launch_meets(default_plan):
    """A launch's floor is its bytes over the bandwidth, or a product's
    operations over the matrix rate, whichever takes longer: with either
    ceiling out of reach, the floor is the other's alone, and it doubles
    where that ceiling halves."""
    from math import inf

    from planner.schedule.urgency import H200_CEILINGS, Ceilings, floor_us

    plan, (bandwidth, rate) = default_plan, (H200_CEILINGS.bandwidth, H200_CEILINGS.matrix_rate)
    for i, launch in enumerate(plan.launches):
        copies, products = floor_us(plan, i, Ceilings(bandwidth, inf)), floor_us(plan, i, Ceilings(inf, rate))
        family = plan.image[launch.image].family
        assert copies > 0 and (products > 0) == family.startswith(("tiled", "attention"))
        assert floor_us(plan, i, Ceilings(bandwidth / 2, inf)) == pytest.approx(2 * copies)
        assert floor_us(plan, i, Ceilings(inf, rate / 2)) == pytest.approx(2 * products)
        assert floor_us(plan, i, H200_CEILINGS) == max(copies, products)


def test_a_floor_counts_the_bytes_a_launch_must_move(default_plan):
    """A gather's floor counts the rows it reads, not the table its manifest
    lets it read them from (the certificate's extent); an element-wise
    launch's, its whole extents; no floor counts more than the extents."""
    from math import inf

    from planner.schedule.urgency import Ceilings, floor_us

    plan, copies = default_plan, Ceilings(1e6, inf)   # a byte a microsecond
    rows, width = plan.config["shape"]["seq"], plan.config["shape"]["width"]
    gathered = {"loss-target-gather": 2 * rows * 4 + rows * 2,                            # correct, targets, logits
                "gather": 2 * rows * width * 4 + rows * 4,                                # out, table rows, ids
                "embedding-scatter": 2 * rows * width * 4 + rows * width * 4 + rows * 4}  # rows read and written
    seen = set()
    for i, launch in enumerate(plan.launches):
        family = plan.image[launch.image].family
        claimed = sum((a.stop - a.start) * (2 if a.reads and a.writes else 1) for a in launch.accesses)
        assert floor_us(plan, i, copies) <= claimed
        if family in gathered:
            assert floor_us(plan, i, copies) == gathered[family] < claimed
            seen.add(family)
        elif family in ("copy", "add", "layernorm-forward", "adamw"):
            assert floor_us(plan, i, copies) == claimed
    assert seen == set(gathered)


def test_an_attention_walks_floor_counts_its_products(default_plan):
    """A walk's operations are its products of 64 x 64 x 64 over the query
    and key tiles up to the diagonal: two a step forward, three in the
    query walk, four in the key walk, seven in the one-launch backward."""
    plan = default_plan
    shape = plan.config["shape"]
    tiles = shape["seq"] // 64
    steps = shape["batch"] * shape["heads"] * tiles * (tiles + 1) // 2
    products = {"attention-forward": 2, "attention-query": 3, "attention-key": 4, "attention-backward": 7}
    seen = set()
    for img in plan.image.values():
        if img.family.startswith("attention"):
            assert img.operations == products[img.family] * steps * 2 * 64 ** 3
            seen.add(img.family)
        elif img.family.startswith("tiled"):
            c = img.constant_map
            assert img.operations == 2 * c["m"] * c["n"] * c["k"]
        else:
            assert img.operations == 0
    assert "attention-forward" in seen and seen & {"attention-backward", "attention-key"}
