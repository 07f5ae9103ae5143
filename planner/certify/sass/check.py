"""The schedule check: every register read waits for its producer.

For each instruction that produces something a later instruction depends on,
the check follows every path of the control-flow graph from it (a search over
(instruction, state) pairs, so loops are followed until the state repeats:
pending barriers and stall cycles are carried across blocks and around loops)
and reports:

  variable-latency  a register read of a result that arrives through a write
                    barrier, before any wait that covers it;
  fixed-latency     a register read of a fixed-latency result fewer stall
                    cycles after its producer than the latency model needs;
  read-barrier      a register overwritten while an earlier instruction that
                    set a read barrier may still be reading it;
  warpgroup         an accumulator of HGMMA (wgmma.mma_async) read or
                    written, or a register holding its A fragment (the
                    form with A in registers) overwritten, by any other
                    instruction before a WARPGROUP.DEPBAR.LE gsb0, 0x0
                    (wgmma.wait_group 0): HGMMA reads and delivers through
                    the warpgroup's own barrier, in no number of cycles, and
                    only later HGMMAs on the same accumulators are ordered
                    behind it.  Its descriptors (uniform registers) are
                    taken at issue.

Modelling choices, each the weaker of the possible assumptions unless ptxas
is seen relying on the stronger:
  * Time is counted in stall cycles only.  A wait, a taken branch or another
    warp can only make the gap longer, so the stall sum is the gap's least.
  * A barrier is a counter.  A wait-mask bit waits until it is zero, which
    completes every operation that set it and was registered when the wait
    began; an operation is registered ``barrier_setup`` cycles after issue
    (``depbar_setup`` for DEPBAR).  DEPBAR.LE SBn, N waits until at most N are
    outstanding, which completes an operation only when N later operations on
    SBn were registered: DEPBAR.LE is how ptxas waits for cp.async groups,
    which retire in the order they were committed.
  * Results retire in issue order only within the model's ``in_order``
    classes (shared-memory loads; the MUFU/POPC/FLO unit; ...), mined from
    ptxas letting a later operation's barrier cover an earlier unbarriered
    one of the class.
  * An asynchronous copy (LDGSTS) joins the group the next LDGDEPBAR
    commits; a DEPBAR.LE that retires the group (counted on the LDGDEPBAR's
    barrier, in commit order) means the copy has read its operands too:
    ptxas reuses a copy's address registers on that ground alone.
  * Operations of a model ``operand_order`` class read their operands in
    issue order, mined from ptxas letting a later variable-latency operation
    of the class overwrite a register an earlier one's read barrier still
    protects, unwaited: the later one writes it only once it has read its own
    operands, so after the earlier one has read its.
  * A guarded instruction may not execute: its writes end nothing, but it is
    still a reader.  Waits and barriers apply whatever the guard.  ``@!PT``
    instructions have no register effect.
  * Subroutines are analysed in place: CALL continues at the callee and RET
    at every return site; the operand summary nvdisasm prints on CALL is not
    used, since the callee's own instructions are followed.
  * A path is a per-thread path.  A diverged warp runs other threads' paths
    in between, which only adds cycles and waits.
  * A write-after-write on a pending result and the operand-read window of
    operations without a read barrier are not modelled.

The path of each hazard on a barrier is checked once more with Z3 (a
warpgroup path, like a fixed-latency one, is its own witness: no wait on it), which
must produce a schedule of it (issue and completion cycles satisfying every
stall, wait and ordering rule above) in which the hazard happens; a fixed-
latency path is its own witness, its stall sum.  Anything the check cannot
decide (an opcode outside the model, a path Z3 refutes or gives up on, a call
it cannot follow) is reported as unknown, never as a pass.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from heapq import heappop, heappush
from pathlib import Path
from typing import Iterator, Mapping

import z3

from planner.files import written_whole

from .cubin import CubinError, parse_cubin
from .disasm import ControlFlow, DisassemblyError, Function, Instruction, control_flow, disassemble, nvdisasm_version
from .latency import ArchModel, LatencyModel, default_model


VARIABLE = "variable-latency"
FIXED = "fixed-latency"
READ_BARRIER = "read-barrier"
WARPGROUP = "warpgroup"
ASYNC_MATRIX = "HGMMA"
_WARPGROUP_WAIT = re.compile(r"^gsb0\s*,\s*(0x0+|0)$")
_GENERAL_REGISTER = re.compile(r"^R\d+$")  # not RZ, not a uniform register
Z3_TIMEOUT_MS = 5000
_COUNT_CAP = 8  # younger operations counted per barrier, enough for DEPBAR.LE's N
_DEPBAR = re.compile(r"SB(\d)\s*,\s*(0x[0-9a-f]+|\d+)")


@dataclass(frozen=True)
class Finding:
    kernel: str
    arch: str
    kind: str  # VARIABLE, FIXED, READ_BARRIER or WARPGROUP
    register: str
    producer_offset: int
    producer_text: str
    consumer_offset: int  # the reader, or for READ_BARRIER the overwriter
    consumer_text: str
    path: tuple[int, ...]  # offsets of the basic blocks the path runs through
    cycles_counted: int  # stall cycles from the producer's issue to the consumer's
    cycles_needed: int | None  # the fixed latency; None where only a wait would do
    barrier: int | None  # the producer's barrier, if it set one
    detail: str  # the witness schedule

    def text(self) -> str:
        path = " -> ".join(f"{offset:#06x}" for offset in self.path)
        needed = "" if self.cycles_needed is None else f" of {self.cycles_needed} needed"
        return (
            f"{self.kernel} [{self.arch}] {self.kind} on {self.register}: "
            f"{self.producer_offset:#06x} {self.producer_text}  ->  {self.consumer_offset:#06x} {self.consumer_text} "
            f"after {self.cycles_counted} cycles{needed}; path {path}; {self.detail}"
        )


@dataclass(frozen=True)
class Unknown:
    kernel: str
    arch: str
    offset: int
    text: str
    reason: str

    def describe(self) -> str:
        return f"{self.kernel} [{self.arch}] {self.offset:#06x} {self.text}: {self.reason}"


@dataclass(frozen=True)
class KernelVerdict:
    kernel: str
    findings: tuple[Finding, ...]
    unknowns: tuple[Unknown, ...]
    # the first instruction a path from the entry reaches before
    # griddepcontrol.wait (ACQBULK) that touches global memory or ends the
    # thread (EXIT, KILL), as (offset, text); None if none does. Not a
    # hazard of the schedule: what a launch that may start while the one
    # before it drains must not have (planner.certify.machine).
    before_wait: tuple[int, str] | None = None


# -- the code in arrays ----------------------------------------------------------


@dataclass(frozen=True)
class _Op:
    """What the search needs of one instruction."""

    index: int
    instruction: Instruction
    stall: int
    wait_mask: int
    write_barrier: int | None
    read_barrier: int | None
    depbar: tuple[int, int] | None  # DEPBAR.LE's (barrier, N)
    executes: bool
    guard: str | None  # the guard predicate's register, without "!"
    reads: frozenset[str]
    writes: frozenset[str]
    kills: frozenset[str]  # writes that certainly happen (unguarded)
    late_reads: frozenset[str]  # registers a read barrier protects


def _ops(function: Function) -> list[_Op]:
    ops = []
    for index, instruction in enumerate(function.instructions):
        control = instruction.control
        executes = not instruction.never_executes
        reads, writes = instruction.reads, instruction.writes
        if instruction.base == "CALL" or not executes:
            # the callee's own instructions are followed instead
            reads, writes = frozenset(), frozenset()
        if instruction.base == "RET":
            writes = frozenset()
        guard = instruction.guard_register
        depbar = None
        if instruction.base == "DEPBAR":
            match = _DEPBAR.search(instruction.operands)
            if match:
                depbar = (int(match.group(1)), int(match.group(2), 0))
        ops.append(
            _Op(
                index=index,
                instruction=instruction,
                stall=control.stall,
                wait_mask=control.wait_mask,
                write_barrier=control.write_barrier,
                read_barrier=control.read_barrier,
                depbar=depbar,
                executes=executes,
                guard=guard,
                reads=reads,
                writes=writes,
                kills=writes if instruction.guard is None else frozenset(),
                late_reads=frozenset(r for r in reads if r.startswith("R") and r != guard),
            )
        )
    return ops


def reachable(flow: ControlFlow) -> set[int]:
    """The blocks the entry reaches."""
    seen, stack = {0}, [0]
    while stack:
        for successor in flow.successors[stack.pop()]:
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return seen


# -- candidate hazards --------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    kind: str
    producer: int  # instruction index
    consumer: int
    register: str
    path: tuple[int, ...]  # instruction indices from producer to consumer
    cycles: int  # stall sum along the path
    needed: int | None


def _fixed_hazards(ops: list[_Op], flow: ControlFlow, model: ArchModel, producer: int) -> Iterator[_Candidate]:
    """Readers reached sooner than the producer's latency (Dijkstra on stalls)."""
    origin = ops[producer]
    opcode = origin.instruction.opcode
    horizon = model.longest_fixed(opcode)
    heap: list = []
    order = 0  # ties broken by insertion, so states never need ordering
    for successor in flow.successors[producer]:
        heappush(heap, (origin.stall, order, successor, origin.writes, None))
        order += 1
    parent: dict[tuple[int, frozenset[str]], tuple[int, frozenset[str]] | None] = {}
    reported = set()
    while heap:
        cycles, _, index, live, previous = heappop(heap)
        key = (index, live)
        if key in parent or cycles >= horizon:
            continue
        parent[key] = previous
        op = ops[index]
        if op.executes:
            for register in sorted(live & op.reads):
                needed = model.fixed_latency(opcode, op.instruction.opcode, register == op.guard)
                if needed is not None and cycles < needed and (index, register) not in reported:
                    reported.add((index, register))
                    yield _Candidate(FIXED, producer, index, register, _walk(parent, key, producer), cycles, needed)
        remaining = live - op.kills
        if not remaining or index == producer:
            continue
        for successor in flow.successors[index]:
            heappush(heap, (cycles + op.stall, order, successor, remaining, key))
            order += 1


def _walk(parent: dict, key, producer: int) -> tuple[int, ...]:
    path = []
    while key is not None:
        path.append(key[0])
        key = parent[key]
    return (producer, *reversed(path))


@dataclass(frozen=True)
class _Pending:
    """An operation in flight and what could complete it on one path."""

    live: frozenset[str]  # registers it still writes (or still reads)
    age: int  # stall cycles since issue, capped
    # later operations that can complete it, counted: (barrier, age capped,
    # of its in-order class, how many)
    younger: tuple[tuple[int, int, bool, int], ...]
    # once an LDGDEPBAR has committed an asynchronous copy: the barrier of its
    # group, and the stall cycles since the commit, capped
    group: int | None = None
    group_age: int = 0


def _variable_hazards(
    ops: list[_Op], flow: ControlFlow, model: ArchModel, producer: int, kind: str
) -> Iterator[_Candidate]:
    """Readers (or overwriters) reached while the operation may be in flight.

    A breadth-first search over (instruction, pending state) finds, for each
    consumer, the shortest path on which nothing completed the operation.
    """
    origin = ops[producer]
    if kind == VARIABLE:
        barrier, live = origin.write_barrier, origin.writes
        in_order = model.in_order_class(origin.instruction.opcode)
        completing = {barrier}
    else:
        # the operation's result arriving means it has read its operands too
        barrier, live = origin.read_barrier, origin.late_reads
        in_order = None
        completing = {barrier, origin.write_barrier}
    # (a read barrier's operation) the class whose later variable-latency
    # operations write only after it has read its operands
    queued = model.operand_order_class(origin.instruction.opcode) if kind == READ_BARRIER else None
    cap = max(model.barrier_setup, model.depbar_setup)
    # an asynchronous copy (LDGSTS) joins the group the next LDGDEPBAR
    # commits: the group's completion (DEPBAR.LE on its barrier, counted in
    # commit order) means every copy in it has read its operands and landed
    joins_group = kind == READ_BARRIER and origin.instruction.base == "LDGSTS"
    start = _Pending(live, min(origin.stall, cap), ())
    queue = deque((successor, start) for successor in flow.successors[producer])
    parent: dict[tuple[int, _Pending], tuple[int, _Pending] | None] = {state: None for state in queue}
    reported = set()
    while queue:
        index, pending = state = queue.popleft()
        op = ops[index]
        if _completes(op, pending, barrier, completing, model):
            continue
        hit = pending.live & (op.reads if kind == VARIABLE else op.writes) if op.executes else frozenset()
        if queued is not None and model.is_variable(op.instruction.opcode) \
                and model.operand_order_class(op.instruction.opcode) == queued:
            hit = frozenset()  # its writes land after the reader has read (the registers stay protected)
        for register in sorted(hit):
            if index not in reported:
                reported.add(index)
                path = _walk(parent, state, producer)
                cycles = sum(ops[i].stall for i in path[:-1])
                yield _Candidate(kind, producer, index, register, path, cycles, None)
        remaining = pending.live - (op.kills if kind == VARIABLE else hit)
        if not remaining or index == producer:
            continue
        younger = _younger(op, pending, barrier, in_order, model, cap)
        group, group_age = pending.group, min(pending.group_age + op.stall, cap)
        if joins_group and group is None and op.instruction.base == "LDGDEPBAR" and op.write_barrier is not None:
            group, group_age = op.write_barrier, min(op.stall, cap)
        after = _Pending(remaining, min(pending.age + op.stall, cap), younger, group, group_age)
        for successor in flow.successors[index]:
            following = (successor, after)
            if following not in parent:
                parent[following] = state
                queue.append(following)


def _warpgroup_hazards(ops: list[_Op], flow: ControlFlow, producer: int) -> Iterator[_Candidate]:
    """Instructions other than HGMMA that touch the producer's accumulators,
    or overwrite the registers of its A fragment, on a path with no
    WARPGROUP.DEPBAR.LE gsb0, 0x0 after it (breadth first, so each is
    reported on its shortest such path)."""
    live = ops[producer].writes
    fragment = frozenset(r for r in ops[producer].reads - live if _GENERAL_REGISTER.match(r))
    queue = deque((index,) for index in flow.successors[producer])
    parent: dict[tuple[int], tuple[int] | None] = {state: None for state in queue}
    reported = set()
    while queue:
        state = queue.popleft()
        (index,) = state
        op = ops[index]
        instruction = op.instruction
        if instruction.opcode == "WARPGROUP.DEPBAR.LE" and _WARPGROUP_WAIT.match(instruction.operands.strip()):
            continue
        touched = (live & (op.reads | op.writes)) | (fragment & op.writes)
        hit = touched if op.executes and instruction.base != ASYNC_MATRIX else frozenset()
        if hit and index not in reported:
            reported.add(index)
            path = _walk(parent, state, producer)
            cycles = sum(ops[i].stall for i in path[:-1])
            yield _Candidate(WARPGROUP, producer, index, sorted(hit)[0], path, cycles, None)
        if index == producer:
            continue
        for successor in flow.successors[index]:
            if (successor,) not in parent:
                parent[(successor,)] = state
                queue.append((successor,))


def _completes(op: _Op, pending: _Pending, barrier: int | None, completing: set, model: ArchModel) -> bool:
    """Whether waiting at ``op`` completes the pending operation (``completing``:
    the barriers whose wait does; ``barrier``: the one DEPBAR counts on)."""
    for waited in range(6):
        if not op.wait_mask >> waited & 1:
            continue
        if waited in completing and pending.age >= model.barrier_setup:
            return True
        # a later operation of its in-order class completed
        if any(b == waited and same and age >= model.barrier_setup for b, age, same, _ in pending.younger):
            return True
    if pending.group is not None and op.wait_mask >> pending.group & 1 and pending.group_age >= model.barrier_setup:
        return True
    if op.depbar is not None:
        waited, allowed = op.depbar
        for counted, age in ((barrier, pending.age), (pending.group, pending.group_age)):
            if counted is not None and waited == counted and age >= model.depbar_setup:
                later = sum(n for b, a, _, n in pending.younger if b == counted and a >= model.depbar_setup)
                if later >= allowed:
                    return True
    return False


def _younger(op: _Op, pending: _Pending, barrier: int | None, in_order: int | None, model: ArchModel, cap: int):
    """The pending operation's younger list after ``op`` issues and stalls."""
    if not pending.younger and op.write_barrier is None and op.read_barrier is None:
        return ()
    counts: dict[tuple[int, int, bool], int] = {}
    for b, age, of_class, n in pending.younger:
        key = (b, min(age + op.stall, cap), of_class)
        counts[key] = min(counts.get(key, 0) + n, _COUNT_CAP)
    issued = []
    of_class = _of_class(op, in_order, model)
    if of_class:
        issued.append((op.write_barrier, True))
    for b in (op.write_barrier, op.read_barrier):
        if b is not None and b in (barrier, pending.group) and not (of_class and b == op.write_barrier):
            issued.append((b, False))
    for b, of_class in issued:
        key = (b, min(op.stall, cap), of_class)
        counts[key] = min(counts.get(key, 0) + 1, _COUNT_CAP)
    return tuple(sorted((b, age, of_class, n) for (b, age, of_class), n in counts.items()))


def _of_class(op: _Op, in_order: int | None, model: ArchModel) -> bool:
    """Whether ``op`` sets a write barrier and retires in order with the class."""
    return (
        in_order is not None
        and op.write_barrier is not None
        and model.in_order_class(op.instruction.opcode) == in_order
    )


# -- witnesses ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Witness:
    holds: bool | None  # None: Z3 gave no answer
    detail: str


def _witness(ops: list[_Op], model: ArchModel, candidate: _Candidate) -> _Witness:
    """A schedule of the candidate's path in which the hazard happens.

    For a fixed latency it is the path itself, every stall at its least.  For
    an operation in flight Z3 must find issue and completion cycles that obey
    every stall, every wait and every ordering rule of the model, with the
    reader (or overwrite) issued before the operation completes.
    """
    path = [ops[i] for i in candidate.path]
    if candidate.kind == FIXED:
        return _Witness(True, f"with every stall at its least the reader issues {candidate.cycles} cycles "
                              f"after the producer")
    if candidate.kind == WARPGROUP:
        return _Witness(True, "no WARPGROUP.DEPBAR.LE gsb0, 0x0 on the path: the accumulators may still be in flight")
    # operations in flight that can bear on the producer's: (position, barrier,
    # in its in-order class); the producer's own comes first
    in_order = model.in_order_class(path[0].instruction.opcode) if candidate.kind == VARIABLE else None
    own = path[0].write_barrier if candidate.kind == VARIABLE else path[0].read_barrier
    counted = {op.depbar[0] for op in path if op.depbar is not None} & {own}
    flights = [(0, own, in_order is not None)]
    if candidate.kind == READ_BARRIER and path[0].write_barrier is not None:
        flights.append((0, path[0].write_barrier, False))  # its result arriving: it has read its operands
    for k, op in enumerate(path[1:-1], start=1):
        if _of_class(op, in_order, model):
            flights.append((k, op.write_barrier, True))
        for barrier in (op.write_barrier, op.read_barrier):
            if barrier is not None and barrier in counted:
                flights.append((k, barrier, False))
    relevant = {barrier for _, barrier, _ in flights if barrier is not None}
    events = sorted(
        {0, len(path) - 1}
        | {k for k, _, _ in flights}
        | {m for m, op in enumerate(path) if op.wait_mask & sum(1 << b for b in relevant)}
        | {m for m, op in enumerate(path) if op.depbar is not None and op.depbar[0] in relevant}
    )
    elapsed = [0]
    for op in path[:-1]:
        elapsed.append(elapsed[-1] + op.stall)
    solver = z3.Solver()
    solver.set("timeout", Z3_TIMEOUT_MS)
    issue = {m: z3.Int(f"t{m}") for m in events}
    solver.add(issue[0] == 0)
    for before, after in zip(events, events[1:]):
        solver.add(issue[after] - issue[before] >= elapsed[after] - elapsed[before])
    done = [z3.Int(f"done{n}") for n in range(len(flights))]
    for (k, _, _), completion in zip(flights, done):
        solver.add(completion >= issue[k] + 1)
    if candidate.kind == READ_BARRIER and len(flights) > 1 and flights[1][0] == 0:
        solver.add(done[0] <= done[1])
    ordered = [n for n, flight in enumerate(flights) if flight[2]]
    for first, second in zip(ordered, ordered[1:]):
        solver.add(done[first] <= done[second])
    for barrier in counted:
        on_it = [n for n, flight in enumerate(flights) if flight[1] == barrier]
        for first, second in zip(on_it, on_it[1:]):
            solver.add(done[first] <= done[second])
    for m in events:
        op = path[m]
        for (k, barrier, _), completion in zip(flights, done):
            if k < m and barrier is not None and op.wait_mask >> barrier & 1:
                solver.add(z3.Implies(issue[m] - issue[k] >= model.barrier_setup, issue[m] >= completion))
        if op.depbar is not None and op.depbar[0] in relevant:
            waited, allowed = op.depbar
            outstanding = [
                z3.If(z3.And(issue[m] - issue[k] >= model.depbar_setup, completion > issue[m]), 1, 0)
                for (k, barrier, _), completion in zip(flights, done)
                if k < m and barrier == waited
            ]
            solver.add(z3.Sum(outstanding) <= allowed)
    last = issue[len(path) - 1]
    solver.add(last < done[0])
    return _solve(solver, last, done[0], candidate)


def _solve(solver: z3.Solver, last, produced, candidate: _Candidate) -> _Witness:
    verdict = solver.check()
    if verdict == z3.unknown:
        return _Witness(None, f"Z3: {solver.reason_unknown()}")
    if verdict == z3.unsat:
        return _Witness(False, "no schedule of this path has the hazard")
    found = solver.model()
    at = found.eval(last).as_long()
    ready = found.eval(produced).as_long()
    what = "its result arrives" if candidate.kind == VARIABLE else "it has read its operands"
    return _Witness(True, f"the {'reader' if candidate.kind == VARIABLE else 'overwrite'} can issue at cycle {at}, "
                          f"before {what} at cycle {ready}")


# -- the launch before ------------------------------------------------------------

GLOBAL_MEMORY = frozenset({"LDG", "STG", "LDGSTS", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG", "SULD", "SUST",
                           "UBLKCP", "UTMALDG", "UTMASTG"})
LAUNCH_WAIT = "ACQBULK"  # griddepcontrol.wait
# what no path may reach before the wait: global memory, and the thread's end
WAITED_FOR = GLOBAL_MEMORY | {"EXIT", "KILL"}


def before_wait(ops: list[_Op], flow: ControlFlow) -> tuple[int, str] | None:
    """The first instruction (breadth first) some path from the entry reaches
    without passing griddepcontrol.wait that touches global memory, or that
    ends the thread: a grid whose threads may all end without waiting can
    complete before the launch it waits for, and the launches that wait
    only for it (the plan's edges are reduced: the launch order's
    happens-before is their transitive closure) would then not wait for
    that one. None if there is no such path."""
    queue, seen = deque([0]), {0}
    while queue:
        index = queue.popleft()
        instruction = ops[index].instruction
        if instruction.base == LAUNCH_WAIT and ops[index].executes and instruction.guard is None:
            continue
        if instruction.base in WAITED_FOR and ops[index].executes:
            return instruction.offset, instruction.text
        for successor in flow.successors[index]:
            if successor not in seen:
                seen.add(successor)
                queue.append(successor)
    return None


# -- the check -------------------------------------------------------------------


def check_function(function: Function, model: ArchModel) -> KernelVerdict:
    """Every hazard in one kernel's schedule, or why it cannot be decided."""
    flow = control_flow(function)
    ops = _ops(function)
    arch = model.arch
    unknowns = [Unknown(function.name, arch, 0, "", problem) for problem in flow.problems]
    candidates: list[_Candidate] = []
    for index in sorted(reachable(flow)):
        op = ops[index]
        instruction = op.instruction
        if op.writes:
            if instruction.base == ASYNC_MATRIX:
                candidates.extend(_warpgroup_hazards(ops, flow, index))
            elif op.write_barrier is not None or model.is_variable(instruction.opcode):
                candidates.extend(_variable_hazards(ops, flow, model, index, VARIABLE))
            elif not model.has_fixed(instruction.opcode):
                unknowns.append(Unknown(function.name, arch, instruction.offset, instruction.text,
                                        f"{instruction.opcode} is not in the {arch} latency model"))
            else:
                candidates.extend(_fixed_hazards(ops, flow, model, index))
        if op.read_barrier is not None and op.late_reads:
            candidates.extend(_variable_hazards(ops, flow, model, index, READ_BARRIER))
    findings = []
    for candidate in candidates:
        witness = _witness(ops, model, candidate)
        consumer = ops[candidate.consumer].instruction
        if witness.holds:
            findings.append(_finding(function, model, ops, flow.leaders, candidate, witness))
        else:
            reason = witness.detail
            if witness.holds is False:
                reason = f"{candidate.kind} path not confirmed: {reason}"
            unknowns.append(Unknown(function.name, arch, consumer.offset, consumer.text, reason))
    return KernelVerdict(function.name, tuple(findings), tuple(unknowns), before_wait(ops, flow))


def _finding(
    function: Function, model: ArchModel, ops: list[_Op], leaders: frozenset[int], candidate: _Candidate,
    witness: _Witness,
) -> Finding:
    producer = ops[candidate.producer]
    consumer = ops[candidate.consumer].instruction
    blocks = [max(leader for leader in leaders if leader <= candidate.producer)]
    blocks += [i for i in candidate.path[1:] if i in leaders]
    barrier = producer.write_barrier if candidate.kind == VARIABLE else producer.read_barrier
    if candidate.kind in (FIXED, WARPGROUP):
        barrier = None
    return Finding(
        kernel=function.name,
        arch=model.arch,
        kind=candidate.kind,
        register=candidate.register,
        producer_offset=producer.instruction.offset,
        producer_text=producer.instruction.text,
        consumer_offset=consumer.offset,
        consumer_text=consumer.text,
        path=tuple(16 * i for i in blocks),
        cycles_counted=candidate.cycles,
        cycles_needed=candidate.needed,
        barrier=barrier,
        detail=witness.detail,
    )


# -- cubins -----------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """One cubin's verdict for one architecture."""

    arch: str
    sha256: str
    kernels: tuple[KernelVerdict, ...]
    problems: tuple[Unknown, ...] = ()  # why the cubin as a whole could not be read

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for kernel in self.kernels for f in kernel.findings)

    @property
    def unknowns(self) -> tuple[Unknown, ...]:
        return self.problems + tuple(u for kernel in self.kernels for u in kernel.unknowns)

    @property
    def status(self) -> str:
        """"fail" with any finding, else "unknown" with anything undecided, else "pass"."""
        return "fail" if self.findings else "unknown" if self.unknowns else "pass"

    def to_json(self) -> dict:
        return {
            "arch": self.arch,
            "sha256": self.sha256,
            "kernels": [
                {
                    "kernel": k.kernel,
                    "findings": [asdict(f) for f in k.findings],
                    "unknowns": [asdict(u) for u in k.unknowns],
                    "before_wait": k.before_wait,
                }
                for k in self.kernels
            ],
            "problems": [asdict(u) for u in self.problems],
        }

    @staticmethod
    def from_json(data: dict) -> "Report":
        def finding(entry: dict) -> Finding:
            return Finding(**{**entry, "path": tuple(entry["path"])})

        kernels = tuple(
            KernelVerdict(
                k["kernel"], tuple(finding(f) for f in k["findings"]), tuple(Unknown(**u) for u in k["unknowns"]),
                tuple(k["before_wait"]) if k["before_wait"] is not None else None,
            )
            for k in data["kernels"]
        )
        return Report(data["arch"], data["sha256"], kernels, tuple(Unknown(**u) for u in data["problems"]))


# A kernel's verdict depends only on its code, the architecture and the model,
# so a cubin that differs from an earlier one in one kernel re-checks only it.
_VERDICTS: dict[tuple[str, str, str, str], KernelVerdict] = {}
_VERDICTS_KEPT = 4096
_VERDICTS_LOCK = threading.Lock()


def check_cubin(cubin: bytes, arch: str, model: LatencyModel | None = None) -> Report:
    """Check every kernel of ``cubin`` against ``arch`` ("sm_86", "sm_90")."""
    model = model or default_model()
    digest = hashlib.sha256(cubin).hexdigest()
    try:
        arch_model = model.arch(arch)
        parsed = parse_cubin(cubin)
        if f"sm_{parsed.sm}" != arch:
            raise CubinError(f"the cubin is for sm_{parsed.sm}")
        functions = disassemble(cubin)
    except (KeyError, CubinError, DisassemblyError) as error:
        return Report(arch, digest, (), (Unknown("", arch, 0, "", f"cannot check this cubin: {error}"),))
    verdicts = []
    for name, function in functions.items():
        code = hashlib.sha256(parsed.kernel(name).code).hexdigest()
        key = (name, code, arch, model.digest)
        verdict = _VERDICTS.get(key)
        if verdict is None:
            verdict = check_function(function, arch_model)
            with _VERDICTS_LOCK:
                while len(_VERDICTS) >= _VERDICTS_KEPT:
                    _VERDICTS.pop(next(iter(_VERDICTS)))
                _VERDICTS[key] = verdict
        verdicts.append(verdict)
    return Report(arch, digest, tuple(verdicts))


CACHE_FILE = "sass-schedules.json"


def fingerprint(model: LatencyModel | None = None) -> str:
    """What every cached verdict depends on besides the cubin: this package's
    code, the latency model and the disassembler."""
    digest = hashlib.sha256((model or default_model()).digest.encode())
    for module in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(module.read_bytes())
    digest.update(nvdisasm_version().encode())
    return digest.hexdigest()


def check_cubins(
    cubins: Mapping[str, bytes],
    arch: str,
    cache_dir: Path | None = None,
    model: LatencyModel | None = None,
    workers: int = 2,
) -> dict[str, Report]:
    """Check several cubins (keyed by image name), reusing and updating the
    verdicts cached in ``cache_dir`` under each cubin's SHA-256."""
    model = model or default_model()
    cache = _Cache(cache_dir, fingerprint(model)) if cache_dir is not None else None
    reports: dict[str, Report] = {}
    missing = {}
    for name, cubin in cubins.items():
        cached = cache.get(hashlib.sha256(cubin).hexdigest(), arch) if cache else None
        if cached is not None:
            reports[name] = cached
        else:
            missing[name] = cubin
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        checked = dict(zip(missing, pool.map(lambda cubin: check_cubin(cubin, arch, model), missing.values())))
    reports.update(checked)
    if cache and checked:
        cache.put(checked.values())
    return {name: reports[name] for name in cubins}


class _Cache:
    """The verdicts of earlier checks: one small JSON file, rewritten whole."""

    def __init__(self, directory: Path, stamp: str):
        self.path = Path(directory) / CACHE_FILE
        self.stamp = stamp
        self.entries: dict[str, dict] = {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if data.get("fingerprint") == stamp:
            self.entries = data.get("reports", {})

    def get(self, sha256: str, arch: str) -> Report | None:
        entry = self.entries.get(f"{sha256}:{arch}")
        return Report.from_json(entry) if entry is not None else None

    def put(self, reports) -> None:
        for report in reports:
            if not report.problems:  # a cubin that could not be read is retried next time
                self.entries[f"{report.sha256}:{report.arch}"] = report.to_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"fingerprint": self.stamp, "reports": self.entries}, sort_keys=True)
        # a concurrent reader sees one whole file
        with written_whole(self.path, "w") as f:
            f.write(text)
