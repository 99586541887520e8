# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet CPU manager policies, ``static`` and ``none`` (ALGORITHM.md sections 3-8).

Policies are pure: they act on a ``CPUState`` passed in; persisting it is the store's job. Both implement the
``Policy`` protocol, topology hints included, so their callers never ask which one they hold.
"""

from __future__ import annotations

from typing import AbstractSet, Iterable, Mapping, NamedTuple, Optional, Protocol, Sequence, Union

from ..errors import AllocationError, OptionError, PolicyError, SMTAlignmentError, StateError, TopologyError
from .cpu_assignment import PACKED, SPREAD, take_by_topology_distributed, take_by_topology_packed
from .cpuset import EMPTY, CPUSet
from .hints import Hints, container_hints, pod_hints
from .options import PolicyOptions, go_map_repr, parse_options, validate_for_machine
from .pod import Pod
from .state import CPUState
from .topology import Topology

# cpu_manager.go's refusals of the static policy (ALGORITHM.md section 3): a node-allocatable CPU reservation of zero,
# and none at all (neither kubeReserved nor systemReserved names cpu, and no reservedSystemCPUs)
ZERO_RESERVATION = ("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than "
                    "zero")
NO_RESERVATION = "[cpumanager] unable to determine reserved CPU resources for static policy"

STATIC = "static"
NONE = "none"
POLICY_NAMES = (STATIC, NONE)


class Allocation(NamedTuple):
    """What a container runs on: its exclusive set, or the shared pool (``exclusive`` False)."""

    cpus: CPUSet
    exclusive: bool


def take_by_topology(topo: Topology, options: PolicyOptions, available: AbstractSet[int], count: int,
                     min_numas: int = 0) -> CPUSet:
    """The policy's takeByTopology: the options (and the kubelet version) choose the algorithm and its sort
    strategy; ``min_numas`` is the Topology Manager hint's NUMA count (used from 1.38)."""
    strategy = SPREAD if options.distribute_cpus_across_cores else PACKED
    minor = options.kubelet_minor
    if options.distribute_cpus_across_numa:
        group = topo.cpus_per_core if options.full_pcpus_only else 1
        return take_by_topology_distributed(topo, available, count, group, strategy, minor=minor,
                                            align_by_socket=options.align_by_socket, min_numas=min_numas)
    return take_by_topology_packed(topo, available, count, strategy, options.prefer_align_cpus_by_uncorecache,
                                   minor=minor)


def check_numa_nodes(topo: Topology, numa_nodes: Iterable[int]) -> Sequence[int]:
    nodes = sorted(set(numa_nodes))
    unknown = [n for n in nodes if n not in topo.numa_cpus]
    if unknown:
        raise TopologyError("NUMA node(s) %s not in the topology (nodes: %s)"
                            % (",".join(map(str, unknown)), CPUSet(topo.numa_cpus)))
    return nodes


def allocate_cpus(topo: Topology, options: PolicyOptions, allocatable: AbstractSet[int], count: int,
                  numa_affinity: Optional[Iterable[int]] = None) -> CPUSet:
    """allocateCPUs: first what the NUMA hint allows (widened to sockets under align-by-socket), then the rest."""
    result = EMPTY
    if numa_affinity is not None:
        nodes = check_numa_nodes(topo, numa_affinity)
        if options.align_by_socket:
            region = topo.cpus_in_sockets(*topo.sockets_in_numa_nodes(*nodes))
        else:
            region = topo.cpus_in_numa_nodes(*nodes)
        aligned = region.intersection(allocatable).as_frozenset()
        result = take_by_topology(topo, options, aligned, min(count, len(aligned)), len(nodes))
    rest = frozenset(allocatable).difference(result.as_frozenset())
    return result.union(take_by_topology(topo, options, rest, count - len(result)))


def plan(topo: Topology, options: PolicyOptions, available: CPUSet, count: int,
         numa_affinity: Optional[Iterable[int]] = None) -> CPUSet:
    """What the static policy gives a container asking for ``count`` CPUs when ``available`` is free.

    Runs the policy's full-pcpus-only checks first (ALGORITHM.md section 7.5).
    """
    validate_for_machine(options, topo.num_sockets, topo.num_numa)
    if count < 0:
        raise AllocationError("a CPU count must not be negative, got %d" % count)
    if options.full_pcpus_only and count > 0:
        _smt_check(topo, count, len(topo.whole_core_cpus(available)))
    return allocate_cpus(topo, options, available.as_frozenset(), count, numa_affinity)


def _smt_check(topo: Topology, count: int, available_physical: int) -> None:
    group = topo.cpus_per_core or 1
    if count % group != 0:
        raise SMTAlignmentError(count, group)
    if count > available_physical:
        raise SMTAlignmentError(count, group, available_physical, True)


class NonePolicy:
    """The ``none`` policy: no exclusive CPUs, no options."""

    name = NONE

    def __init__(self, topo: Topology, raw_options: Optional[Mapping[str, str]] = None) -> None:
        if raw_options:
            raise OptionError("None policy: received unsupported options=%s" % go_map_repr(raw_options))
        self.topology = topo
        self.reserved = EMPTY

    def start(self, state: CPUState, *, running: bool = False) -> None:
        """Nothing to validate: the none policy keeps no assignments."""

    def allocate(self, state: CPUState, pod: Pod, container: str, numa_affinity: Optional[Iterable[int]] = None, *,
                 prefer: Optional[CPUSet] = None, within: Optional[CPUSet] = None) -> Allocation:
        pod.container(container)
        return Allocation(state.default, False)

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> CPUSet:
        return EMPTY

    def reusable(self, state: CPUState, pod: Pod) -> CPUSet:
        return EMPTY  # nothing is exclusive under none

    def topology_hints(self, state: CPUState, pod: Pod, container: str, scope: str) -> Hints:
        """The none policy has no preference (the kubelet's nil hints)."""
        return None

    def resize(self, state: CPUState, pod_uid: str, container: str, count: int, baseline: CPUSet) -> CPUSet:
        return EMPTY  # nothing is exclusive under none


class StaticPolicy:
    """The ``static`` policy: exclusive CPUs for integral requests of Guaranteed pods."""

    name = STATIC

    def __init__(self, topo: Topology, num_reserved: int, reserved_cpus: Optional[CPUSet] = None,
                 options: Union[PolicyOptions, Mapping[str, str], None] = None) -> None:
        self.topology = topo
        self.options = options if isinstance(options, PolicyOptions) else parse_options(options)
        validate_for_machine(self.options, topo.num_sockets, topo.num_numa)
        if num_reserved < 0:
            raise PolicyError("the number of reserved CPUs must not be negative, got %d" % num_reserved)
        if reserved_cpus:
            reserved = reserved_cpus
        else:
            try:
                reserved = take_by_topology(topo, self.options, topo.all_cpus.as_frozenset(), num_reserved)
            except AllocationError:
                reserved = EMPTY
        if len(reserved) != num_reserved:
            raise PolicyError("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not "
                              "equal %d)" % (reserved, num_reserved))
        unknown = reserved.difference(topo.all_cpus)
        if unknown:
            raise PolicyError("[cpumanager] unable to build the reserved physical CPUs from the reserved set: "
                              "unknown CPU ID: %d" % min(unknown))
        self.reserved = reserved
        self.reserved_physical = topo.core_siblings(reserved)
        self.cpu_group_size = topo.cpus_per_core

    def all_cpus(self) -> CPUSet:
        """The CPUs the state must account for (all, minus reserved under strict reservation)."""
        if self.options.strict_cpu_reservation:
            return self.topology.all_cpus.difference(self.reserved)
        return self.topology.all_cpus

    def start(self, state: CPUState, *, running: bool = False) -> None:
        """validateState: fill a fresh state, or check a restored one against the node.

        ``running``: the state of a manager that is running, not starting (kubecpu's own operations on its state
        file). Under strict-cpu-reservation a running kubelet hands out its last shared CPU, and its checkpoint then
        has an empty default set; it refuses to start on that file ("default cpuset cannot be empty"), but while it
        runs it still releases and refuses as usual. So does kubecpu, as the real kubelet showed (REAL_KUBELET.md,
        "Differences found"): the rest of the validation still applies."""
        everything = self.all_cpus()
        if not state.default:
            if not state.entries:
                state.default = everything
                return
            if not (running and self.options.strict_cpu_reservation):
                raise StateError("default cpuset cannot be empty")
        if self.options.strict_cpu_reservation:
            present = self.reserved.intersection(state.default)
            if present:
                raise StateError('some of strictly reserved cpus: "%s" are present in defaultCpuSet: "%s"'
                                 % (present, state.default))
        elif not self.reserved.issubset(state.default):
            raise StateError('not all reserved cpus: "%s" are present in defaultCpuSet: "%s"'
                             % (self.reserved, state.default))
        default = state.default.as_frozenset()
        accounted = set(default)
        counted = len(default)
        for containers in state.entries.values():
            for cpus in containers.values():
                accounted.update(cpus.as_frozenset())
                counted += len(cpus)
        if state.pod_level:  # kubelet 1.36+ with PodLevelResourceManagers: pod-level sets count too
            accounted.update(state.pod_assigned().as_frozenset())
        if counted != len(accounted):  # something overlaps: name the first assignment that overlaps the pool
            for pod, container, cpus in state.assignments():
                if not default.isdisjoint(cpus.as_frozenset()):
                    raise StateError('pod: %s, container: %s cpuset: "%s" overlaps with default cpuset "%s"'
                                     % (pod, container, cpus, state.default))
        if accounted != everything.as_frozenset():
            raise StateError('current set of available CPUs "%s" doesn\'t match with CPUs in state "%s"'
                             % (everything, CPUSet(accounted)))

    def available(self, state: CPUState) -> CPUSet:
        """GetAvailableCPUs: the shared pool without the reserved CPUs."""
        return state.default.difference(self.reserved)

    def reusable(self, state: CPUState, pod: Pod) -> CPUSet:
        """cpusToReuse as the kubelet holds it while admitting this pod's containers in order."""
        held = state.entries.get(pod.uid, {})
        donors = [held[c.name] for c in pod.init_containers if not c.restartable_init and c.name in held]
        keepers = [held[c.name] for c in pod.all_containers()
                   if (not c.init or c.restartable_init) and c.name in held]
        return CPUSet().union(*donors).difference(CPUSet().union(*keepers))

    def allocate(self, state: CPUState, pod: Pod, container: str, numa_affinity: Optional[Iterable[int]] = None, *,
                 prefer: Optional[CPUSet] = None, within: Optional[CPUSet] = None) -> Allocation:
        """Allocate: exclusive CPUs for a Guaranteed integral request, else the shared pool.

        Beyond the kubelet (both None by default): ``within`` limits the choice to those CPUs, ``prefer``
        takes as many as it can from those CPUs first (for example the kernel's isolcpus set).
        """
        count = pod.guaranteed_cpus(container)
        if count == 0:
            return Allocation(state.default, False)
        if self.options.full_pcpus_only:
            _smt_check(self.topology, count, len(state.default.difference(self.reserved_physical)))
        existing = state.get(pod.uid, container)
        if existing is not None:
            return Allocation(existing, True)
        allocatable = self.available(state).union(self.reusable(state, pod))
        affinity = None if numa_affinity is None else list(numa_affinity)
        if within is not None:
            allocatable = allocatable.intersection(within)
        cpus = EMPTY
        if prefer:
            preferred = allocatable.intersection(prefer).as_frozenset()
            cpus = allocate_cpus(self.topology, self.options, preferred, min(count, len(preferred)), affinity)
        rest = allocatable.difference(cpus).as_frozenset()
        cpus = cpus.union(allocate_cpus(self.topology, self.options, rest, count - len(cpus), affinity))
        state.default = state.default.difference(cpus)
        state.set(pod.uid, container, cpus)
        return Allocation(cpus, True)

    def topology_hints(self, state: CPUState, pod: Pod, container: str, scope: str) -> Hints:
        """GetTopologyHints (``scope`` container) or GetPodTopologyHints (``pod``) for this state (HINTS.md); a
        container that already holds CPUs gets its hints from them alone, as at the restarted kubelet's re-admission."""
        available, reusable = self.available(state), self.reusable(state, pod)
        if scope == "pod":
            held = [(pod.guaranteed_cpus(c.name), state.get(pod.uid, c.name)) for c in pod.all_containers()]
            return pod_hints(self.topology, self.options, available, pod.guaranteed_pod_cpus(), reusable=reusable,
                             assigned=[(request, cpus) for request, cpus in held if cpus is not None])
        return container_hints(self.topology, self.options, available, pod.guaranteed_cpus(container),
                               reusable=reusable, assigned=state.get(pod.uid, container))

    def resize(self, state: CPUState, pod_uid: str, container: str, count: int, baseline: CPUSet) -> CPUSet:
        """An in-place resize of a container holding exclusive CPUs to ``count`` (KEP-5554): up, a superset (every CPU
        kept, the rest chosen as a fresh allocation would, from its own NUMA nodes first); down, a subset that keeps
        ``baseline`` (the CPUs it was first given). Raises AllocationError (infeasible: nothing changed) or
        StateError (below the baseline: refused, nothing changed). Returns the new set."""
        held = state.get(pod_uid, container)
        if held is None or count == len(held):
            return held if held is not None else EMPTY
        if count > len(held):
            extra = count - len(held)
            if self.options.full_pcpus_only:
                _smt_check(self.topology, extra, len(state.default.difference(self.reserved_physical)))
            free = self.available(state)
            if len(free) < extra:
                raise AllocationError("not enough cpus available to satisfy request: requested=%d, available=%d"
                                      % (extra, len(free)))
            nodes = sorted({self.topology.loc[c][2] for c in held if c in self.topology.loc})
            grown = held.union(allocate_cpus(self.topology, self.options, free.as_frozenset(), extra, nodes))
            state.default = state.default.difference(grown)
            state.set(pod_uid, container, grown)
            return grown
        kept = baseline.intersection(held)
        if count < len(kept):
            raise StateError("resize of container %s of pod %s to %d CPUs is below its baseline %s (%d CPUs): "
                             "refused" % (container, pod_uid, count, kept, len(kept)))
        rest = held.difference(kept).as_frozenset()
        shrunk = kept.union(take_by_topology(self.topology, self.options, rest, count - len(kept)))
        state.set(pod_uid, container, shrunk)
        siblings = CPUSet().union(*(cpus for name, cpus in state.entries.get(pod_uid, {}).items() if name != container))
        state.default = state.default.union(held.difference(shrunk).difference(siblings))
        return shrunk

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> CPUSet:
        """RemoveContainer: return the CPUs no other container of the pod still holds."""
        cpus = state.get(pod_uid, container)
        if cpus is None:
            return EMPTY
        state.delete(pod_uid, container)
        siblings = CPUSet().union(*state.entries.get(pod_uid, {}).values())
        released = cpus.difference(siblings)
        state.default = state.default.union(released)
        return released


class Policy(Protocol):
    """What every caller of a policy uses."""

    name: str
    topology: Topology
    reserved: CPUSet

    def start(self, state: CPUState, *, running: bool = False) -> None: ...

    def allocate(self, state: CPUState, pod: Pod, container: str, numa_affinity: Optional[Iterable[int]] = None, *,
                 prefer: Optional[CPUSet] = None, within: Optional[CPUSet] = None) -> Allocation: ...

    def remove_container(self, state: CPUState, pod_uid: str, container: str) -> CPUSet: ...

    def reusable(self, state: CPUState, pod: Pod) -> CPUSet: ...

    def resize(self, state: CPUState, pod_uid: str, container: str, count: int, baseline: CPUSet) -> CPUSet: ...

    def topology_hints(self, state: CPUState, pod: Pod, container: str, scope: str) -> Hints: ...


def new_policy(name: str, topo: Topology, num_reserved: int = 0, reserved_cpus: Optional[CPUSet] = None,
               raw_options: Optional[Mapping[str, str]] = None) -> Union[StaticPolicy, NonePolicy]:
    if name == STATIC:
        return StaticPolicy(topo, num_reserved, reserved_cpus, raw_options)
    if name == NONE:
        return NonePolicy(topo, raw_options)
    raise PolicyError('unknown policy: "%s"' % name)
