"""What a cubin says about one kernel's resources, read from its ELF sections.

Static shared memory is the size of `.nv.shared.<kernel>`, less the 1 KiB
that sm_90 cubins (those with a `.nv.shared.reserved.0` section) reserve there
for the system whenever the kernel uses shared memory. The rest comes from
the EIATTR records of `.nv.info` (per-function registers and frame size) and
`.nv.info.<kernel>` (maximum threads, parameter layout, parameter bank size).
Each record is a format byte, an attribute byte, then nothing (format 1), a
byte (2), a 16-bit value (3) or a 16-bit length and that many bytes (4).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_FORMAT_NONE, _FORMAT_BYTE, _FORMAT_HALF, _FORMAT_SIZED = 1, 2, 3, 4
_MAX_THREADS, _FRAME_SIZE, _KPARAM_INFO, _CBANK_PARAM_SIZE, _REGCOUNT = 0x05, 0x11, 0x17, 0x19, 0x2F
_SYSTEM_SHARED = 1024
_SHT_SYMTAB = 2


class CubinInfoError(ValueError):
    """The cubin lacks a section or record the resources are read from."""


@dataclass(frozen=True)
class Parameter:
    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class KernelInfo:
    name: str
    registers: int
    static_shared: int           # bytes of __shared__ the kernel declares
    frame_bytes: int             # local memory per thread (stack, spills)
    max_threads: tuple[int, int, int] | None  # from __launch_bounds__
    parameters: tuple[Parameter, ...]  # by ordinal
    parameter_bytes: int


@dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    offset: int
    size: int
    link: int


def _sections(data: bytes) -> list[_Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinInfoError("not a little-endian ELF64 cubin")
    (shoff,) = struct.unpack_from("<Q", data, 40)
    entry, count, names_index = struct.unpack_from("<HHH", data, 58)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entry) for i in range(count)]
    names = raw[names_index]
    table = data[names[4]: names[4] + names[5]]

    def name(at: int) -> str:
        return table[at: table.index(b"\0", at)].decode()

    return [_Section(name(r[0]), r[1], r[4], r[5], r[6]) for r in raw]


def _records(data: bytes, section: _Section):
    """(attribute, payload) of each EIATTR record in an .nv.info section;
    records start on 4-byte boundaries."""
    at, end = 0, section.size
    while at < end:
        base = section.offset + at
        form, attribute = data[base], data[base + 1]
        if form == _FORMAT_SIZED:
            (length,) = struct.unpack_from("<H", data, base + 2)
            yield attribute, data[base + 4: base + 4 + length]
            at += 4 + length
        elif form == _FORMAT_HALF:
            yield attribute, data[base + 2: base + 4]
            at += 4
        elif form == _FORMAT_BYTE:
            yield attribute, data[base + 2: base + 3]
            at += 3
        elif form == _FORMAT_NONE:
            yield attribute, b""
            at += 2
        else:
            raise CubinInfoError(f"{section.name}: unknown record format {form} at {at}")
        at = -(-at // 4) * 4


def _symbol_index(data: bytes, sections: list[_Section], name: str) -> int:
    symtab = next((s for s in sections if s.kind == _SHT_SYMTAB), None)
    if symtab is None:
        raise CubinInfoError("no symbol table")
    strings = sections[symtab.link]
    for index in range(symtab.size // 24):
        (at,) = struct.unpack_from("<I", data, symtab.offset + index * 24)
        start = strings.offset + at
        if data[start: data.index(b"\0", start)].decode() == name:
            return index
    raise CubinInfoError(f"no symbol {name!r}")


def kernel_info(cubin: bytes, name: str = "image") -> KernelInfo:
    """The resources of kernel `name` in the cubin."""
    sections = _sections(cubin)
    by_name = {s.name: s for s in sections}
    text = by_name.get(f".text.{name}")
    info = by_name.get(f".nv.info.{name}")
    if text is None or info is None:
        raise CubinInfoError(f"no kernel {name!r} in the cubin")
    shared = by_name.get(f".nv.shared.{name}")

    per_function = {}
    if ".nv.info" in by_name:
        symbol = _symbol_index(cubin, sections, name)
        for attribute, payload in _records(cubin, by_name[".nv.info"]):
            owner, value = struct.unpack_from("<II", payload) if len(payload) == 8 else (None, None)
            if owner == symbol:
                per_function[attribute] = value
    if _REGCOUNT not in per_function:
        raise CubinInfoError(f"no register count for {name!r}")
    shared_bytes = shared.size if shared else 0
    if shared_bytes and ".nv.shared.reserved.0" in by_name:
        shared_bytes -= _SYSTEM_SHARED

    max_threads, parameters, parameter_bytes = None, [], 0
    for attribute, payload in _records(cubin, info):
        if attribute == _MAX_THREADS:
            max_threads = struct.unpack_from("<III", payload)
        elif attribute == _KPARAM_INFO:
            _, ordinal, offset, flags = struct.unpack_from("<IHHI", payload)
            parameters.append(Parameter(ordinal, offset, flags >> 18 & 0x3FFF))
        elif attribute == _CBANK_PARAM_SIZE:
            (parameter_bytes,) = struct.unpack_from("<H", payload)
    return KernelInfo(name, per_function[_REGCOUNT], shared_bytes, per_function.get(_FRAME_SIZE, 0), max_threads,
                      tuple(sorted(parameters, key=lambda p: p.ordinal)), parameter_bytes)
