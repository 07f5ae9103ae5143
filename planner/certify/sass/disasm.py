"""Per-instruction facts from ``nvdisasm``: text, registers read and written,
branch targets, and the control-flow graph built from them.

One ``nvdisasm -c -hex -plr -lrm narrow`` run per cubin gives, for every
instruction, its text, its two encoding qwords and a one-character column per
register (``^`` def, ``v`` use, ``x`` use and def) with register pairs, quads
and implicit operands already expanded.  The encoding is compared with the
cubin's own bytes, so the text and the decoded control codes can never refer
to different instructions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from .cubin import CONTROL_MASK, Control, Cubin, Kernel, decode_control, parse_cubin


class DisassemblyError(RuntimeError):
    """nvdisasm failed or printed something this module cannot read."""


# -- locating nvdisasm --------------------------------------------------------


@cache
def nvdisasm_path() -> str:
    """The nvdisasm binary of the ``nvidia-cuda-nvdisasm`` wheel, else PATH's."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for candidate in sorted(Path(root).glob("*/bin/nvdisasm")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("nvdisasm")
    if found is None:
        raise DisassemblyError("nvdisasm not found (install nvidia-cuda-nvdisasm)")
    return found


@cache
def nvdisasm_version() -> str:
    result = subprocess.run([nvdisasm_path(), "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def run_nvdisasm(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        image = Path(scratch, "image.cubin")
        image.write_bytes(cubin)
        result = subprocess.run(
            [nvdisasm_path(), "-c", "-hex", "-plr", "-lrm", "narrow", str(image)],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise DisassemblyError(f"nvdisasm failed: {result.stderr.strip()}")
    return result.stdout


# -- instructions -------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    offset: int
    text: str  # as printed, without the trailing " ;"
    guard: str | None  # "P0", "!UP1"; None when unguarded or @PT
    opcode: str  # with modifiers, e.g. "LDG.E.128"
    operands: str
    reads: frozenset[str]  # "R4", "P0", "UR6", "UP1"
    writes: frozenset[str]
    labels: tuple[str, ...]  # labels named in the operands, e.g. branch targets
    lo: int
    hi: int

    @property
    def control(self) -> Control:
        return decode_control(self.hi)

    @property
    def base(self) -> str:
        """The opcode without modifiers, e.g. ``LDG``."""
        return self.opcode.split(".", 1)[0]

    @property
    def guard_register(self) -> str | None:
        """The guard predicate's register, without "!"."""
        return self.guard.lstrip("!") if self.guard else None

    @property
    def never_executes(self) -> bool:
        """``@!PT`` / ``@!UPT`` filler: no register effect (barriers still apply)."""
        return self.guard in ("!PT", "!UPT")


@dataclass
class Function:
    """One kernel's code: its instructions in address order and its labels."""

    name: str
    instructions: list[Instruction]
    labels: dict[str, int] = field(default_factory=dict)  # label -> offset


_SECTION = re.compile(r"^//-+ \.text\.(\S+)\s+-+$")
_INSTRUCTION = re.compile(r"^/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/$")
_HI = re.compile(r"^/\* (0x[0-9a-f]{16}) \*/$")
_LABEL = re.compile(r"^([^\s/][^\s]*):$")
_GUARD = re.compile(r"^@(!?U?P(?:T|\d+))\s+(.*)$")
_LABEL_REF = re.compile(r"`\(([^)]+)\)")
_REGISTER_FILES = {"GPR": "R", "PRED": "P", "UGPR": "UR", "UPRED": "UP"}


@dataclass
class _Columns:
    """Which register each character position of the life-range table is."""

    registers: dict[int, str]

    @staticmethod
    def parse(box: list[str]) -> "_Columns":
        # box: the table rows between the two "+---" rules; row 0 names the
        # register files, the rows below spell each column's number.
        titles = box[0]
        bars = [i for i, ch in enumerate(titles) if ch == "|"]
        registers: dict[int, str] = {}
        for left, right in zip(bars, bars[1:]):
            prefix = _REGISTER_FILES.get(titles[left + 1 : right].strip())
            if prefix is None:
                raise DisassemblyError(f"unknown register file in {titles!r}")
            for column in range(left + 1, right):
                digits = "".join(row[column] for row in box[1:] if column < len(row))
                digits = digits.replace(" ", "")
                if digits.isdigit():
                    registers[column] = f"{prefix}{int(digits)}"
        return _Columns(registers)

    def effects(self, table: str) -> tuple[frozenset[str], frozenset[str]]:
        reads, writes = set(), set()
        for column, register in self.registers.items():
            mark = table[column] if column < len(table) else " "
            if mark in "vx":
                reads.add(register)
            if mark in "^x":
                writes.add(register)
        return frozenset(reads), frozenset(writes)


def _split(line: str) -> tuple[str, str]:
    """A line's code part and its life-range table part (after ``//``)."""
    code, _, table = line.partition("// ")
    return code.strip(), table


def _instruction(offset: int, body: str, lo: int, hi: int, table: str, columns: _Columns) -> Instruction:
    guard = None
    match = _GUARD.match(body)
    rest = body
    if match:
        guard, rest = match.group(1), match.group(2)
        if guard in ("PT", "UPT"):
            guard = None
    opcode, _, operands = rest.partition(" ")
    reads, writes = columns.effects(table)
    return Instruction(
        offset=offset,
        text=body,
        guard=guard,
        opcode=opcode,
        operands=operands.strip(),
        reads=reads,
        writes=writes,
        labels=tuple(_LABEL_REF.findall(operands)),
        lo=lo,
        hi=hi,
    )


def parse_listing(listing: str, cubin: Cubin) -> dict[str, Function]:
    """Each kernel's instructions, checked word for word against the cubin."""
    functions: dict[str, Function] = {}
    current: Function | None = None
    columns: _Columns | None = None
    box: list[str] | None = None
    pending: tuple[int, str, int] | None = None  # offset, text, lo: awaiting hi
    pending_labels: list[str] = []
    for line in listing.splitlines():
        code, table = _split(line)
        if table.startswith("+-"):
            # A rule opens the header (then closes it), or closes the table
            # at a function's end; a label may precede the closing rule.
            if box:
                columns, box = _Columns.parse(box), None
            else:
                box = []
        elif box is not None:
            if table.startswith("|"):
                box.append(table)
                continue
            box = None
        section = _SECTION.match(code)
        if section:
            _close(current, pending_labels)
            current = Function(section.group(1), [])
            functions[current.name] = current
            continue
        if current is None:
            continue
        if pending is not None:
            hi_match = _HI.match(code)
            if not hi_match or columns is None:
                raise DisassemblyError(f"{current.name}: no upper qword after {pending[1]!r}")
            offset, body, lo = pending
            if offset != 16 * len(current.instructions):
                raise DisassemblyError(f"{current.name}: instruction at {offset:#x} out of sequence")
            current.instructions.append(_instruction(offset, body, lo, int(hi_match.group(1), 16), table, columns))
            for label in pending_labels:
                current.labels[label] = offset
            pending_labels, pending = [], None
            continue
        match = _INSTRUCTION.match(code)
        if match:
            pending = (int(match.group(1), 16), match.group(2), int(match.group(3), 16))
            continue
        label = _LABEL.match(code)
        if label:
            pending_labels.append(label.group(1))
    _close(current, pending_labels)
    for function in functions.values():
        _compare(function, cubin.kernel(function.name))
    return functions


def _close(function: Function | None, labels: list[str]) -> None:
    """Labels after a function's last instruction name its end."""
    if function is not None:
        for label in labels:
            function.labels[label] = 16 * len(function.instructions)
    labels.clear()


def _compare(function: Function, kernel: Kernel) -> None:
    # The section may end in alignment padding past the function's size,
    # which nvdisasm does not list and nothing can reach.
    words = kernel.words()
    if len(words) < len(function.instructions) or not function.instructions:
        raise DisassemblyError(
            f"{function.name}: {len(function.instructions)} instructions listed, {len(words)} in the cubin"
        )
    for word, instruction in zip(words, function.instructions):
        if (word.lo, word.hi & ~CONTROL_MASK) != (instruction.lo, instruction.hi & ~CONTROL_MASK):
            raise DisassemblyError(f"{function.name}: listing and cubin differ at {word.offset:#x}")


# The listing does not depend on the scheduling fields, so cubins that differ
# only there (a re-scheduled or mutated kernel) share one nvdisasm run.
_LISTINGS: dict[str, dict[str, tuple[bytes, Function]]] = {}
_LISTINGS_KEPT = 32
_LISTINGS_LOCK = threading.Lock()


def _schedule_free_digest(parsed: Cubin, cubin: bytes) -> str:
    """SHA-256 of the cubin with every instruction's scheduling fields cleared."""
    image = np.frombuffer(cubin, dtype=np.uint8).copy()
    for kernel in parsed.kernels:
        words = image[kernel.file_offset : kernel.file_offset + len(kernel.code)].view("<u8")
        words[1::2] &= np.uint64(~CONTROL_MASK & 0xFFFFFFFFFFFFFFFF)
    return hashlib.sha256(image.tobytes()).hexdigest()


def disassemble(cubin: bytes) -> dict[str, Function]:
    """Every kernel's instructions, with the scheduling fields of ``cubin``."""
    parsed = parse_cubin(cubin)
    key = _schedule_free_digest(parsed, cubin)
    listed = _LISTINGS.get(key)
    if listed is None:
        functions = parse_listing(run_nvdisasm(cubin), parsed)
        listed = {name: (parsed.kernel(name).code, f) for name, f in functions.items()}
        with _LISTINGS_LOCK:
            while len(_LISTINGS) >= _LISTINGS_KEPT:
                _LISTINGS.pop(next(iter(_LISTINGS)))
            _LISTINGS[key] = listed
    functions = {}
    for name, (code, function) in listed.items():
        kernel = parsed.kernel(name)
        if kernel.code != code:
            instructions = [
                instruction if instruction.hi == word.hi else replace(instruction, hi=word.hi)
                for instruction, word in zip(function.instructions, kernel.words())
            ]
            function = Function(name, instructions, dict(function.labels))
        functions[name] = function
    return functions


# -- control flow -------------------------------------------------------------

_ENDS = {"EXIT", "KILL", "BPT"}  # no successor when unguarded
_INDIRECT = {"BRX", "JMX"}
_JUMPS = {"BRA", "JMP"}


@dataclass(frozen=True)
class ControlFlow:
    """Successors of each instruction (by index) and the basic-block leaders.

    Subroutines live in the kernel's own section: CALL goes to the callee's
    entry and each RET returns to the instruction after every CALL whose
    callee reaches it (context-insensitive, so every real path is a path
    here).  An indirect branch may go to any label of the function.
    """

    successors: tuple[tuple[int, ...], ...]
    leaders: frozenset[int]
    problems: tuple[str, ...]  # what keeps the graph from covering every path


def _unconditional(instruction: Instruction) -> bool:
    """An unguarded jump to a label alone (no condition operand, no .DIV)."""
    return (
        instruction.guard is None
        and instruction.opcode in ("BRA", "BRA.U", "JMP")
        and instruction.operands.startswith("`")
    )


def control_flow(function: Function) -> ControlFlow:
    count = len(function.instructions)
    index_of = {label: offset // 16 for label, offset in function.labels.items()}
    every_label = tuple(sorted({i for i in index_of.values() if i < count}))
    problems: list[str] = []
    local: list[list[int]] = []  # successors within the calling procedure
    calls: list[tuple[int, int]] = []  # (call index, callee entry index)
    for index, instruction in enumerate(function.instructions):
        following = [index + 1] if index + 1 < count else []
        base = instruction.base
        targets = [index_of[label] for label in instruction.labels if label in index_of and index_of[label] < count]
        if base in _JUMPS:
            if not targets:
                problems.append(f"{instruction.offset:#06x}: branch target not found: {instruction.text}")
            local.append(targets + ([] if _unconditional(instruction) else following))
        elif base in _INDIRECT:
            local.append(list(targets or every_label) + ([] if instruction.guard is None else following))
        elif base == "CALL":
            if not targets:
                problems.append(f"{instruction.offset:#06x}: call target not found: {instruction.text}")
            for target in targets:
                calls.append((index, target))
            local.append(following)  # the return site, as seen from the caller
        elif base == "RET" or base in _ENDS:
            local.append([] if instruction.guard is None else following)
        else:
            local.append(following)
    successors = [list(dict.fromkeys(s)) for s in local]
    for call, entry in calls:
        successors[call] = [entry] + ([call + 1] if function.instructions[call].guard else [])
        for ret in _returns_reached(function, local, entry):
            if call + 1 < count and call + 1 not in successors[ret]:
                successors[ret].append(call + 1)
    leaders = {0} | set(every_label)
    for index, succ in enumerate(successors):
        if succ != [index + 1]:
            leaders.update(succ)
            if index + 1 < count:
                leaders.add(index + 1)
    return ControlFlow(tuple(tuple(s) for s in successors), frozenset(leaders), tuple(problems))


def _returns_reached(function: Function, local: list[list[int]], entry: int) -> list[int]:
    """The RETs a callee entered at ``entry`` can reach (nested calls return)."""
    seen, stack, found = {entry}, [entry], []
    while stack:
        index = stack.pop()
        if function.instructions[index].base == "RET":
            found.append(index)
        for successor in local[index]:
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return found
