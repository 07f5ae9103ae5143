"""Cubin (ELF64) decoding: kernels' code sections and 128-bit instructions.

Only the standard library is used.  The layout of the control code follows
the sm_70+ encoding: 17 bits at instruction bits 105..121, i.e. ``hi >> 41``
where ``hi`` is the upper little-endian qword of the instruction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_EM_CUDA = 190
_SHT_NOBITS = 8
_TEXT_PREFIX = ".text."
NO_BARRIER = 7
INSTRUCTION_BYTES = 16


class CubinError(ValueError):
    """The bytes are not a cubin this module can read."""


@dataclass(frozen=True)
class Control:
    """The scheduling fields of one instruction."""

    stall: int  # cycles before the next instruction may issue (0..15)
    yield_: bool  # True when the warp scheduler may switch (raw bit 0)
    write_barrier: int | None  # barrier the result's completion decrements
    read_barrier: int | None  # barrier the operand read's completion decrements
    wait_mask: int  # bit n: wait until barrier n is zero before issue
    reuse: int  # operand reuse cache flags (bit 0 operand A, 1 B, 2 C, 3 D)

    @property
    def waits(self) -> tuple[int, ...]:
        return tuple(b for b in range(6) if self.wait_mask >> b & 1)

    def text(self) -> str:
        """The usual notation, e.g. ``[B------:R-:W-:Y:S08]``."""
        mask = "".join(str(b) if self.wait_mask >> b & 1 else "-" for b in range(6))
        read = "-" if self.read_barrier is None else str(self.read_barrier)
        write = "-" if self.write_barrier is None else str(self.write_barrier)
        return f"[B{mask}:R{read}:W{write}:{'Y' if self.yield_ else '-'}:S{self.stall:02d}]"


_STALL_SHIFT, _YIELD_SHIFT, _WRITE_SHIFT, _READ_SHIFT = 41, 45, 46, 49
_WAIT_SHIFT, _REUSE_SHIFT = 52, 58
# stall, yield, barriers and wait mask: the fields a schedule chooses
CONTROL_MASK = ((1 << (_REUSE_SHIFT - _STALL_SHIFT)) - 1) << _STALL_SHIFT


def decode_control(hi: int) -> Control:
    """Decode the control fields of an instruction's upper qword."""
    write = hi >> _WRITE_SHIFT & 7
    read = hi >> _READ_SHIFT & 7
    return Control(
        stall=hi >> _STALL_SHIFT & 0xF,
        yield_=not hi >> _YIELD_SHIFT & 1,
        write_barrier=None if write == NO_BARRIER else write,
        read_barrier=None if read == NO_BARRIER else read,
        wait_mask=hi >> _WAIT_SHIFT & 0x3F,
        reuse=hi >> _REUSE_SHIFT & 0xF,
    )


def encode_control(hi: int, control: Control) -> int:
    """``hi`` with its control fields replaced by ``control``."""
    fields = (
        (_STALL_SHIFT, 0xF, control.stall),
        (_YIELD_SHIFT, 1, 0 if control.yield_ else 1),
        (_WRITE_SHIFT, 7, NO_BARRIER if control.write_barrier is None else control.write_barrier),
        (_READ_SHIFT, 7, NO_BARRIER if control.read_barrier is None else control.read_barrier),
        (_WAIT_SHIFT, 0x3F, control.wait_mask),
        (_REUSE_SHIFT, 0xF, control.reuse),
    )
    for shift, mask, value in fields:
        if not 0 <= value <= mask:
            raise ValueError(f"control field out of range: {value}")
        hi = hi & ~(mask << shift) | value << shift
    return hi


@dataclass(frozen=True)
class Word:
    """One 128-bit instruction word at ``offset`` within its kernel's code."""

    offset: int
    lo: int
    hi: int

    @property
    def control(self) -> Control:
        return decode_control(self.hi)


@dataclass(frozen=True)
class Kernel:
    """A ``.text.<name>`` section: the code of one function."""

    name: str
    file_offset: int  # where the code starts in the cubin
    code: bytes

    def words(self) -> list[Word]:
        return [
            Word(INSTRUCTION_BYTES * index, lo, hi)
            for index, (lo, hi) in enumerate(struct.iter_unpack("<QQ", self.code))
        ]


@dataclass(frozen=True)
class Cubin:
    sm: int  # e.g. 86 or 90, from the ELF header
    kernels: tuple[Kernel, ...]

    def kernel(self, name: str) -> Kernel:
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(name)


def _sm_of(header_flags: int, abi_version: int) -> int:
    # ABI version 8 (CUDA 12.8+) moved the SM number from bits 0..7 to 8..15.
    return header_flags >> 8 & 0xFF if abi_version >= 8 else header_flags & 0xFF


def parse_cubin(data: bytes) -> Cubin:
    """Find every kernel's code section in a cubin."""
    if len(data) < 64 or data[:4] != _ELF_MAGIC:
        raise CubinError("not an ELF file")
    if data[4] != _ELFCLASS64 or data[5] != _ELFDATA2LSB:
        raise CubinError("not a little-endian ELF64 file")
    abi_version = data[8]
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        raise CubinError(f"ELF machine {machine} is not CUDA")
    (flags,) = struct.unpack_from("<I", data, 48)
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    sections = []
    for index in range(shnum):
        base = shoff + index * shentsize
        if base + 64 > len(data):
            raise CubinError("section header table runs past the end")
        name, kind, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, base)
        sections.append((name, kind, offset, size))
    _, _, names_at, names_size = sections[shstrndx]
    names = data[names_at : names_at + names_size]

    def name_of(at: int) -> str:
        end = names.index(b"\0", at)
        return names[at:end].decode()

    kernels = []
    for name_at, kind, offset, size in sections:
        name = name_of(name_at)
        if not name.startswith(_TEXT_PREFIX) or kind == _SHT_NOBITS:
            continue
        if size % INSTRUCTION_BYTES or offset + size > len(data):
            raise CubinError(f"{name}: code size {size} is not whole instructions")
        kernels.append(Kernel(name[len(_TEXT_PREFIX) :], offset, data[offset : offset + size]))
    return Cubin(_sm_of(flags, abi_version), tuple(kernels))


def patch_word(data: bytes, kernel: Kernel, offset: int, hi: int) -> bytes:
    """A copy of the cubin with the upper qword at ``offset`` of ``kernel`` replaced."""
    at = kernel.file_offset + offset + 8
    return data[:at] + struct.pack("<Q", hi) + data[at + 8 :]
