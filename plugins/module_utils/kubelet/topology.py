# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The CPU topology model and its JSON form (``kubecpu.topology/v1``, see TOPOLOGY.md).

Only online CPUs take part in allocation. The kubelet's counters (NumCPUs, NumCores, NumSockets,
NumNUMANodes, NumUncoreCache) are derived from the online CPUs as the kubelet's discovery declares
them; test fixtures may declare other values, which the allocator then uses where the kubelet does.
"""

from __future__ import annotations

import json
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from ..errors import CPUSetError, TopologyError
from .cpuset import EMPTY, CPUSet

FORMAT = "kubecpu.topology/v1"
SOURCES = ("sysfs", "lscpu", "cpuinfo", "file")


class CPUInfo(NamedTuple):
    """One logical CPU (hardware thread)."""

    cpu: int
    core: int
    socket: int
    numa: int
    uncore: int
    die: int = 0
    online: bool = True


class Counters(NamedTuple):
    """The kubelet's declared topology counters."""

    num_cpus: int
    num_cores: int
    num_sockets: int
    num_numa: int
    num_uncore: int


def _index(cpus: Iterable[CPUInfo], attr: str) -> Dict[int, FrozenSet[int]]:
    groups: Dict[int, Set[int]] = {}
    for info in cpus:
        groups.setdefault(getattr(info, attr), set()).add(info.cpu)
    return {key: frozenset(members) for key, members in groups.items()}


class Topology:
    """A node's CPU topology with the lookups the allocator needs.

    Unit maps (``core_cpus``, ``socket_cpus``, ``numa_cpus``, ``uncore_cpus``) hold the online CPUs
    of each unit in the full topology. ``loc[cpu]`` is (core, socket, numa, uncore).
    """

    def __init__(self, cpus: Sequence[CPUInfo], isolated: CPUSet = EMPTY, nohz_full: CPUSet = EMPTY,
                 source: str = "file", counters: Optional[Counters] = None, *,
                 numa_distances: Optional[Dict[int, List[int]]] = None) -> None:
        seen: Dict[int, CPUInfo] = {}
        for info in cpus:
            if info.cpu in seen:
                raise TopologyError("CPU %d is listed twice in the topology" % info.cpu)
            seen[info.cpu] = info
        self.all_cpus_info: Tuple[CPUInfo, ...] = tuple(sorted(seen.values()))
        self.cpus_info: Tuple[CPUInfo, ...] = tuple(i for i in self.all_cpus_info if i.online)
        if not self.cpus_info:
            raise TopologyError("the topology has no online CPU")
        if source not in SOURCES:
            raise TopologyError('unknown topology source "%s" (expected one of %s)' % (source, ", ".join(SOURCES)))
        self.isolated = isolated
        self.nohz_full = nohz_full
        self.source = source
        self.numa_distances = numa_distances  # node -> its /sys/devices/system/node/node<N>/distance row
        online = self.cpus_info
        self.loc: Dict[int, Tuple[int, int, int, int]] = {
            i.cpu: (i.core, i.socket, i.numa, i.uncore) for i in online}
        self.core_cpus = _index(online, "core")
        self.socket_cpus = _index(online, "socket")
        self.numa_cpus = _index(online, "numa")
        self.uncore_cpus = _index(online, "uncore")
        self.all_cpus = CPUSet._trusted(self.loc)
        self.offline_cpus = CPUSet._trusted(i.cpu for i in self.all_cpus_info if not i.online)
        derived = Counters(len(online), len(self.core_cpus), len(self.socket_cpus), len(self.numa_cpus),
                           len(self.uncore_cpus))
        self.derived_counters = derived
        self.counters = counters if counters is not None else derived

    # --- the kubelet's derived quantities (integer division on the declared counters) ---------
    @property
    def num_cpus(self) -> int:
        return self.counters.num_cpus

    @property
    def num_cores(self) -> int:
        return self.counters.num_cores

    @property
    def num_sockets(self) -> int:
        return self.counters.num_sockets

    @property
    def num_numa(self) -> int:
        return self.counters.num_numa

    @property
    def num_uncore(self) -> int:
        return self.counters.num_uncore

    @property
    def cpus_per_core(self) -> int:
        c = self.counters
        return c.num_cpus // c.num_cores if c.num_cores else 0

    @property
    def cpus_per_socket(self) -> int:
        c = self.counters
        return c.num_cpus // c.num_sockets if c.num_sockets else 0

    @property
    def cpus_per_uncore(self) -> int:
        c = self.counters
        return c.num_cpus // c.num_uncore if c.num_uncore else 0

    # --- queries (all over online CPUs) --------------------------------------------------------
    def _cpus_in(self, index: Mapping[int, FrozenSet[int]], ids: Iterable[int]) -> CPUSet:
        out: Set[int] = set()
        for unit in ids:
            out.update(index.get(unit, ()))
        return CPUSet._trusted(out)

    def cpus_in_sockets(self, *ids: int) -> CPUSet:
        return self._cpus_in(self.socket_cpus, ids)

    def cpus_in_numa_nodes(self, *ids: int) -> CPUSet:
        return self._cpus_in(self.numa_cpus, ids)

    def sockets_in_numa_nodes(self, *ids: int) -> List[int]:
        wanted = set(ids)
        return sorted({i.socket for i in self.cpus_info if i.numa in wanted})

    def core_siblings(self, cpus: Iterable[int]) -> CPUSet:
        """All CPUs sharing a core with any of ``cpus`` (the kubelet's reservedPhysicalCPUs)."""
        out: Set[int] = set()
        for cpu in cpus:
            if cpu not in self.loc:
                raise TopologyError("unknown CPU ID: %d" % cpu)
            out.update(self.core_cpus[self.loc[cpu][0]])
        return CPUSet._trusted(out)

    def whole_core_cpus(self, available: Iterable[int]) -> CPUSet:
        """CPUs of the cores all of whose CPUs are in ``available``."""
        avail = set(available)
        out: Set[int] = set()
        for members in self.core_cpus.values():
            if members <= avail:
                out.update(members)
        return CPUSet._trusted(out)

    def uncore_ids(self, cpus: Iterable[int]) -> List[int]:
        return sorted({self.loc[c][3] for c in cpus if c in self.loc})

    def summary(self) -> Dict[str, int]:
        """Derived counts as reports print them."""
        d = self.derived_counters
        return {"cpus": d.num_cpus, "cores": d.num_cores, "sockets": d.num_sockets, "numa_nodes": d.num_numa,
                "uncore_caches": d.num_uncore, "threads_per_core": d.num_cpus // d.num_cores}

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {
            "format": FORMAT,
            "cpus": [{"cpu": i.cpu, "core": i.core, "socket": i.socket, "die": i.die, "numa": i.numa,
                      "uncore": i.uncore, "online": i.online} for i in self.all_cpus_info],
            "isolated": str(self.isolated),
            "nohz_full": str(self.nohz_full),
            "source": self.source,
        }
        if self.numa_distances is not None:
            doc["numa_distances"] = {str(node): list(row) for node, row in sorted(self.numa_distances.items())}
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, doc: Any, where: str = "topology") -> Topology:
        if not isinstance(doc, dict):
            raise TopologyError("%s: a JSON object is expected, got %s" % (where, type(doc).__name__))
        fmt = doc.get("format", FORMAT)
        if fmt != FORMAT:
            raise TopologyError('%s: unsupported format "%s" (expected "%s")' % (where, fmt, FORMAT))
        entries = doc.get("cpus")
        if not isinstance(entries, list) or not entries:
            raise TopologyError('%s: "cpus" must be a non-empty list' % where)
        cpus = [_cpu_from_dict(entry, "%s: cpus[%d]" % (where, n)) for n, entry in enumerate(entries)]
        isolated = _cpuset_field(doc, "isolated", where)
        nohz_full = _cpuset_field(doc, "nohz_full", where)
        source = doc.get("source", "file")
        if source not in SOURCES:
            raise TopologyError('%s: unknown "source" %r (expected one of %s)' % (where, source, ", ".join(SOURCES)))
        distances = _distances_field(doc, where)
        try:
            return cls(cpus, isolated=isolated, nohz_full=nohz_full, source=source, numa_distances=distances)
        except TopologyError as exc:
            raise TopologyError("%s: %s" % (where, exc)) from None

    @classmethod
    def from_json(cls, text: str, where: str = "topology") -> Topology:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise TopologyError("%s: not valid JSON: %s" % (where, exc)) from None
        return cls.from_dict(doc, where)

    @classmethod
    def load(cls, path: str) -> Topology:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise TopologyError("cannot read topology file %s: %s" % (path, exc.strerror or exc)) from None
        return cls.from_json(text, path)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.to_json())


def _distances_field(doc: Mapping[str, Any], where: str) -> Optional[Dict[int, List[int]]]:
    raw = doc.get("numa_distances")
    return None if raw is None else parse_numa_distances(raw, where)


def parse_numa_distances(raw: Any, where: str = "numa_distances") -> Dict[int, List[int]]:
    """{"0": [10, 21], "1": [21, 10]}: NUMA node id -> its distance row (indexed by node id), every value checked."""
    if not isinstance(raw, dict):
        raise TopologyError('%s: "numa_distances" must be an object of NUMA node id -> distance row' % where)
    rows: Dict[int, List[int]] = {}
    for key, row in raw.items():
        if not str(key).isdigit() or not isinstance(row, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in row):
            raise TopologyError('%s: "numa_distances" of node %r must be a list of non-negative integers'
                                % (where, key))
        rows[int(key)] = row
    return rows


def _int_field(entry: Mapping[str, Any], key: str, where: str, default: Optional[int] = None) -> int:
    value = entry.get(key, default)
    if value is None:
        if default is None:
            raise TopologyError('%s: "%s" is required' % (where, key))
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TopologyError('%s: "%s" must be a non-negative integer, got %r' % (where, key, value))
    return value


def _cpu_from_dict(entry: Any, where: str) -> CPUInfo:
    if not isinstance(entry, dict):
        raise TopologyError("%s: a JSON object is expected" % where)
    cpu = _int_field(entry, "cpu", where)
    socket = _int_field(entry, "socket", where)
    online = entry.get("online", True)
    if not isinstance(online, bool):
        raise TopologyError('%s: "online" must be true or false, got %r' % (where, online))
    return CPUInfo(cpu=cpu, core=_int_field(entry, "core", where), socket=socket,
                   numa=_int_field(entry, "numa", where, 0), uncore=_int_field(entry, "uncore", where, socket),
                   die=_int_field(entry, "die", where, 0), online=online)


def _cpuset_field(doc: Mapping[str, Any], key: str, where: str) -> CPUSet:
    value = doc.get(key, "")
    if value is None:
        return EMPTY
    if not isinstance(value, str):
        raise TopologyError('%s: "%s" must be a CPU list string, got %r' % (where, key, value))
    try:
        return CPUSet.parse(value)
    except CPUSetError as exc:
        raise TopologyError('%s: "%s": %s' % (where, key, exc)) from None
