# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The static policy's topology hints (GetTopologyHints / GetPodTopologyHints), as HINTS.md specifies.

A hint is a NUMA node combination the request fits in and whether it is preferred. ``None`` (the kubelet's nil:
no preference, a request of 0) and ``[]`` (nothing can satisfy the request) are kept apart.
"""

from __future__ import annotations

import weakref
from itertools import combinations
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .cpuset import EMPTY, CPUSet
from .options import PolicyOptions
from .topology import Topology


class TopologyHint(NamedTuple):
    """A NUMA affinity (sorted node ids; None is the nil bitmask, "any node") and whether it is preferred."""

    affinity: Optional[Tuple[int, ...]]
    preferred: bool

    def to_dict(self) -> Dict[str, object]:
        return {"numa_affinity": None if self.affinity is None else list(self.affinity), "preferred": self.preferred}


Hints = Optional[List[TopologyHint]]


def iterate_masks(nodes: Sequence[int]) -> Iterator[Tuple[int, ...]]:
    """bitmask.IterateBitMasks: every non-empty combination, by size, then lexicographic by node id."""
    ordered = sorted(nodes)
    for size in range(1, len(ordered) + 1):
        yield from combinations(ordered, size)


class _Machine:
    """Per NUMA node, how many CPUs the machine has there and which sockets they sit on (fixed per topology)."""

    def __init__(self, topo: Topology) -> None:
        self.nodes = sorted(topo.numa_cpus)
        self.cpus = {node: topo.numa_cpus[node] for node in self.nodes}
        self.total = {node: len(self.cpus[node]) for node in self.nodes}
        self.sockets = {node: frozenset(topo.loc[c][1] for c in self.cpus[node]) for node in self.nodes}
        self.node_of = {cpu: loc[2] for cpu, loc in topo.loc.items()}
        sockets = len(topo.socket_cpus)
        self.numa_per_socket = len(self.nodes) // sockets if sockets else 0
        self.masks = list(iterate_masks(self.nodes))


_MACHINES: weakref.WeakKeyDictionary[Topology, _Machine] = weakref.WeakKeyDictionary()


def _machine_for(topo: Topology) -> _Machine:
    """The per-node counts, built once per topology (the agent asks for hints on every admission)."""
    machine = _MACHINES.get(topo)
    if machine is None:
        machine = _MACHINES[topo] = _Machine(topo)
    return machine


def generate(topo: Topology, available: CPUSet, reusable: CPUSet, count: int, *,
             align_by_socket: bool = False, machine: Optional[_Machine] = None) -> List[TopologyHint]:
    """generateCPUTopologyHints: every NUMA combination the request fits in, preferred when it is one of the
    narrowest the machine could hold it in (or, with align-by-socket, spans the fewest sockets that could).

    Counts per node replace the kubelet's set operations: the same answers, without building a set per mask.
    """
    info = machine or _machine_for(topo)
    free = {node: len(available.intersection(info.cpus[node])) for node in info.nodes}
    reusable_nodes = {info.node_of.get(cpu, -1) for cpu in reusable}
    min_affinity = len(info.nodes)
    found: List[Tuple[int, ...]] = []
    for mask in info.masks:
        if sum(info.total[n] for n in mask) >= count and len(mask) < min_affinity:
            min_affinity = len(mask)
        if not reusable_nodes.issubset(mask):
            continue
        if len(reusable) + sum(free[n] for n in mask) >= count:
            found.append(mask)
    min_sockets = -(-min_affinity // info.numa_per_socket) if info.numa_per_socket else 0
    hints = []
    for mask in found:
        preferred = len(mask) == min_affinity
        if align_by_socket and info.numa_per_socket > 0 and not preferred:
            preferred = len(frozenset().union(*(info.sockets[n] for n in mask))) == min_sockets
        hints.append(TopologyHint(mask, preferred))
    return hints


def container_hints(topo: Topology, options: PolicyOptions, available: CPUSet, count: int, *,
                    reusable: CPUSet = EMPTY, assigned: Optional[CPUSet] = None) -> Hints:
    """GetTopologyHints for one container (``assigned``: the CPUs it already holds, None when it holds none)."""
    if count == 0:
        return None
    if assigned is not None:
        if len(assigned) != count:
            return []
        return generate(topo, assigned, EMPTY, count, align_by_socket=options.align_by_socket)
    return generate(topo, available, reusable, count, align_by_socket=options.align_by_socket)


def pod_hints(topo: Topology, options: PolicyOptions, available: CPUSet, count: int, *,
              reusable: CPUSet = EMPTY, assigned: Sequence[Tuple[int, CPUSet]] = ()) -> Hints:
    """GetPodTopologyHints (``assigned``: per container of the pod holding CPUs, its own request and its CPUs)."""
    if count == 0:
        return None
    held = EMPTY
    for request, cpus in assigned:
        if len(cpus) != request:
            return []
        held = held.union(cpus)
    if len(held) == count:
        return generate(topo, held, EMPTY, count, align_by_socket=options.align_by_socket)
    return generate(topo, available, reusable.union(held), count,
                    align_by_socket=options.align_by_socket)


def hints_document(hints: Hints) -> Dict[str, object]:
    return {"hints": None if hints is None else [h.to_dict() for h in hints]}
