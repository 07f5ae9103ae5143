"""The plan derived from the configuration: held to the seed's structure."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from math import ceil

import pytest

from planner.kernels.manifest import attention_backward, layernorm_parts
from planner.model.config import DEFAULT, Shape
from planner.schedule import build_plan
from planner.schedule.arena import BANK_ALIGNMENT, PARAMETER_ALIGNMENT, entries, seed_layout
from planner.schedule.launches import MAXIMUM_ELEMENTS, forward_shares
from tests.conftest import SMALL, seed_text

# ---- the seed's own declarations, read from its text ----


def _tokens(text: str) -> list[str]:
    return re.findall(r"\(|\)|[\w\"/.-]+", text)


def _plane_list(tokens: list[str], i: int) -> tuple[list[str], int]:
    """Parse `cgNoPlanes` or `(cgAnd X rest)`; return names and next index."""
    if tokens[i] == "cgNoPlanes":
        return [], i + 1
    assert tokens[i] == "(" and tokens[i + 1] == "cgAnd", tokens[i:i + 3]
    head = tokens[i + 2]
    rest, j = _plane_list(tokens, i + 3)
    assert tokens[j] == ")"
    return [head] + rest, j + 1


@pytest.fixture(scope="module")
def seed():
    text = seed_text("001")
    residents = dict(re.findall(r'def (cgResident\w+) : \(family ArenaResident\) =\s*\(cgPlane\s+b"([\w-]+)"', text))
    phase_names = dict(re.findall(r'def (cgPhase\w+) : Bytes =\s*b"([\w/-]+)"', text))
    tokens = _tokens(text[text.index("def coppeliusDevicePhases"):text.index("def coppeliusDeviceHazardOf")])
    phases = {}
    for i, t in enumerate(tokens):
        if t == "DeviceArenaPhaseValue":
            fresh, j = _plane_list(tokens, i + 2)
            carried, _ = _plane_list(tokens, j)
            phases[phase_names[tokens[i + 1]]] = ([residents[x] for x in fresh], [residents[x] for x in carried])
    gtokens = _tokens(text[text.index("def coppeliusDeviceGlobals"):text.index("def coppeliusDevicePhases")])
    globals_, _ = _plane_list(gtokens, gtokens.index("cgAnd") - 1)
    # `def cgA : Nat = cgB`: the seed's reuse of one item for another plane
    aliases = dict(re.findall(r"def (cg\w+) : Nat =\s*\n?(cg\w+)\n", text))
    addresses = dict(re.findall(r'def (cgResident\w+) : \(family ArenaResident\) =\s*\(cgPlane\s+b"[\w-]+"\s+(cg\w+)',
                                text))
    return {"phases": phases, "globals": [residents[g] for g in globals_], "aliases": aliases,
            "addresses": {residents[k]: v for k, v in addresses.items()}}


# Where our phases depart from the seed's: the attention backward's launches
# make the qkv gradient, turning the queries' and keys' back by the rotary
# angles as they store them, so the attention head phase reads the rotary
# tables and the qkv phase carries the qkv gradient; the seed's gradients by
# head, which a launch of the qkv phase turned back, are not made.
DEPARTURES = {
    "coppelius/attention-head": (["row-terms", "qkv-gradient-t", "rotary-cosine", "rotary-sine"],
                                 ["context-gradient-heads", "values-heads", "queries-t", "keys-t",
                                  "context-gradient-t"]),
    "coppelius/qkv": (["qkv-gradient-half", "qkv-input-t", "qkv-weight-t", "norm1-gradient", "norm1-input-gradient"],
                      ["qkv-gradient-t"]),
}

# the seed's planes the plan no longer declares: the binary32 merged (context)
# gradient, which the context gradient's product stores by head instead
# (kernels/tiled.cu, BY_HEAD)
NOT_MADE = ("merged-gradient",)


def test_phases_are_the_seeds(default_plan, seed):
    ours = {p.name: (list(p.fresh), list(p.carried)) for p in default_plan.phases}
    kept = lambda planes: [p for p in planes if p not in NOT_MADE]
    seeds = {name: (kept(fresh), kept(carried)) for name, (fresh, carried) in seed["phases"].items()}
    assert ours == seeds | DEPARTURES
    assert all(any(name in fresh + carried for fresh, carried in seed["phases"].values()) for name in NOT_MADE)
    assert not set(NOT_MADE) & set(default_plan.plane)
    assert list(default_plan.globals) == seed["globals"]


def test_planes_reusing_an_item_share_its_address(default_plan, seed):
    """Where the seed defines one plane's address as another's (cgScratch =
    cgScores, cgGatedGradient = cgQkv, ...), the planes start together."""
    def root(symbol: str) -> str:
        while symbol in seed["aliases"]:
            symbol = seed["aliases"][symbol]
        return symbol

    by_root: dict[str, set[int]] = {}
    for name, symbol in seed["addresses"].items():
        if name in default_plan.plane and default_plan.plane[name].window == "arena":
            by_root.setdefault(root(symbol), set()).add(default_plan.plane[name].offset)
    shared = {r: offs for r, offs in by_root.items() if len(offs) > 1}
    assert not shared, f"planes the seed places together start apart: {shared}"
    # and the reuse is real: several planes share an address, as many as the
    # seed places on one item (of those the plan declares: NOT_MADE aside)
    on_one_item = Counter(root(symbol) for name, symbol in seed["addresses"].items()
                          if name in default_plan.plane and default_plan.plane[name].window == "arena")
    most = Counter(p.offset for p in default_plan.planes if p.window == "arena").most_common(1)[0][1]
    assert most >= max(on_one_item.values()) >= 4


# ---- counts ----

def test_parameter_count(default_plan):
    assert default_plan.parameter_count() == 57_705_472


def test_alignments(default_plan):
    lay = seed_layout(DEFAULT)
    assert all(e.offset % PARAMETER_ALIGNMENT == 0 for e in lay.entries)
    for bank in ("parameters", "gradients", "first-moments", "second-moments", "half-copies", "boundaries",
                 "saved-activations"):
        assert default_plan.plane[bank].offset % BANK_ALIGNMENT == 0
    for p in default_plan.planes:
        assert p.offset % p.alignment == 0 and p.alignment in (0x100, 0x1000), p
    assert lay.boundary_stride % BANK_ALIGNMENT == 0
    assert all(off % BANK_ALIGNMENT == 0 for off in lay.saved_offsets.values())
    assert lay.saved_layer_bytes % BANK_ALIGNMENT == 0


def _pieces(total: int, chunk: int, bank: int, piece: int) -> list[int]:
    """Copy launches per chunk: each chunk cut at bank ends, then in pieces."""
    out = []
    for start in range(0, total, chunk):
        end = min(start + chunk, total)
        cuts = sorted({start, end} | {b for b in range(0, total + 1, bank) if start < b < end})
        out.append(sum(ceil((b - a) / piece) for a, b in zip(cuts, cuts[1:])))
    return out


def backward_launches(s: Shape) -> int:
    """The attention backward's launches a layer: one where the key launch
    would have fewer blocks than two waves of the H200's 132
    multiprocessors, the query and the key launch elsewhere."""
    return 1 if s.batch * s.kv_heads * (s.seq // 64) < 2 * 132 else 2


def expected_counts(config) -> dict[str, int]:
    """Launch counts from the seed's structure, derived independently."""
    s, r = config.shape, config.run
    L, rows = s.layers, len(r.prediction_rows)
    lay = seed_layout(config)
    elements = lay.parameter_bytes // 4
    per_bank = ceil(elements / MAXIMUM_ELEMENTS)
    # gather; 7 a layer and share of the batch (the rotary turn and the gated activation in their products);
    # norm, logits, last row (not where the loss follows: the logits in the half format)
    forward = 1 + 7 * L * forward_shares(s.batch) + 3
    loss_forward = forward - 1
    # loss (its gradient, in the half format, in its cross-entropy's launch); the output's two products and
    # layer norm backward (sums, parameters); 15 a layer (the inverse rotary
    # turn in the attention backward's store, the context's gradient by head
    # with the row terms in its product), 14 where the attention backward is
    # one launch; ids' copy, scatter
    backward = 3 + 4 + (13 + backward_launches(s)) * L + 2
    transfer = _pieces(3 * lay.parameter_bytes, r.staging_bytes, lay.parameter_bytes, r.copy_piece_bytes)
    return {
        "initialize": 4 * per_bank + (4 * L + 2) + (1 + 5 * L),   # draws and zeros; gains and shifts; recast
        "recast": 1 + 5 * L, "rotary": s.head_width // 2, "prediction": forward + 2 * rows,
        "update": loss_forward + backward + 1, "final": forward + 3 + 2, "restore": 2,
        "default-save": sum(transfer), "load": sum(transfer), "save": sum(transfer),
        "loss-record": r.update_pieces, "chunks": len(transfer), "max-pieces": max(transfer),
        "evaluate": loss_forward + 3, "adamw": L + 2,
    }


def test_adamw_pieces_are_the_whole_bank_once(small_plan):
    """Each update's AdamW launches cover every byte of the parameter bank
    (pads included) exactly once, in bank order, as the seed's one launch."""
    lay = seed_layout(SMALL)
    first, count = small_plan.notes["stretches"]["adamw-0"]
    covered = []
    for launch in small_plan.launches[first:first + count]:
        for a in launch.accesses:
            base = lay.offsets[{"parameters": "parameters", "gradients": "gradients", "first_moments": "first-moments",
                                "second_moments": "second-moments", "halves": "half-copies"}[a.argument]]
            scale = 2 if a.argument == "halves" else 1
            covered.append((a.argument, (a.start - base) * scale, (a.stop - base) * scale))
    for argument in ("parameters", "gradients", "first_moments", "second_moments", "halves"):
        spans = sorted((lo, hi) for arg, lo, hi in covered if arg == argument)
        assert spans[0][0] == 0 and spans[-1][1] == lay.parameter_bytes
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_scalars_the_host_rewrites_never_move_a_launchs_bytes(default_plan):
    """The host rewrites some scalars every step (AdamW's step size and
    epsilon) in a certified parameter block, and in the instantiated graph:
    none of them may change what the launch touches or its grid."""
    rewritten = 0
    for l in default_plan.launches:
        img = default_plan.image[l.image]
        scalars = l.scalars()
        for name in img.per_step:
            for word in (0, 1, 0x3F800000, 0x7F800000, 0xFFFFFFFF):
                other = scalars | {name: word}
                assert img.extents(other) == img.extents(scalars) and img.grid(other) == img.grid(scalars)
            rewritten += 1
    assert rewritten >= 2 * 16


def _gradients_read_unwritten(plan, launches) -> list[str]:
    """The launches among `launches` (in issue order; AdamW's left out) that
    read a byte of the gradient bank no earlier one of them wrote."""
    bank = plan.plane["gradients"]
    written: list[tuple[int, int]] = []
    found = []
    for l in (plan.launches[i] for i in launches):
        if l.image.startswith("adamw"):
            continue
        mine = [a for a in l.accesses if a.window == bank.window and a.start < bank.stop and bank.offset < a.stop]
        for a in mine:
            cursor = a.start
            for start, stop in sorted(written):
                if start <= cursor < stop:
                    cursor = stop
            if a.reads and cursor < a.stop:
                found.append(f"{l.image}.{a.argument}")
        written += [(a.start, a.stop) for a in mine if a.writes]
    return found


def test_each_update_writes_every_gradient_before_reading_it(default_plan):
    """AdamW leaves the gradients as they are (the seed clears them): sound
    while no launch of an update reads a gradient it has not written. The
    launches that depend on one another clash, so the issue order is their
    order. Without the output's weight gradient product, the embedding's
    scatter reads the embedding gradient unwritten."""
    update = list(default_plan.submissions[default_plan.notes["submissions"]["update"][0]].launches())
    assert _gradients_read_unwritten(default_plan, update) == []
    first_writer = next(i for i in update if default_plan.launches[i].image.startswith("tiled-cc"))
    assert _gradients_read_unwritten(default_plan, [i for i in update if i != first_writer]) == [
        "embedding-scatter.gradient"]


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["default", "small"])
def test_launch_and_submission_counts(config):
    plan = build_plan(config)
    want = expected_counts(config)
    stretches = plan.notes["stretches"]
    for name in ("initialize", "recast", "rotary", "prediction", "update", "final", "restore", "default-save",
                 "load", "save", "loss-record", "evaluate"):
        assert stretches[name][1] == want[name], name
    pieces = config.run.update_pieces
    # AdamW: a launch for the embedding, each layer, the final gain and shift
    assert all(stretches[f"adamw-{k}"][1] == want["adamw"] for k in range(pieces))
    assert len(plan.launches) == sum(c for _, c in stretches.values())
    chunks = want["chunks"]
    assert want["max-pieces"] <= config.run.transfer_pieces
    # initialize; save and load per chunk; the prediction; each update; the
    # final; every save chunk; the report put back; the evaluation
    assert len(plan.submissions) == 1 + 2 * chunks + 1 + pieces + 1 + chunks + 1 + 1
    per_phase = Counter(l.phase for l in plan.launches)
    L = config.shape.layers
    # the gated GELU's backward, one product for the up and gate weights' gradients and one for the
    # data gradient through both, the layer norm's backward (two launches)
    assert per_phase["coppelius/ffn-gate"] == 5 * L
    # the qkv weight's and data gradients' products, the layer norm's backward (the qkv gradient
    # comes turned back from the attention backward's launches)
    assert per_phase["coppelius/qkv"] == 4 * L
    assert per_phase["coppelius/head-layout"] == L
    assert per_phase["coppelius/attention-head"] == backward_launches(config.shape) * L
    # the prediction's, the update's, the final's, the evaluation's, each in the batch's shares
    assert per_phase["coppelius/layer"] == 7 * L * forward_shares(config.shape.batch) * 4
    assert per_phase["coppelius/adamw"] == pieces * want["adamw"]


def test_run_sample_is_the_seeds_with_evaluations(default_plan):
    """The seed's: prefix; two steps; a checkpoint; two steps; final;
    checkpoint; restore. Ours inserts evaluations (the last submission) so
    that every transition around them appears, one straight after another
    among them (a validation loss over several batches), and keeps the
    seed's as a subsequence."""
    subs = [s.submission for s in default_plan.run if s.kind == "submit"]
    n = len(default_plan.submissions)
    chunks = (n - 5 - DEFAULT.run.update_pieces) // 3
    prefix = list(range(0, 2 * chunks + 2))
    updates = list(range(2 * chunks + 2, 2 * chunks + 2 + DEFAULT.run.update_pieces))
    final = updates[-1] + 1
    gather = list(range(final + 1, final + 1 + chunks))
    restore, evaluate = n - 2, n - 1
    seed = prefix + updates * 2 + gather + updates * 2 + [final] + gather + [restore]
    assert subs == (prefix + updates * 2 + gather + updates + [evaluate] + gather + updates + [evaluate] * 2
                    + updates + [evaluate, final] + gather + [restore])
    it = iter(subs)
    assert all(s in it for s in seed)
    # every submit waits on the one before it; the host waits before touching staging
    positions = [i for i, s in enumerate(default_plan.run) if s.kind == "submit"]
    for before, at in zip(positions, positions[1:]):
        assert default_plan.run[at].after == (before,)
    for i, s in enumerate(default_plan.run):
        if s.kind in ("read", "write"):
            last = max(p for p in positions if p < i)
            assert any(t.kind == "wait" and t.after == (last,) for t in default_plan.run[last:i])


# ---- other shapes ----

OTHER_SHAPES = [
    Shape(layers=2, width=256, heads=4, kv_heads=4, ffn=512, vocab=512, seq=256, batch=4),
    Shape(layers=2, width=256, heads=4, kv_heads=2, ffn=768, vocab=50304, seq=256, batch=4),
    Shape(layers=4, width=512, heads=8, kv_heads=8, ffn=1408, vocab=12288, seq=1024, batch=8),
]


@pytest.mark.parametrize("shape", OTHER_SHAPES, ids=["small", "gpt2-vocab-gqa", "batch8"])
def test_other_shapes_are_consistent(shape):
    """Consistent: the plan is well formed (every slot matches its image,
    every access is its manifest's), every access lies in its window, the
    counts follow the seed's structure, the parameter count is the shape's,
    and every pointer lies in a named plane."""
    config = replace(DEFAULT, shape=shape)
    plan = build_plan(config)
    from planner.schedule.plan import check_consistent
    check_consistent(plan)
    for l in plan.launches:
        for a in l.accesses:
            assert 0 <= a.start < a.stop <= plan.window[a.window].bytes, (l.index, a)
    s = shape
    per_layer = 2 * s.width + s.qkv_width * s.width + s.width * s.width + 2 * s.width + 3 * s.ffn * s.width
    assert plan.parameter_count() == s.vocab * s.width + s.layers * per_layer + 2 * s.width
    assert sum(e.elements for e in entries(config)) == plan.parameter_count()
    want = expected_counts(config)
    assert plan.notes["stretches"]["update"][1] == want["update"]
    planes = [p for p in plan.planes]
    for l in plan.launches:
        for a in l.accesses:
            assert any(p.window == a.window and p.offset <= a.start and a.stop <= p.stop for p in planes), \
                (l.index, l.image, a)


def test_a_layers_up_and_gate_gradients_are_one_product_each_way(default_plan):
    """The gated GELU's backward writes the up and gate gradients side by
    side in each row of one plane; the data gradient through both weights is
    one product over K = 2 ffn and the two weight gradients one product over
    M = 2 ffn, each reading (or writing) the up entry and the gate entry
    after it as one."""
    s, lay = DEFAULT.shape, seed_layout(DEFAULT)
    F, W, T = s.ffn, s.width, s.tokens
    gate_phase = [l for l in default_plan.launches if l.phase == "coppelius/ffn-gate"][:3]
    assert [l.image for l in gate_phase] == ["gated-gelu-backward", f"tiled-cc-m{2 * F}-n{W}-k{T}", f"tiled-rc-m{T}-n{W}-k{2 * F}-half"]
    pair = next(a for a in gate_phase[0].accesses if a.argument == "pair_gradient")
    assert pair.stop - pair.start == T * 2 * F * 2
    last = s.layers - 1   # the backward walks the layers down
    up, gate = lay.entry(f"layer{last}.up"), lay.entry(f"layer{last}.gate")
    weights = next(a for a in gate_phase[2].accesses if a.argument == "b")
    assert (weights.start, weights.stop) == (lay.half(up.name)[1], lay.half(gate.name)[1] + gate.bytes // 2)
    gradients = next(a for a in gate_phase[1].accesses if a.argument == "c")
    assert (gradients.start, gradients.stop) == (lay.bank("gradients", up.name)[1],
                                                 lay.bank("gradients", gate.name)[1] + gate.bytes)


def test_a_product_over_two_entries_needs_them_side_by_side():
    lay = seed_layout(DEFAULT)
    lay.adjacent("layer0.up", "layer0.gate")
    with pytest.raises(ValueError, match="not side by side"):
        lay.adjacent("layer0.up", "layer0.down")


def test_the_layer_norms_backward_leaves_its_sums_and_half_copy_apart(default_plan):
    """Each layer norm's backward writes its block sums into at most the
    first half of x-hat's plane and its gradient's half copy into the
    second half, and the next phase's two products read that copy, as the
    seed's cast-down left it in their own plane (the attention output's
    data gradient, by head, in the phase after)."""
    plane = default_plan.plane["normalized-input"]
    half = plane.offset + plane.bytes // 2
    launches = default_plan.launches
    norms = [l for l in launches if l.image.startswith("layernorm-backward")]
    assert norms
    for norm in norms:
        access = {a.argument: a for a in norm.accesses}
        assert plane.offset == access["partials"].start < access["partials"].stop <= half
        assert (access["dx_half"].start, access["dx_half"].stop) == (half, plane.offset + plane.bytes)
    for phases in (("coppelius/ffn-down",), ("coppelius/attention-output", "coppelius/head-layout")):
        readers = [l for l in launches if l.phase in phases and l.image.startswith("tiled")]
        assert len(readers) == 2 * DEFAULT.shape.layers
        for reader in readers:
            operand = next(a for a in reader.accesses if a.argument in ("a", "b") and a.start >= half)
            assert (operand.start, operand.stop) == (half, plane.offset + plane.bytes)
    assert not any(l.image == "cast-down" and l.phase in ("coppelius/ffn-down", "coppelius/attention-output")
                   for l in launches)


def test_the_logits_gradient_is_written_once_in_the_half_format(default_plan):
    """The cross-entropy backward rounds the logits' gradient itself, into
    the first half of the binary32 plane the seed gives it, and the output
    products read it there: no cast-down of it."""
    plane, launches = default_plan.plane["logits-gradient"], default_plan.launches
    s = DEFAULT.shape
    half = (plane.offset, plane.offset + s.tokens * s.vocab * 2)
    (backward,) = [l for l in launches if l.image.startswith("cross-entropy-backward")]
    assert {(a.start, a.stop) for a in backward.accesses if a.argument == "gradient"} == {half}
    readers = [l for l in launches if l.phase == "coppelius/output-gradient" and l.image.startswith("tiled")]
    assert len(readers) == 2
    for reader in readers:
        assert half in {(a.start, a.stop) for a in reader.accesses if a.argument in ("a", "b")}
    assert not any(l.image == "cast-down" and l.phase in ("coppelius/output", "coppelius/output-gradient")
                   for l in launches)


@pytest.mark.parametrize("config", [DEFAULT, replace(DEFAULT, shape=OTHER_SHAPES[1]),
                                    replace(DEFAULT, shape=OTHER_SHAPES[2])], ids=["default", "gqa", "batch8"])
def test_the_attention_backward_writes_the_qkv_gradients_rows(config):
    """Each layer's attention backward writes the transposed qkv gradient
    whole, each byte once: the query walks the query heads' rows, the key
    walks the key heads' and then the value heads' (two arguments' rows
    apart), in one launch or in the query and the key launch, each reading
    the rotary tables whole; the qkv phase's products read the plane, and
    no launch turns it back on its own."""
    plan, s = build_plan(config), config.shape
    plane = plan.plane["qkv-gradient-t"]
    rows = lambda heads: heads * s.head_width * s.tokens * 2
    queries, keys = plane.offset + rows(s.heads), plane.offset + rows(s.heads + s.kv_heads)
    want = {"d_q": (plane.offset, queries), "d_k": (queries, keys), "d_v": (keys, plane.stop)}
    backward = [l for l in plan.launches if l.phase == "coppelius/attention-head"]
    families = attention_backward(s.batch, s.seq, s.heads, s.kv_heads)
    assert len(backward) == len(families) * s.layers
    for l in backward:
        written = {a.argument: (a.start, a.stop) for a in l.accesses if a.writes}
        assert written == {k: v for k, v in want.items() if k in written}, (l.index, l.image)
        tables = {a.argument: (a.start, a.stop) for a in l.accesses if a.argument in ("cosine", "sine")}
        assert tables == {"cosine": (plan.plane["rotary-cosine"].offset, plan.plane["rotary-cosine"].stop),
                          "sine": (plan.plane["rotary-sine"].offset, plan.plane["rotary-sine"].stop)}
    writers = [sorted(a.argument for a in l.accesses if a.writes) for l in backward]
    walks = {"attention-backward": ["d_k", "d_q", "d_v"], "attention-query": ["d_q"], "attention-key": ["d_k", "d_v"]}
    assert writers == [walks[f] for f in families] * s.layers
    readers = [l for l in plan.launches if l.phase == "coppelius/qkv" and any(
        a.start < plane.stop and plane.offset < a.stop and not a.writes for a in l.accesses)]
    assert len(readers) == 2 * s.layers and all(l.image.startswith("tiled") for l in readers)


def test_products_read_only_in_the_half_format_write_it(default_plan):
    """Each layer's queries, keys and values (by head), up and gate
    projections (every forward; each three one product), gated activation's
    gradient and the two layer norms' dy (the backward; the final layer
    norm's too) are written in the half format, C's extent half a binary32
    one's; the up and gate projections' product writes the gated activation
    too (half as many halves); so are the logits where the loss follows
    (the update's and the evaluation's forward)."""
    s = DEFAULT.shape
    T, W = s.tokens, s.width
    halves = [l for l in default_plan.launches
              if l.image.endswith(("-half", "-gated")) and l.image.startswith("tiled")]
    rotary = [l for l in default_plan.launches if l.image.endswith("-rope")]
    # the update's forward and backward, and the other submissions' forwards
    per_forward = s.layers
    backward = {f"tiled-rc-m{T}-n{s.ffn}-k{W}-half", f"tiled-rc-m{T}-n{W}-k{2 * s.ffn}-half",
                f"tiled-cc-m{T}-n{W}-k{s.qkv_width}-half"}
    logits = f"tiled-rr-m{T}-n{s.vocab}-k{W}-half"
    assert {l.image for l in halves} == {f"tiled-rr-m{T}-n{2 * s.ffn}-k{W}-gated",
                                         f"tiled-rc-m{T}-n{W}-k{s.vocab}-half", logits} | backward
    assert {l.image for l in rotary} == {f"tiled-rr-m{s.tokens}-n{s.qkv_width}-k{s.width}-rope"}
    assert len(rotary) % per_forward == 0 and len(rotary) == sum(l.image.endswith("-gated") for l in halves)
    for l in rotary:
        written = [a.stop - a.start for a in l.accesses if a.writes]
        assert sorted(a.argument for a in l.accesses if a.writes) == ["keys", "queries", "values"]
        assert sum(written) == s.tokens * s.qkv_width * 2
    assert sum(l.image in backward for l in halves) == 3 * s.layers
    assert sum(l.image == f"tiled-rc-m{T}-n{W}-k{s.vocab}-half" for l in halves) == 1
    assert sum(l.image == logits for l in halves) == 2
    assert (len(halves) - 3 * s.layers - 3) % per_forward == 0
    for l in halves:
        (c,) = [a for a in l.accesses if a.argument == "c"]
        m, n = (int(part[1:]) for part in l.image.split("-")[2:4])
        assert c.stop - c.start == m * n * 2
        gated = [a for a in l.accesses if a.argument == "gated"]
        assert [a.stop - a.start for a in gated] == ([m * n] if l.image.endswith("-gated") else [])


def test_the_context_gradient_is_stored_by_head_with_its_row_terms(default_plan):
    """Each layer's attention output data gradient is one product, the only
    launch of head-layout: it writes the context's gradient by head in the
    half format and the row terms, which the attention backward's launch
    after it reads as written, from the forward's output it reads; no
    binary32 context gradient is written."""
    s, launches = DEFAULT.shape, default_plan.launches
    heads = [l for l in launches if l.phase == "coppelius/head-layout"]
    assert len(heads) == s.layers
    assert {l.image for l in heads} == {f"tiled-rc-m{s.tokens}-n{s.width}-k{s.width}-heads"}
    for l in heads:
        access = {a.argument: (a.start, a.stop) for a in l.accesses}
        assert sorted(a.argument for a in l.accesses if a.writes) == ["heads", "row_terms"]
        assert access["heads"][1] - access["heads"][0] == s.tokens * s.width * 2
        assert access["row_terms"][1] - access["row_terms"][0] == s.tokens * s.heads * 4
        assert access["out"][1] - access["out"][0] == s.tokens * s.width * 2
        after = [a for a in launches[l.index + 1:l.index + 3] if a.phase == "coppelius/attention-head"]
        assert [a.image.split("-parts")[0] for a in after] == ["attention-backward"]
        for a in after:
            read = {x.argument: (x.start, x.stop) for x in a.accesses}
            assert (read["d_out"], read["row_terms"]) == (access["heads"], access["row_terms"])


def test_the_attention_backward_is_one_launch_where_the_key_launch_would_be_short():
    """One launch whose blocks take both walks where the key launch would
    have fewer blocks than two waves of the device (1 x 1024: 128 blocks;
    2 x 1024: 256); the query and key launches where it fills them (3 x
    1024: 384; 8 x 1024: 1024), the longer key launch first."""
    for batch, families in ((1, ("attention-backward",)), (2, ("attention-backward",)),
                            (3, ("attention-key", "attention-query")), (8, ("attention-key", "attention-query"))):
        assert attention_backward(batch, 1024, 8, 8) == families


@pytest.mark.parametrize("rows", [64 * m for m in (1, 2, 3, 15, 16, 17, 31, 33, 64, 127, 128, 129, 256)])
def test_a_layer_norms_sums_fit_half_its_plane(rows):
    # 2 width words a block: at most half of a rows x width binary32 plane
    assert 4 * layernorm_parts(rows) <= rows
