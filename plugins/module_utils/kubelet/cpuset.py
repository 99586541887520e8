# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""CPU sets: the Linux CPU-list syntax ("0-3,8,10-11") and hex masks ("ff,ffffffff").

Parsing follows ``k8s.io/utils/cpuset.Parse`` exactly (so error texts match the kubelet's), with one
addition: CPU ids above ``MAX_CPU_ID`` are refused instead of building enormous sets.
"""

from __future__ import annotations

import functools
import re
from typing import AbstractSet, FrozenSet, Iterable, Iterator, List, Optional, Tuple, Union

from ..errors import CPUSetError
from .options import go_quote

# Linux supports at most 8192 CPUs (NR_CPUS); leave generous room for other architectures.
MAX_CPU_ID = 65535
_GO_INT64_MAX = (1 << 63) - 1
_ATOI = re.compile(r"[+-]?[0-9]+\Z")
_HEX_WORD = re.compile(r"[0-9a-fA-F]{1,8}\Z")


def _atoi(text: str, piece: str, whole: str) -> int:
    """Go's strconv.Atoi (base 10, optional sign), then the CPU id range check."""
    if not _ATOI.match(piece):
        raise CPUSetError(whole, "strconv.Atoi: parsing %s: invalid syntax" % go_quote(piece))
    value = int(piece)
    if abs(value) > _GO_INT64_MAX:
        raise CPUSetError(whole, "strconv.Atoi: parsing %s: value out of range" % go_quote(piece))
    if value > MAX_CPU_ID:
        raise CPUSetError(whole, 'CPU id %d in "%s" exceeds the supported maximum %d' % (value, text, MAX_CPU_ID))
    return value


class CPUSet:
    """An immutable set of non-negative CPU ids; ``str()`` gives the canonical CPU list."""

    __slots__ = ("_cpus", "_text")
    _cpus: FrozenSet[int]
    _text: str  # the canonical CPU list, formatted on first use

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        members = frozenset(cpus)
        for cpu in members:
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
                raise CPUSetError(repr(cpu), "a CPU id must be a non-negative integer")
        object.__setattr__(self, "_cpus", members)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the Linux CPU-list syntax; "" is the empty set. Raises CPUSetError. Sets are immutable, so the same
        text gives the same set (its canonical text formatted once): a pass that reads one shared pool back for 250
        containers parses and formats it once."""
        if not isinstance(text, str):
            raise CPUSetError(repr(text), "a CPU list must be a string")
        return _parse(text) if cls is CPUSet else cls._parse_new(text)

    @classmethod
    def _parse_new(cls, text: str) -> CPUSet:
        if text == "":
            return EMPTY
        result = set()
        for piece in text.split(","):
            bounds = piece.split("-", 1)
            if len(bounds) == 1:
                result.add(_atoi(text, bounds[0], text))
                continue
            start = _atoi(text, bounds[0], text)
            end = _atoi(text, bounds[1], text)
            if start > end:
                raise CPUSetError(text, "invalid range %s (%d > %d)" % (go_quote(piece), start, end))
            if start < 0:
                raise CPUSetError(text, 'negative CPU id in range "%s"' % piece)
            result.update(range(start, end + 1))
        return cls._trusted(result)

    @classmethod
    def parse_mask(cls, text: str) -> CPUSet:
        """Parse a hex mask as in /proc/<pid>/status ``Cpus_allowed`` ("ff,ffffffff")."""
        if not isinstance(text, str):
            raise CPUSetError(repr(text), "a CPU mask must be a string")
        words = text.strip().split(",")
        cpus = []
        for index, word in enumerate(reversed(words)):
            if not _HEX_WORD.match(word):
                raise CPUSetError(text, 'invalid mask word "%s" (1 to 8 hex digits expected)' % word)
            value = int(word, 16)
            bit = 0
            while value:
                if value & 1:
                    cpu = index * 32 + bit
                    if cpu > MAX_CPU_ID:
                        raise CPUSetError(text, "CPU id %d exceeds the supported maximum %d" % (cpu, MAX_CPU_ID))
                    cpus.append(cpu)
                value >>= 1
                bit += 1
        return cls._trusted(cpus)

    @classmethod
    def _trusted(cls, cpus: Iterable[int]) -> CPUSet:
        """Build from ids already known to be valid (internal fast path)."""
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_cpus", frozenset(cpus))
        return obj

    # --- formatting ---------------------------------------------------------------------------
    def ranges(self) -> List[Tuple[int, int]]:
        """Maximal runs of consecutive ids as (first, last) pairs, ascending."""
        runs: List[Tuple[int, int]] = []
        for cpu in sorted(self._cpus):
            if runs and runs[-1][1] == cpu - 1:
                runs[-1] = (runs[-1][0], cpu)
            else:
                runs.append((cpu, cpu))
        return runs

    def __str__(self) -> str:
        try:
            return self._text
        except AttributeError:
            text = ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in self.ranges())
            object.__setattr__(self, "_text", text)
            return text

    def to_mask(self, width: Optional[int] = None) -> str:
        """Format as a Linux hex mask: 32-bit words, most significant first, comma separated.

        ``width`` is the number of CPUs the mask covers (the kernel's nr_cpu_ids); without it the mask
        is as short as the highest member allows.
        """
        top = max(self._cpus) + 1 if self._cpus else 1
        nbits = max(width or 0, top)
        value = 0
        for cpu in self._cpus:
            value |= 1 << cpu
        nwords = (nbits + 31) // 32
        words = [(value >> (32 * i)) & 0xFFFFFFFF for i in reversed(range(nwords))]
        first_digits = max(1, ((nbits - 32 * (nwords - 1)) + 3) // 4)
        parts = ["%0*x" % (first_digits, words[0])] + ["%08x" % w for w in words[1:]]
        return ",".join(parts)

    def __repr__(self) -> str:
        return 'CPUSet("%s")' % self

    # --- set algebra --------------------------------------------------------------------------
    def union(self, *others: CPUSetLike) -> CPUSet:
        result = set(self._cpus)
        for other in others:
            result.update(_members(other))
        return CPUSet._trusted(result)

    def intersection(self, other: CPUSetLike) -> CPUSet:
        return CPUSet._trusted(self._cpus.intersection(_members(other)))

    def difference(self, other: CPUSetLike) -> CPUSet:
        return CPUSet._trusted(self._cpus.difference(_members(other)))

    def symmetric_difference(self, other: CPUSetLike) -> CPUSet:
        return CPUSet._trusted(self._cpus.symmetric_difference(_members(other)))

    __or__ = union
    __and__ = intersection
    __sub__ = difference
    __xor__ = symmetric_difference

    def issubset(self, other: CPUSetLike) -> bool:
        return self._cpus.issubset(_members(other))

    def issuperset(self, other: CPUSetLike) -> bool:
        return self._cpus.issuperset(_members(other))

    def isdisjoint(self, other: CPUSetLike) -> bool:
        return self._cpus.isdisjoint(_members(other))

    # --- container protocol -------------------------------------------------------------------
    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._cpus))

    def __len__(self) -> int:
        return len(self._cpus)

    def __bool__(self) -> bool:
        return bool(self._cpus)

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._cpus

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CPUSet):
            return self._cpus == other._cpus
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._cpus)

    def as_frozenset(self) -> FrozenSet[int]:
        return self._cpus

    def sorted(self) -> List[int]:
        return sorted(self._cpus)


CPUSetLike = Union[CPUSet, AbstractSet[int]]


def _members(other: CPUSetLike) -> AbstractSet[int]:
    return other._cpus if isinstance(other, CPUSet) else other


EMPTY = CPUSet._trusted(())


_parse = functools.lru_cache(maxsize=4096)(CPUSet._parse_new)
