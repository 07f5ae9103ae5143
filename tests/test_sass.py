"""The SASS schedule check on real NVRTC output, for sm_86 and sm_90.

Everything here runs without a GPU: NVRTC compiles tests/sass_kernels.cu and
nvdisasm reads the cubins.  The mutation test plants hazards in those cubins
(planner.certify.sass.mutate) and requires the check to name each pair.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from planner.certify.sass import check as check_module
from planner.certify.sass.check import (FIXED, READ_BARRIER, VARIABLE, WARPGROUP, check_cubin, check_cubins,
                                       check_function)
from planner.certify.sass.cubin import decode_control, encode_control, parse_cubin, patch_word
from planner.certify.sass.disasm import control_flow, disassemble
from planner.certify.sass.latency import default_model
from planner.certify.sass.mutate import READ_BARRIER as PLANTED_READ, STALL, WAIT, mutations, sample
from planner.kernels.manifest import ARCHS
from planner.runtime.nvrtc import CompileError, compile_source

pytest.importorskip("cuda.bindings.nvrtc")

# the pattern kernels and their compiler options, as the latency miner takes them
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from sass_latencies import (LAYERNORM_OPTIONS, LAYERNORM_PATTERN, ROPE_OPTIONS, ROPE_PATTERN,  # noqa: E402
                            SPILL_PATTERN, STORE_OPTIONS, STORE_PATTERN)

KERNELS = Path(__file__).with_name("sass_kernels.cu")
MUTATIONS_PER_KIND = 100  # per architecture


# A wgmma's 32 accumulators d[0..31]: its operand list, and the outputs
# that bind them (%0..%31)
ACCUMULATOR_LIST = "{" + ",".join(f"%{i}" for i in range(32)) + "}"
ACCUMULATOR_OUTPUTS = ", ".join(f'"+f"(d[{i}])' for i in range(32))


def _accumulators(source: str) -> str:
    return source.replace('"{ACCUMULATORS}', '"' + ACCUMULATOR_LIST).replace(
        ": ACCUMULATOR_OPERANDS", ": " + ACCUMULATOR_OUTPUTS)


# A warpgroup's 64 x 64 product over four K steps (wgmma, sm_90a): the
# accumulators are stored only after wgmma.wait_group 0.
WGMMA_KERNEL = _accumulators(r"""
__device__ unsigned long long descriptor(const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}
extern "C" __global__ void __launch_bounds__(128) k_wgmma(float* c, const unsigned short* a, const unsigned short* b) {
  __shared__ __align__(1024) unsigned short sa[64 * 64], sb[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += 128) { sa[i] = a[i]; sb[i] = b[i]; }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int k = 0; k < 4; ++k)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{ACCUMULATORS}, %32, %33, 1, 1, 1, 0, 0;"
      : ACCUMULATOR_OPERANDS
      : "l"(descriptor(sa + 16 * k)), "l"(descriptor(sb + 16 * k)));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 32; ++i) c[threadIdx.x * 32 + i] = d[i];
}
""")

# A tile brought in by the tensor memory accelerator: one elected lane arms
# the stage's mbarrier with the bytes to expect and issues the bulk tensor
# copy; every thread waits on the barrier's phase before reading the tile.
TENSOR_COPY_KERNEL = r"""
struct alignas(64) TensorMap { unsigned long long words[16]; };
__device__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
extern "C" __global__ void __launch_bounds__(256) k_tensor_copy(float* out, const __grid_constant__ TensorMap map,
                                                                 int steps) {
  __shared__ __align__(1024) unsigned short tile[2][64 * 64];
  __shared__ __align__(8) unsigned long long full[2];
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  float acc = 0.0f;
  for (int step = 0; step < steps; ++step) {
    const int s = step & 1;
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                   :: "r"(smem(&full[s])), "r"(64 * 64 * 2) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3}], [%4];"
                   :: "r"(smem(tile[s])), "l"(&map), "r"(0), "r"(step * 64), "r"(smem(&full[s])) : "memory");
    }
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(smem(&full[s])), "r"((step >> 1) & 1) : "memory");
    acc += static_cast<float>(tile[s][threadIdx.x]);
    __syncthreads();
  }
  out[blockIdx.x * 256 + threadIdx.x] = acc;
}
"""


# The same product with A in registers (the form the streaming attention
# uses), a K step per trip of a loop that is not unrolled: each trip loads
# the next A fragment into the registers the last product read, after
# wgmma.wait_group 0.
WGMMA_REGISTERS_KERNEL = WGMMA_KERNEL.split("extern")[0] + _accumulators(r"""
extern "C" __global__ void __launch_bounds__(128) k_wgmma_registers(float* c, const unsigned* a,
                                                                    const unsigned short* b) {
  __shared__ __align__(1024) unsigned short sb[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += 128) sb[i] = b[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
#pragma unroll 1
  for (int k = 0; k < 4; ++k) {
    const unsigned f0 = a[(4 * k) * 128 + threadIdx.x], f1 = a[(4 * k + 1) * 128 + threadIdx.x];
    const unsigned f2 = a[(4 * k + 2) * 128 + threadIdx.x], f3 = a[(4 * k + 3) * 128 + threadIdx.x];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{ACCUMULATORS}, {%32,%33,%34,%35}, %36, 1, 1, 1, 0;"
      : ACCUMULATOR_OPERANDS
      : "r"(f0), "r"(f1), "r"(f2), "r"(f3), "l"(descriptor(sb + 16 * k)));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  for (int i = 0; i < 32; ++i) c[threadIdx.x * 32 + i] = d[i];
}
""")


def _compile(source: str, arch: str) -> bytes:
    try:
        return compile_source(source, "sass_kernels.cu", [f"-arch={arch}"])
    except CompileError as error:
        pytest.fail(str(error))


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


def test_shuffles_retire_in_order_as_ptxas_relies(cubins):
    """With more shuffles in flight than barriers, ptxas lets a later
    shuffle's barrier cover an earlier one's result (the corpus's
    p_shfl_exchange shows it): the model's in-order class. Without it the
    sm_86 exchange kernel is refused."""
    model = default_model()
    arch = model.arch("sm_86")
    assert any("SHFL" in c for c in arch.in_order)
    without = replace(arch, in_order=tuple(c - {"SHFL"} for c in arch.in_order if c - {"SHFL"}))
    unordered = replace(model, archs={**model.archs, "sm_86": without}, digest="shuffles unordered")
    report = check_cubin(cubins["sm_86"], "sm_86", unordered)
    assert {f.kernel for f in report.findings} == {"k_shfl_exchange"}
    assert all("SHFL" in f.text() for f in report.findings)


def _sm90_pattern_without_class(pattern: Path, options: list[str], member: str):
    """The sm_90 cubin of the pattern kernel (which passes with the model as
    mined), and its report with the operand-order class holding `member`
    dropped from the model."""
    cubin = compile_source(pattern.read_text(), pattern.name, ["-arch=sm_90", *options])
    assert check_cubin(cubin, "sm_90").status == "pass"
    model = default_model()
    arch = model.arch("sm_90")
    without = replace(arch, operand_order=tuple(c for c in arch.operand_order if member not in c))
    return check_cubin(cubin, "sm_90", replace(model, archs={**model.archs, "sm_90": without},
                                               digest=f"{member} unordered"))


def test_loads_read_their_operands_in_issue_order_as_ptxas_relies():
    """The rotary embedding's pattern (scripts/sass_pattern_rope.cu): ptxas
    lets a later global load overwrite an address register an earlier
    load's read barrier still protects. With the model's operand-order class
    the sm_90 schedule passes; without it the overwrite is refused."""
    report = _sm90_pattern_without_class(ROPE_PATTERN, ROPE_OPTIONS, "LDG")
    assert report.findings and all("read-barrier" in f.text() and "LDG" in f.text() for f in report.findings)


def test_stores_read_their_operands_in_issue_order_with_shuffles_as_ptxas_relies():
    """A half C's epilogue (scripts/sass_pattern_store.cu, the words of a
    pair of lanes traded by a shuffle, then stored): on sm_90 ptxas lets the
    next pair's shuffle overwrite a register an earlier store's read barrier
    still protects. With the model's operand-order class of stores and
    shuffles the schedule passes; without it the overwrite is refused."""
    report = _sm90_pattern_without_class(STORE_PATTERN, STORE_OPTIONS, "STG")
    assert report.findings and all(f.kind == "read-barrier" and f.producer_text.startswith("STG")
                                   and f.consumer_text.startswith("SHFL") for f in report.findings)


@pytest.mark.parametrize("arch", ARCHS)
def test_spills_take_their_data_late_as_stores_do(arch):
    """Tensor-core sums spilled as they are made (scripts/sass_pattern_spill.cu):
    ptxas stores an HMMA's sums to local memory 23 cycles after it, where
    every reader but a store waits 24. With the model's late read of a
    spill's data (R 1, as a global store's) the schedule passes; without it
    each spill is refused as too soon."""
    cubin = compile_source(SPILL_PATTERN.read_text(), SPILL_PATTERN.name, [f"-arch={arch}", *STORE_OPTIONS])
    assert check_cubin(cubin, arch).status == "pass"
    model = default_model()
    m = model.arch(arch)
    assert m.readers["STL"] == 1 and m.readers["STG"] == 1
    on_time = replace(m, readers={key: r for key, r in m.readers.items() if key != "STL"})
    report = check_cubin(cubin, arch, replace(model, archs={**model.archs, arch: on_time}, digest="spills on time"))
    assert report.findings and all(
        f.kind == "fixed-latency" and f.producer_text.startswith("HMMA.16816.F32")
        and f.consumer_text.startswith("STL") and (f.cycles_counted, f.cycles_needed) == (23, 24)
        for f in report.findings)


def test_refills_read_their_operands_in_issue_order_with_global_loads_as_ptxas_relies():
    """The same pattern on sm_90: ptxas lets a spill's refill (LDL) overwrite
    an address register a global load's read barrier still protects. With
    local loads in the global loads' operand-order class the schedule
    passes; without the class the overwrite is refused."""
    report = _sm90_pattern_without_class(SPILL_PATTERN, STORE_OPTIONS, "LDL")
    assert report.findings and all(f.kind == "read-barrier" and f.producer_text.startswith("LDG")
                                   and f.consumer_text.startswith("LDL") for f in report.findings)


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_loads_retire_in_order_with_shuffles_as_ptxas_relies(arch):
    """The layer norm backward's pattern (scripts/sass_pattern_layernorm.cu,
    rows copied a row ahead into shared memory): ptxas reads a row's shared
    loads once the warp sum's shuffles behind them are waited on, and on
    sm_90 lets a global load overwrite an asynchronous copy's address
    register unwaited. With the model's classes (shared loads and shuffles
    in order; global loads and asynchronous copies reading their operands
    in order) both kernels pass; with shuffles a class apart the shared
    loads' readers are refused, and on sm_90 with the copies outside the
    loads' class the overwrite is."""
    model = default_model()
    cubins = [compile_source(LAYERNORM_PATTERN.read_text(), LAYERNORM_PATTERN.name,
                             [f"-arch={arch}", f"-DLAYERNORM_ADD={add}", *LAYERNORM_OPTIONS]) for add in (0, 1)]
    assert all(check_cubin(cubin, arch).status == "pass" for cubin in cubins)
    m = model.arch(arch)
    apart = tuple(c - {"SHFL"} for c in m.in_order if c - {"SHFL"}) + (frozenset({"SHFL"}),)
    split = replace(model, archs={**model.archs, arch: replace(m, in_order=apart)}, digest="shuffles apart")
    findings = [f for cubin in cubins for f in check_cubin(cubin, arch, split).findings]
    assert findings and all(f.kind == "variable-latency" and f.producer_text.startswith("LDS") for f in findings)
    if arch == "sm_90":
        alone = tuple(c - {"LDGSTS"} for c in m.operand_order)
        copies = replace(model, archs={**model.archs, arch: replace(m, operand_order=alone)}, digest="copies apart")
        findings = [f for cubin in cubins for f in check_cubin(cubin, arch, copies).findings]
        assert findings and all(f.kind == "read-barrier" and f.producer_text.startswith("LDGSTS") for f in findings)


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


def test_warpgroup_accumulators_wait_for_the_warpgroup_barrier():
    """wgmma's accumulators pass only after WARPGROUP.DEPBAR.LE gsb0, 0x0;
    without it the first store of an accumulator is named, with the HGMMA
    that writes it."""
    cubin = _compile(WGMMA_KERNEL, "sm_90a")
    assert check_cubin(cubin, "sm_90").status == "pass"
    function = disassemble(cubin)["k_wgmma"]
    code = function.instructions
    wait = next(i for i in code if i.opcode == "WARPGROUP.DEPBAR.LE")
    products = [i for i in code if i.base == "HGMMA"]
    assert len(products) == 4 and all(p.offset < wait.offset for p in products)
    store = next(i for i in code if i.offset > wait.offset and i.base == "STG" and i.reads & products[-1].writes)
    removed = replace(wait, opcode="NOP", text="NOP", operands="")
    planted = replace(function, instructions=[removed if i is wait else i for i in code])
    verdict = check_function(planted, default_model().arch("sm_90"))
    firsts = {(f.producer_offset, f.consumer_offset) for f in verdict.findings}
    assert verdict.findings and all(f.kind == WARPGROUP for f in verdict.findings)
    assert (products[-1].offset, store.offset) in firsts
    assert "may still be in flight" in verdict.findings[0].detail


def test_a_warpgroup_products_a_fragment_waits_for_the_warpgroup_barrier():
    """With A in registers, HGMMA reads them asynchronously too: the next
    trip's loads into them pass only after WARPGROUP.DEPBAR.LE gsb0, 0x0;
    without it a load that overwrites the fragment (and touches no
    accumulator) is named, with the HGMMA that reads it."""
    cubin = _compile(WGMMA_REGISTERS_KERNEL, "sm_90a")
    assert check_cubin(cubin, "sm_90").status == "pass"
    function = disassemble(cubin)["k_wgmma_registers"]
    code = function.instructions
    (product,) = [i for i in code if i.base == "HGMMA"]
    fragment = {r for r in product.reads - product.writes if r.startswith("R")}
    assert len(fragment) == 4
    removed = [replace(i, opcode="NOP", text="NOP", operands="") if i.opcode == "WARPGROUP.DEPBAR.LE" else i
               for i in code]
    verdict = check_function(replace(function, instructions=removed), default_model().arch("sm_90"))
    overwrites = [f for f in verdict.findings if f.kind == WARPGROUP and f.producer_offset == product.offset
                  and f.register in fragment]
    assert overwrites
    consumer = next(i for i in code if i.offset == overwrites[0].consumer_offset)
    assert consumer.writes & fragment and not (consumer.reads | consumer.writes) & product.writes


def test_a_tensor_copy_is_waited_for_on_its_mbarrier():
    """The bulk tensor copy's code (ELECT picks the issuing lane, UTMALDG,
    SYNCS arming and polling the mbarrier) is in the model and passes; the
    poll's result is a predicate waited for on a barrier, and with that wait
    removed the branch that reads it is named with the poll."""
    cubin = _compile(TENSOR_COPY_KERNEL, "sm_90a")
    report = check_cubin(cubin, "sm_90")
    assert report.status == "pass", [u.describe() for u in report.unknowns]
    code = disassemble(cubin)["k_tensor_copy"].instructions
    assert {"ELECT", "UTMALDG", "SYNCS"} <= {i.base for i in code}
    polls = {i.offset for i in code if i.opcode.startswith("SYNCS.PHASECHK")}
    planted = [m for m in mutations(cubin, "sm_90") if m.kind == WAIT and m.producer in polls]
    assert planted
    for m in planted:
        assert any((f.producer_offset, f.consumer_offset) == (m.producer, m.consumer)
                   for f in check_cubin(m.cubin, "sm_90").findings), m.description


def test_a_copy_group_retired_frees_its_address_registers():
    """ptxas reuses an LDGSTS's address registers once a DEPBAR.LE has
    retired the cp.async group its LDGDEPBAR committed, without waiting on
    the copy's read barrier: that passes; with those DEPBARs gone, the
    overwrite is named with the copy. (The overwriter here is a global load,
    which the sm_90 model also lets follow a copy unwaited, the two reading
    their operands in order: the DEPBARs' part is shown with copies outside
    that class.)"""
    from planner.kernels.manifest import tiled_image
    from planner.runtime.nvrtc import compile_image

    cubin = compile_image(tiled_image("r", "r", 256, 256, 512, True, "binary16", 24), "sm_90")
    assert check_cubin(cubin, "sm_90").status == "pass"
    function = disassemble(cubin)["image"]
    code = function.instructions

    def unwaited_overwrite(copy):
        """The first overwrite of the copy's address registers, if no wait on
        its read barrier comes first (a straight-line scan)."""
        for i in code[code.index(copy) + 1:]:
            if i.control.wait_mask >> copy.control.read_barrier & 1:
                return None
            if {r for r in copy.reads if r.startswith("R")} & i.writes:
                return i
        return None

    copy, overwrite = next((c, o) for c in code if c.base == "LDGSTS" and c.control.read_barrier is not None
                           for o in [unwaited_overwrite(c)] if o is not None)
    waits = [i for i in code if i.opcode.startswith("DEPBAR.LE") and copy.offset < i.offset < overwrite.offset]
    assert waits
    planted = replace(function, instructions=[replace(i, opcode="NOP", text="NOP", operands="") if i in waits else i
                                              for i in code])
    arch = default_model().arch("sm_90")
    apart = replace(arch, operand_order=tuple(c - {"LDGSTS"} for c in arch.operand_order))
    assert check_function(function, apart).findings == ()
    verdict = check_function(planted, apart)
    assert any((f.kind, f.producer_offset, f.consumer_offset) == (READ_BARRIER, copy.offset, overwrite.offset)
               for f in verdict.findings)


LAUNCH_KERNELS = r"""
extern "C" __global__ void k_waits(float* out, const float* in) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  out[threadIdx.x] = 2.0f * in[threadIdx.x];
}
extern "C" __global__ void k_reads_first(float* out, const float* in, int n) {
  const float x = in[threadIdx.x];
  if (n > 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  out[threadIdx.x] = 2.0f * x;
}
extern "C" __global__ void k_returns_first(float* out, const float* in, int n) {
  if (threadIdx.x >= n) return;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  out[threadIdx.x] = 2.0f * in[threadIdx.x];
}
"""


def test_global_memory_or_an_end_before_the_launch_wait_is_named():
    """A launch that may start while the one before it drains must wait
    (griddepcontrol.wait) on every path before any global access, and before
    it ends (the launches after it wait for the one before through it): the
    first such instruction reached without the wait is recorded, with the
    cached verdicts too."""
    cubin = _compile(LAUNCH_KERNELS, "sm_90")
    report = check_cubin(cubin, "sm_90")
    verdicts = {k.kernel: k for k in report.kernels}
    assert verdicts["k_waits"].before_wait is None
    offset, text = verdicts["k_reads_first"].before_wait
    assert text.startswith("LDG")
    offset, text = verdicts["k_returns_first"].before_wait
    assert text.split()[-1].rstrip(";") == "EXIT" and text.startswith("@")
    assert check_module.Report.from_json(report.to_json()) == report


def test_the_plan_refuses_an_image_that_does_not_wait(monkeypatch, tmp_path):
    """Property 6 on sm_90 fails (and attests nothing) for an image whose
    verdict has an early access."""
    from planner.certify import machine
    from planner.model.config import DEFAULT
    from planner.schedule import build_plan

    plan = build_plan(DEFAULT)
    real = check_module.check_cubins

    def early(cubins, arch, cache_dir=None, model=None, workers=2):
        reports = real(cubins, arch, cache_dir, model, workers)
        name = next(iter(reports))
        kernel = replace(reports[name].kernels[0], before_wait=(0x80, "LDG.E R2, desc[UR4][R2.64]"))
        return reports | {name: replace(reports[name], kernels=(kernel,))}

    monkeypatch.setattr("planner.certify.sass.check_cubins", early)
    found = machine.sass_check(("sm_86", "sm_90"))(plan)
    refused = [v.message for v in found.violations if "before griddepcontrol.wait" in v.message]
    assert len(refused) == 1 and "(sm_90)" in refused[0]
    assert len(found.attested) == 2 * len(plan.images) - 1


def test_an_image_that_does_not_compile_fails_naming_the_error():
    """Property 6 fails for an image NVRTC refuses, with the log's first
    error: here a product tile of one stage, which its source asserts
    against."""
    from planner.certify import machine
    from planner.kernels.manifest import image
    from planner.model.config import DEFAULT
    from planner.schedule import build_plan

    plan = build_plan(DEFAULT)
    product = next(i for i in plan.images if i.family == "tiled-add")
    one_stage = image(product.family, product.name, **(product.constant_map | {"stages": 1}))
    found = machine.sass_check(("sm_86",))(replace(plan, images=(one_stage,)))
    (violation,) = found.violations
    assert "does not compile: tiled.cu(" in violation.message
    assert "error: static assertion failed" in violation.message and not found.attested


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
