"""Hazards planted in a real cubin's schedule, to test the check against.

Each mutation changes one instruction's control code so that a straight run
of the kernel's code (no branch between producer and consumer) has a hazard
the schedule did not have, and names the pair the check must report:

  wait          a wait-mask bit cleared: the only wait on a variable-latency
                result's barrier before its first reader;
  stall         a stall shortened: the first reader of a fixed-latency result
                comes a cycle sooner than the latency model allows;
  read-barrier  a wait-mask bit cleared: the only wait on a read barrier
                before the first overwrite of a register it protects.

A run is only used when nothing else on it could complete the operation (no
DEPBAR on its barrier, no later operation of its in-order class), so the
expectation does not depend on the check's own reasoning.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from .check import reachable
from .cubin import decode_control, encode_control, parse_cubin, patch_word
from .disasm import Function, Instruction, control_flow, disassemble
from .latency import ArchModel, LatencyModel, default_model

WAIT, STALL, READ_BARRIER = "wait", "stall", "read-barrier"
_BRANCHES = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "KILL", "BPT"}
_RUN_LIMIT = 64  # instructions followed from a producer


@dataclass(frozen=True)
class Mutation:
    kind: str  # WAIT, STALL or READ_BARRIER
    kernel: str
    offset: int  # the instruction whose control code changed
    hi: int  # its new upper qword
    producer: int  # the offsets of the pair the check must report
    consumer: int
    description: str
    original: bytes = field(repr=False, compare=False)

    @property
    def cubin(self) -> bytes:
        """The mutated cubin."""
        return patch_word(self.original, parse_cubin(self.original).kernel(self.kernel), self.offset, self.hi)


def mutations(cubin: bytes, arch: str, model: LatencyModel | None = None) -> list[Mutation]:
    """Every mutation of ``cubin`` the three kinds allow, in code order."""
    arch_model = (model or default_model()).arch(arch)
    found = []
    for name, function in disassemble(cubin).items():
        for kind, offset, hi, producer, consumer, what in _plans(function, arch_model):
            found.append(Mutation(kind, name, offset, hi, producer, consumer, what, cubin))
    return found


def sample(found: list[Mutation], per_kind: int, seed: int = 0) -> list[Mutation]:
    """Up to ``per_kind`` mutations of each kind, chosen reproducibly."""
    chosen = []
    generator = random.Random(seed)
    for kind in (WAIT, STALL, READ_BARRIER):
        of_kind = [m for m in found if m.kind == kind]
        chosen += generator.sample(of_kind, min(per_kind, len(of_kind)))
    return chosen


def _plans(function: Function, model: ArchModel):
    code = function.instructions
    reachable = _reachable(function)
    for index, producer in enumerate(code):
        if index not in reachable or producer.never_executes:
            continue
        control = producer.control
        if producer.writes and (control.write_barrier is not None or model.is_variable(producer.opcode)):
            yield from _wait_plan(code, index, model)
        elif producer.writes and model.has_fixed(producer.opcode):
            yield from _stall_plan(code, index, model)
        if control.read_barrier is not None:
            yield from _read_barrier_plan(code, index)


def _reachable(function: Function) -> set[int]:
    return reachable(control_flow(function))


def _run(code: list[Instruction], index: int):
    """The instructions after ``index`` up to the first branch, in order."""
    for later in range(index + 1, min(index + 1 + _RUN_LIMIT, len(code))):
        yield later, code[later]
        if code[later].base in _BRANCHES:
            return


def _first_reader(code, index: int) -> int | None:
    live = set(code[index].writes)
    for later, instruction in _run(code, index):
        if not instruction.never_executes and instruction.base != "CALL" and live & instruction.reads:
            return later
        if instruction.guard is None:
            live -= instruction.writes
        if not live:
            return None
    return None


def _waiters(code, index: int, until: int, barriers: set[int]) -> list[int] | None:
    """Instructions in (index, until] waiting on any of ``barriers``; None when
    a DEPBAR on one of them lies between (it could complete the operation)."""
    found = []
    for later in range(index + 1, until + 1):
        instruction = code[later]
        if instruction.base == "DEPBAR" and any(f"SB{b}" in instruction.operands for b in barriers):
            return None
        if any(instruction.control.wait_mask >> b & 1 for b in barriers):
            found.append(later)
    return found


def _cleared(instruction: Instruction, barriers: set[int]) -> int:
    control = instruction.control
    mask = control.wait_mask & ~sum(1 << b for b in barriers)
    return encode_control(instruction.hi, replace(control, wait_mask=mask))


def _wait_plan(code, index: int, model: ArchModel):
    producer = code[index]
    barrier = producer.control.write_barrier
    reader = _first_reader(code, index)
    if barrier is None or reader is None:
        return
    order = model.in_order_class(producer.opcode)
    if order is not None and any(
        model.in_order_class(code[i].opcode) == order and code[i].control.write_barrier is not None
        for i in range(index + 1, reader)
    ):
        return
    waiters = _waiters(code, index, reader, {barrier})
    if waiters is None or len(waiters) != 1:
        return
    waiter = code[waiters[0]]
    yield (WAIT, waiter.offset, _cleared(waiter, {barrier}), producer.offset, code[reader].offset,
           f"SB{barrier} no longer waited at {waiter.offset:#06x}")


def _stall_plan(code, index: int, model: ArchModel):
    producer = code[index]
    reader = _first_reader(code, index)
    if reader is None:
        return
    consumer = code[reader]
    read = producer.writes & consumer.reads
    guard = consumer.guard_register
    needed = max(model.fixed_latency(producer.opcode, consumer.opcode, r == guard) or 0 for r in read)
    distance = sum(code[i].control.stall for i in range(index, reader))
    cut = distance - needed + 1
    if needed <= 1 or cut <= 0:
        return
    longest = max(range(index, reader), key=lambda i: code[i].control.stall)
    shortened = code[longest].control.stall - cut
    if shortened < 1:
        return
    control = replace(code[longest].control, stall=shortened)
    yield (STALL, code[longest].offset, encode_control(code[longest].hi, control), producer.offset, consumer.offset,
           f"stall at {code[longest].offset:#06x} cut to {shortened}: {distance - cut} of {needed} cycles")


def _read_barrier_plan(code, index: int):
    producer = code[index]
    control = producer.control
    guard = producer.guard_register
    protected = {r for r in producer.reads if r.startswith("R") and r != guard}
    overwrite = None
    for later, instruction in _run(code, index):
        if not instruction.never_executes and instruction.base != "CALL" and protected & instruction.writes:
            overwrite = later
            break
    if overwrite is None:
        return
    barriers = {b for b in (control.read_barrier, control.write_barrier) if b is not None}
    waiters = _waiters(code, index, overwrite, barriers)
    if waiters is None or len(waiters) != 1:
        return
    waiter = code[waiters[0]]
    if decode_control(_cleared(waiter, barriers)).wait_mask == waiter.control.wait_mask:
        return
    yield (READ_BARRIER, waiter.offset, _cleared(waiter, barriers), producer.offset, code[overwrite].offset,
           f"SB{control.read_barrier} no longer waited at {waiter.offset:#06x}")
