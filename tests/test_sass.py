"""The SASS schedule check on real NVRTC output, for sm_86 and sm_90.

Everything here runs without a GPU: NVRTC compiles tests/sass_kernels.cu and
nvdisasm reads the cubins.  The mutation test plants hazards in those cubins
(planner.certify.sass.mutate) and requires the check to name each pair.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from planner.certify.sass import check as check_module
from planner.certify.sass.check import FIXED, READ_BARRIER, VARIABLE, check_cubin, check_cubins
from planner.certify.sass.cubin import decode_control, encode_control, parse_cubin, patch_word
from planner.certify.sass.disasm import control_flow, disassemble
from planner.certify.sass.latency import default_model
from planner.certify.sass.mutate import READ_BARRIER as PLANTED_READ, STALL, WAIT, mutations, sample

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")

ARCHS = ("sm_86", "sm_90")
KERNELS = Path(__file__).with_name("sass_kernels.cu")
MUTATIONS_PER_KIND = 100  # per architecture


def _compile(source: str, arch: str) -> bytes:
    def ok(result, *values):
        assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, result
        return values[0] if len(values) == 1 else values

    program = ok(*nvrtc.nvrtcCreateProgram(source.encode(), b"sass_kernels.cu", 0, [], []))
    try:
        options = [f"-arch={arch}".encode()]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(*nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            pytest.fail(log.decode(errors="replace"))
        image = b" " * ok(*nvrtc.nvrtcGetCUBINSize(program))
        ok(*nvrtc.nvrtcGetCUBIN(program, image))
        return image
    finally:
        nvrtc.nvrtcDestroyProgram(program)


@pytest.fixture(scope="module")
def cubins() -> dict[str, bytes]:
    source = KERNELS.read_text()
    return {arch: _compile(source, arch) for arch in ARCHS}


def _mutated(cubin: bytes, kernel: str, offset: int, **fields) -> bytes:
    """``cubin`` with the control fields of one instruction changed."""
    parsed = parse_cubin(cubin)
    code = parsed.kernel(kernel)
    word = next(w for w in code.words() if w.offset == offset)
    return patch_word(cubin, code, offset, encode_control(word.hi, replace(decode_control(word.hi), **fields)))


# -- decoding -----------------------------------------------------------------------


def test_control_code_of_known_words():
    assert decode_control(0x000FD000078E00FF).text() == "[B------:R-:W-:Y:S08]"
    load = decode_control(0x000EA2000C1E1900)  # LDG: sets write barrier 2
    assert (load.stall, load.yield_, load.write_barrier, load.read_barrier, load.wait_mask) == (1, False, 2, None, 0)
    assert decode_control(0x004FCA0000400000).text() == "[B--2---:R-:W-:Y:S05]"  # its reader waits on 2
    assert decode_control(0x0001E4000C10190A).text() == "[B------:R0:W-:-:S02]"  # a store's read barrier
    assert decode_control(0x040FE4000780C0FF).reuse == 1  # R8.reuse, operand A


def test_control_code_round_trip():
    word = 0x001FE20007FFE0FF
    control = decode_control(word)
    assert encode_control(word, control) == word
    changed = replace(control, stall=3, wait_mask=0b100001, read_barrier=4, write_barrier=None, yield_=True)
    again = decode_control(encode_control(word, changed))
    assert again == changed
    assert encode_control(word, changed) & (1 << 41) - 1 == word & (1 << 41) - 1  # the operands stay


def test_cubin_kernels_and_listing(cubins):
    for arch, cubin in cubins.items():
        parsed = parse_cubin(cubin)
        assert f"sm_{parsed.sm}" == arch
        functions = disassemble(cubin)
        assert len(functions) >= 40 and set(functions) == {k.name for k in parsed.kernels}
        saxpy = functions["k_saxpy"]
        load = next(i for i in saxpy.instructions if i.base == "LDG")
        pair = {r for r in load.reads if r.startswith("R")}
        assert len(pair) == 2  # the 64-bit address, expanded by nvdisasm
        assert load.control.write_barrier is not None
        mma = next(i for i in functions["k_hmma_chain"].instructions if i.opcode.startswith("HMMA.16816.F32"))
        assert len({r for r in mma.writes if r.startswith("R")}) == 4


def test_control_flow_follows_loops_and_calls(cubins):
    functions = disassemble(cubins["sm_86"])
    loop = control_flow(functions["k_reduce_shfl"])
    assert any(s <= i for i, succ in enumerate(loop.successors) for s in succ)  # a back edge
    called = functions["k_call"]
    flow = control_flow(called)
    calls = [i for i, ins in enumerate(called.instructions) if ins.base == "CALL"]
    returns = [i for i, ins in enumerate(called.instructions) if ins.base == "RET"]
    assert calls and returns and not flow.problems
    assert all(flow.successors[i][0] > i for i in calls)  # into the callee
    assert {c + 1 for c in calls} <= {s for r in returns for s in flow.successors[r]}


# -- compiler output passes ------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_no_false_positives_on_compiler_output(cubins, arch):
    report = check_cubin(cubins[arch], arch)
    assert [f.text() for f in report.findings] == []
    assert [u.describe() for u in report.unknowns] == []
    assert report.status == "pass" and len(report.kernels) >= 40


def test_wrong_architecture_is_unknown(cubins):
    report = check_cubin(cubins["sm_90"], "sm_86")
    assert report.status == "unknown" and "sm_90" in report.unknowns[0].reason


def test_opcode_outside_the_model_is_unknown(cubins):
    model = default_model()
    arch = model.arch("sm_86")
    without = replace(arch, fixed={k: v for k, v in arch.fixed.items() if k != "FFMA"})
    smaller = replace(model, archs={**model.archs, "sm_86": without}, digest="without FFMA")
    report = check_cubin(cubins["sm_86"], "sm_86", smaller)
    assert report.status == "unknown"
    assert any("FFMA" in u.reason for u in report.unknowns)


def test_undecided_witness_is_unknown_not_pass(cubins, monkeypatch):
    planted = next(m for m in mutations(cubins["sm_86"], "sm_86") if m.kind == WAIT and m.kernel == "k_saxpy")
    monkeypatch.setattr(check_module, "_solve", lambda *args: check_module._Witness(None, "Z3: timeout"))
    report = check_cubin(planted.cubin, "sm_86", replace(default_model(), digest="undecided"))
    assert report.status == "unknown" and not report.findings


# -- planted hazards ------------------------------------------------------------------


def test_mutations_are_caught_with_their_pair(cubins):
    counts: dict[str, list[int]] = {}
    misses = []
    for arch, cubin in cubins.items():
        check_cubin(cubin, arch)  # the unmutated kernels' verdicts, reused below
        for planted in sample(mutations(cubin, arch), MUTATIONS_PER_KIND, seed=1):
            report = check_cubin(planted.cubin, arch)
            caught = any(
                (f.kernel, f.producer_offset, f.consumer_offset) == (planted.kernel, planted.producer, planted.consumer)
                for f in report.findings
            )
            tally = counts.setdefault(planted.kind, [0, 0])
            tally[0] += 1
            tally[1] += caught
            if not caught:
                misses.append(f"{arch} {planted.kernel} {planted.kind}: {planted.description}")
    total = sum(n for n, _ in counts.values())
    caught = sum(c for _, c in counts.values())
    print(f"mutations: {total}, caught with their pair: {caught}; by kind {counts}")
    assert total >= 500
    assert caught >= 0.95 * total, misses[:20]
    assert {WAIT, STALL, PLANTED_READ} <= set(counts)


def test_removed_wait_is_named_exactly(cubins):
    functions = disassemble(cubins["sm_86"])
    code = functions["k_saxpy"].instructions
    load = next(i for i in code if i.base == "LDG" and i.writes)
    reader = next(i for i in code if i.offset > load.offset and load.writes & i.reads)
    barrier = load.control.write_barrier
    assert reader.control.wait_mask >> barrier & 1  # ptxas waits at the reader itself
    cubin = _mutated(cubins["sm_86"], "k_saxpy", reader.offset, wait_mask=reader.control.wait_mask & ~(1 << barrier))
    report = check_cubin(cubin, "sm_86")
    assert report.status == "fail"
    (finding,) = [f for f in report.findings if f.producer_offset == load.offset]
    assert finding.kind == VARIABLE and finding.kernel == "k_saxpy" and finding.arch == "sm_86"
    assert finding.consumer_offset == reader.offset and finding.consumer_text == reader.text
    assert finding.producer_text == load.text and finding.register in load.writes & reader.reads
    assert finding.barrier == barrier and finding.cycles_needed is None
    assert finding.cycles_counted == sum(i.control.stall for i in code if load.offset <= i.offset < reader.offset)
    assert finding.path and finding.path[0] <= load.offset
    assert "before its result arrives" in finding.detail  # the schedule Z3 found


def test_shortened_stall_counts_cycles_across_blocks(cubins):
    for arch, cubin in cubins.items():
        functions = disassemble(cubin)
        for planted in mutations(cubin, arch):
            if planted.kind != STALL:
                continue
            leaders = control_flow(functions[planted.kernel]).leaders
            if not any(planted.producer < 16 * leader <= planted.consumer for leader in leaders):
                continue
            report = check_cubin(planted.cubin, arch)
            pair = (planted.producer, planted.consumer)
            (finding,) = [f for f in report.findings if (f.producer_offset, f.consumer_offset) == pair]
            assert finding.kind == FIXED and len(finding.path) >= 2
            assert finding.cycles_counted < finding.cycles_needed
            return
    pytest.fail("no stall mutation spans two blocks")


def test_read_barrier_across_a_loop_back_edge(cubins):
    """The loop's store still reads its address when the next iteration overwrites it."""
    cubin = cubins["sm_86"]
    function = disassemble(cubin)["k_scale4"]
    code, flow = function.instructions, control_flow(function)
    store = next(i for i in code if i.base == "STG" and i.control.read_barrier is not None)
    barrier = store.control.read_barrier
    back = next(s for i, succ in enumerate(flow.successors) for s in succ if s <= i and 16 * i > store.offset)
    waiter = next(i for i in code[back:] if i.control.wait_mask >> barrier & 1)
    assert waiter.offset < store.offset
    unwaited = _mutated(cubin, "k_scale4", waiter.offset, wait_mask=waiter.control.wait_mask & ~(1 << barrier))
    report = check_cubin(unwaited, "sm_86")
    loop_carried = [f for f in report.findings if f.kind == READ_BARRIER and f.producer_offset == store.offset]
    assert loop_carried and all(f.consumer_offset < f.producer_offset for f in loop_carried)
    assert any(f.consumer_offset == waiter.offset or f.path[-1] <= waiter.offset for f in loop_carried)


def test_barrier_waited_too_soon_after_it_was_set(cubins):
    """A wait one cycle after the load issues does not see its barrier yet."""
    cubin = cubins["sm_86"]
    code = disassemble(cubin)["k_saxpy"].instructions
    load = next(i for i in code if i.base == "LDG" and i.writes)
    after = code[load.offset // 16 + 1]
    barrier = load.control.write_barrier
    moved = _mutated(cubin, "k_saxpy", after.offset, wait_mask=after.control.wait_mask | 1 << barrier)
    report = check_cubin(moved, "sm_86")
    assert report.status == "pass"  # a wait on top of the reader's own is harmless
    rushed = _mutated(moved, "k_saxpy", load.offset, stall=1)
    reader = next(i for i in code if i.offset > load.offset and load.writes & i.reads)
    rushed = _mutated(rushed, "k_saxpy", reader.offset, wait_mask=reader.control.wait_mask & ~(1 << barrier))
    report = check_cubin(rushed, "sm_86")
    assert any(f.producer_offset == load.offset and f.consumer_offset == reader.offset for f in report.findings)


# -- many cubins, cached --------------------------------------------------------------


def test_cache_gives_identical_reports(cubins, tmp_path):
    images = {f"{arch}-image": cubin for arch, cubin in cubins.items()}
    cold = {arch: check_cubins({f"{arch}-image": cubins[arch]}, arch, tmp_path) for arch in ARCHS}
    assert (tmp_path / check_module.CACHE_FILE).is_file()
    check_module._VERDICTS.clear()  # only the file can answer now
    start = time.perf_counter()
    cached = {arch: check_cubins({f"{arch}-image": cubins[arch]}, arch, tmp_path) for arch in ARCHS}
    assert time.perf_counter() - start < 2
    assert cached == cold and all(r.status == "pass" for by in cached.values() for r in by.values())
    assert set(images) == {name for by in cached.values() for name in by}
    planted = next(m for m in mutations(cubins["sm_86"], "sm_86") if m.kind == WAIT)
    both = check_cubins({"good": cubins["sm_86"], "bad": planted.cubin}, "sm_86", tmp_path)
    assert both["good"].status == "pass" and both["bad"].status == "fail"
    again = check_cubins({"bad": planted.cubin}, "sm_86", tmp_path)
    assert again["bad"] == both["bad"]


def test_latency_model_has_provenance():
    model = default_model()
    for arch in ARCHS:
        entry = model.arch(arch)
        assert {"compiler", "date", "method"} <= set(entry.provenance)
        assert entry.is_variable("LDG.E") and entry.is_variable("MUFU.EX2") and not entry.is_variable("FFMA")
        assert entry.fixed_latency("FFMA", "FADD", False) >= 4
        assert entry.fixed_latency("ISETP.GE.AND", "BRA", True) > entry.fixed_latency("ISETP.GE.AND", "SEL", False)
