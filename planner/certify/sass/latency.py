"""The latency model: which instructions deliver results through a barrier,
and how many cycles the others need before a consumer may read them.

The numbers are data (``latencies.json``), mined from ptxas output by
``scripts/sass_latencies.py``; each architecture's entry records the compiler,
the date and the method.  A fixed latency is W(producer) - R(reader): the
cycles until the producer's result is written, less the cycles the reader
takes its operands late (zero for all but a few readers).  Opcodes are keys
with their modifiers: the longest key that is a dotted prefix of an
instruction's opcode applies, so ``F2F.F64.F32`` can differ from ``F2F``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Any, Mapping

GUARD = "guard"  # the producer's latency to a reader using the result as its guard
ANY = "*"  # the producer's latency W to any other reader


def consumer_key(opcode: str) -> str:
    """The key a reader is measured under: its base opcode, except the
    64-bit IMAD, which ptxas schedules as a reader with latencies of its own."""
    return "IMAD.WIDE" if opcode.startswith("IMAD.WIDE") else opcode.split(".", 1)[0]


def prefix_lookup(table: Mapping[str, Any], opcode: str) -> Any | None:
    """The entry of the longest dotted prefix of ``opcode`` in ``table``."""
    parts = opcode.split(".")
    for end in range(len(parts), 0, -1):
        entry = table.get(".".join(parts[:end]))
        if entry is not None:
            return entry
    return None


@dataclass(frozen=True)
class ArchModel:
    arch: str
    provenance: Mapping[str, str]
    barrier_setup: int  # cycles after issue before a wait-mask wait sees the barrier
    depbar_setup: int  # the same for DEPBAR
    variable: frozenset[str]  # opcode keys whose results arrive through a barrier
    in_order: tuple[frozenset[str], ...]  # classes whose results retire in issue order
    operand_order: tuple[frozenset[str], ...]  # classes that read their operands in issue order
    fixed: Mapping[str, Mapping[str, int]]  # producer key -> {"*": W, "guard": cycles}
    readers: Mapping[str, int]  # reader key -> R, the cycles it takes operands late

    def is_variable(self, opcode: str) -> bool:
        return self._lookup("variable", self._variable_keys, opcode) is not None

    def has_fixed(self, opcode: str) -> bool:
        return self._lookup("fixed", self.fixed, opcode) is not None

    def in_order_class(self, opcode: str) -> int | None:
        """Index of the in-order class ``opcode`` belongs to, if any."""
        return self._lookup("in_order", self._in_order_keys, opcode)

    def operand_order_class(self, opcode: str) -> int | None:
        """Index of the class ``opcode`` reads its operands in issue order with, if any."""
        return self._lookup("operand_order", self._operand_order_keys, opcode)

    def fixed_latency(self, producer: str, consumer: str, as_guard: bool) -> int | None:
        """Cycles from ``producer``'s issue until ``consumer`` may read its result:
        W(producer) - R(consumer), or the producer's guard latency when the
        result is the consumer's guard predicate.  None when ``producer`` has
        no fixed latency in the model."""
        row = self._lookup("fixed", self.fixed, producer)
        if row is None:
            return None
        if as_guard:
            return row.get(GUARD, row[ANY])
        return max(1, row[ANY] - self.readers.get(consumer_key(consumer), 0))

    def longest_fixed(self, producer: str) -> int:
        """The most cycles any consumer of ``producer`` may need."""
        row = self._lookup("fixed", self.fixed, producer)
        return max(row.values()) if row else 0

    def _lookup(self, table: str, entries: Mapping[str, Any], opcode: str) -> Any | None:
        key = (table, opcode)
        if key not in self._memo:
            self._memo[key] = prefix_lookup(entries, opcode)
        return self._memo[key]

    @cached_property
    def _memo(self) -> dict[tuple[str, str], Any]:
        return {}

    @cached_property
    def _variable_keys(self) -> dict[str, bool]:
        return {key: True for key in self.variable}

    @cached_property
    def _in_order_keys(self) -> dict[str, int]:
        return _class_of_member(self.in_order)

    @cached_property
    def _operand_order_keys(self) -> dict[str, int]:
        return _class_of_member(self.operand_order)


def _class_of_member(classes: tuple[frozenset[str], ...]) -> dict[str, int]:
    """Each opcode key of the classes -> the index of its class."""
    return {key: index for index, members in enumerate(classes) for key in members}


@dataclass(frozen=True)
class LatencyModel:
    archs: Mapping[str, ArchModel]
    digest: str  # SHA-256 of the data file: part of every cache key

    def arch(self, arch: str) -> ArchModel:
        try:
            return self.archs[arch]
        except KeyError:
            raise KeyError(f"no latency model for {arch} (have {sorted(self.archs)})") from None


def parse_model(text: str) -> LatencyModel:
    data = json.loads(text)
    archs = {}
    for arch, entry in data["archs"].items():
        archs[arch] = ArchModel(
            arch=arch,
            provenance=dict(entry["provenance"]),
            barrier_setup=int(entry["barrier_setup"]),
            depbar_setup=int(entry["depbar_setup"]),
            variable=frozenset(entry["variable"]),
            in_order=tuple(frozenset(members) for members in entry["in_order"]),
            operand_order=tuple(frozenset(members) for members in entry["operand_order"]),
            fixed={producer: dict(row) for producer, row in entry["fixed"].items()},
            readers=dict(entry["readers"]),
        )
    return LatencyModel(archs, hashlib.sha256(text.encode()).hexdigest())


@cache
def default_model() -> LatencyModel:
    text = resources.files(__package__).joinpath("latencies.json").read_text()
    return parse_model(text)
