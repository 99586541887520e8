# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The reservation planner: which CPUs to keep for the system (``reservedSystemCPUs``).

The kubelet, given only a count, reserves ``takeByTopology(allCPUs, count)``: lowest sockets, NUMA nodes and
cores first, whole cores where the count allows. The planner does the same, and can also reserve a count per
NUMA node (one housekeeping core on each node) or the complement of the kernel's isolcpus set.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import AllocationError, PolicyError
from .cpuset import CPUSet
from .options import PolicyOptions
from .policy import take_by_topology
from .topology import Topology

MODES = ("count", "per_numa", "isolcpus_complement")


def _whole_cores(topo: Topology, count: int) -> int:
    per_core = max(topo.cpus_per_core, 1)
    return -(-count // per_core) * per_core


def _take(topo: Topology, options: PolicyOptions, cpus: CPUSet, count: int, where: str) -> CPUSet:
    try:
        return take_by_topology(topo, options, cpus.as_frozenset(), count)
    except AllocationError:
        raise PolicyError("cannot reserve %d CPUs on %s: only %d CPUs there (%s)"
                          % (count, where, len(cpus), cpus or "none")) from None


def plan_reservation(topo: Topology, count: Optional[int] = None, *, per_numa: Optional[int] = None,
                     isolcpus_complement: bool = False, whole_cores: bool = True,
                     options: Optional[PolicyOptions] = None) -> Dict[str, Any]:
    """The reserved CPUs and how they were chosen (exactly one of the three modes).

    ``whole_cores`` rounds each count up to whole physical cores, so no reserved hyperthread shares a core with
    a pinned container; off, an odd count on an SMT machine leaves a half core as the kubelet would.
    """
    chosen = [mode for mode, on in zip(MODES, (count is not None, per_numa is not None, isolcpus_complement)) if on]
    if len(chosen) != 1:
        raise PolicyError("the reservation planner needs exactly one of count, per_numa and isolcpus_complement, "
                          "got %s" % (", ".join(chosen) or "none"))
    opts = options or PolicyOptions()
    notes: List[str] = []
    if isolcpus_complement:
        if not topo.isolated:
            raise PolicyError("isolcpus_complement: the kernel isolates no CPUs on this node (isolcpus is empty)")
        reserved = topo.all_cpus.difference(topo.isolated)
        if not reserved:
            raise PolicyError("isolcpus_complement: every online CPU (%s) is isolated, none is left to reserve"
                              % topo.all_cpus)
        if whole_cores and topo.core_siblings(reserved) != reserved:
            notes.append("the isolcpus complement %s splits cores %s" % (reserved, topo.core_siblings(reserved)))
    else:
        wanted = count if count is not None else per_numa
        if wanted is None or wanted < 1:
            raise PolicyError("the number of CPUs to reserve must be at least 1, got %s" % wanted)
        rounded = _whole_cores(topo, wanted) if whole_cores else wanted
        if rounded != wanted:
            notes.append("%d CPUs rounded up to %d (whole cores of %d CPUs)" % (wanted, rounded, topo.cpus_per_core))
        if count is not None:
            reserved = _take(topo, opts, topo.all_cpus, rounded, "this node")
        else:
            reserved = CPUSet().union(*(
                _take(topo, opts, topo.cpus_in_numa_nodes(node), rounded, "NUMA node %d" % node)
                for node in sorted(topo.numa_cpus)))
    per_node = {str(node): str(reserved.intersection(topo.cpus_in_numa_nodes(node))) for node in sorted(topo.numa_cpus)}
    return {"mode": chosen[0], "reserved_cpus": str(reserved), "num_reserved": len(reserved),
            "reserved_per_numa": per_node, "allocatable_cpus": str(topo.all_cpus.difference(reserved)),
            "notes": notes}
