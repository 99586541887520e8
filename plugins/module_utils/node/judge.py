# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The restarted kubelet's verdict on a CPU manager checkpoint: the one gate every write of the kubelet's file passes.

A kubelet that starts restores its checkpoint (``kubelet/checkpoint_formats.read``), validates it (``policy.start``,
ALGORITHM.md section 6) and then admits every running pod again, in creation order, as it admitted it the first time:

- the Topology Manager merges the hint providers' answers per container (scope ``container``) or once per pod (scope
  ``pod``). The CPU manager's hints come from the CPUs a container already holds, alone (under the pod scope, from
  all its containers' CPUs together; ALGORITHM.md section 9, HINTS.md); the Memory Manager's (policy ``Static``)
  from the NUMA nodes its checkpoint pinned the container's memory to, one preferred hint; the Device Manager's from
  the NUMA nodes of the devices its checkpoint allocated to the container (every NUMA combination holding them,
  preferred when no wider than they are). ``restricted`` and ``single-numa-node`` reject a pod whose merged hint is
  not preferred ("Resources cannot be allocated with Topology locality");
- then the CPU manager's Allocate for each container, init containers first (section 7): full-pcpus-only's SMT
  check runs even for a container that holds CPUs; a container without an entry gets CPUs afresh (a finished init
  container without one: from the free CPUs, since its app containers' CPUs are not its to reuse), and a failure
  rejects the pod ("Allocate failed due to ..., which is unexpected").

A rejected pod is killed. ``Judge`` replays all this on a copy of the state and returns the refusals, each naming
the pod, the container and the kubelet's text. The pods are the runtime's (``pod_views.running_pods``); without a
runtime they are read from the checkpoint itself (``checkpoint_pods``). Not seen: the Memory Manager's hints for a
container whose memory it did not pin (computed from free memory, which no file shows), and of the Device Manager's,
whether a narrower NUMA combination than the allocated devices' could hold as many of the resource's devices (its
checkpoint lists only the devices it allocated): a hint as wide as the devices is taken to be preferred.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..errors import AllocationError, RestoreFailure, SMTAlignmentError, StateError, TopologyAffinityError
from ..kubelet.checkpoint_formats import read
from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import DeviceNodes
from ..kubelet.hints import Hints, TopologyHint, iterate_masks
from ..kubelet.kubelet_versions import DEFAULT, KubeletVersion
from ..kubelet.pod import Container, Pod
from ..kubelet.policy import Policy
from ..kubelet.qos import GUARANTEED
from ..kubelet.state import CPUState
from ..kubelet.topology_manager import TopologyManager

MemoryNodes = Mapping[Tuple[str, str], FrozenSet[int]]
Providers = List[Optional[Mapping[str, Optional[Sequence[TopologyHint]]]]]


class Refusal(NamedTuple):
    """What the restarted kubelet refuses: the file (``pod`` empty), or a pod's admission (under the pod scope the pod
    as a whole: ``container`` lists its containers). ``reason`` is the kubelet's text, ``detail`` what led to it."""

    pod: str
    container: str
    reason: str
    detail: str = ""

    @property
    def said(self) -> str:
        """The kubelet's text and what led to it."""
        return "%s: %s" % (self.reason, self.detail) if self.detail else self.reason

    def __str__(self) -> str:
        return "pod %s container %s: %s" % (self.pod, self.container, self.said) if self.pod else self.said

    def to_dict(self) -> Dict[str, str]:
        return {"pod": self.pod, "container": self.container, "reason": self.said}


def overlapping(containers: Mapping[str, CPUSet]) -> List[Tuple[CPUSet, List[str]]]:
    """A pod's containers in groups whose CPUs overlap, directly or through another member (an init container's CPUs
    reused by its app containers): each group's CPUs and names."""
    groups: List[Tuple[CPUSet, List[str]]] = []
    for name, cpus in sorted(containers.items()):
        joined = [group for group in groups if not group[0].isdisjoint(cpus)]
        groups = [group for group in groups if group[0].isdisjoint(cpus)]
        groups.append((cpus.union(*(group[0] for group in joined)),
                       sorted([name] + [member for group in joined for member in group[1]])))
    return groups


def checkpoint_pods(state: CPUState) -> List[Pod]:
    """The pods a checkpoint alone shows, by UID (the file has no creation order): Guaranteed, each container
    requesting the CPUs it holds; of containers whose CPUs overlap, the one holding the most is the long-running one
    and the others are init containers that handed their CPUs over."""
    pods = []
    for uid in sorted(state.entries):
        held = state.entries[uid]
        inits: List[Container] = []
        apps: List[Container] = []
        for _union, names in overlapping(held):
            keeper = max(names, key=lambda name: (len(held[name]), name))
            for name in names:
                size = Fraction(len(held[name]))
                item = Container(name, size, size, Fraction(1), Fraction(1), init=name != keeper)
                (apps if name == keeper else inits).append(item)
        pods.append(Pod(uid, "", "", tuple(inits), tuple(apps), GUARANTEED))
    return pods


def _shown(hints: Hints) -> str:
    if hints is None:
        return "none"
    return ", ".join("%s%s" % (list(h.affinity or ()), "" if h.preferred else "?") for h in hints) or "empty"


class Judge:
    """The restarted kubelet under ``policy`` and its Topology Manager (``manager``, None for the ``none`` policy, and
    ``scope``; ``node/admission.py`` builds it: ``Admission.judge``), with the Memory Manager's pinned NUMA nodes
    (``memory``, ``kubelet/memory_state.py``), the NUMA nodes of the devices the Device Manager allocated
    (``devices``, ``kubelet/device_state.py``) and the running pods in creation order (``pods``; None: the
    checkpoint's own, ``checkpoint_pods``)."""

    def __init__(self, policy: Policy, manager: Optional[TopologyManager] = None, scope: str = "container", *,
                 memory: Optional[MemoryNodes] = None, pods: Optional[Sequence[Pod]] = None,
                 devices: Optional[DeviceNodes] = None) -> None:
        self.policy = policy
        self.manager = manager
        self.scope = scope
        self.memory: Dict[Tuple[str, str], FrozenSet[int]] = dict(memory or {})
        self.devices: DeviceNodes = dict(devices or {})
        self.pods = None if pods is None else list(pods)

    def file(self, data: bytes, kubelet: KubeletVersion = DEFAULT) -> Optional[Refusal]:
        """The first refusal of the checkpoint ``data`` as kubelet ``kubelet`` reads it; None: accepted."""
        try:
            state = read(data, self.policy.name, kubelet).state
        except RestoreFailure as exc:
            return Refusal("", "", "could not restore state from checkpoint: %s" % exc)
        return self.verdict(state)

    def verdict(self, state: CPUState) -> Optional[Refusal]:
        """The first refusal of ``state`` (its start validation, then the re-admission); None: accepted."""
        refused = self.start(state)
        if refused is not None:
            return refused
        readmitted = self.readmission(state)
        return readmitted[0] if readmitted else None

    def check(self, state: CPUState, path: str) -> None:
        """StateError naming ``path`` when the restarted kubelet would refuse ``state``: what it refuses is never
        written."""
        refused = self.verdict(state)
        if refused is not None:
            raise StateError("%s: the restarted kubelet would refuse this checkpoint (%s): it is not written; "
                             "without a checkpoint it accepts, the change needs a drain" % (path, refused))

    def start(self, state: CPUState) -> Optional[Refusal]:
        """validateState on a copy: the kubelet does not start on a state it refuses."""
        try:
            self.policy.start(state.copy())
        except StateError as exc:
            return Refusal("", "", str(exc))
        return None

    def readmission(self, state: CPUState) -> List[Refusal]:
        """Every running pod admitted again in creation order, on a copy of ``state``: one refusal per rejected pod
        (a rejected pod allocates nothing; the next pods are admitted as usual)."""
        replay = state.copy()
        if not replay.default and not replay.entries:
            self.policy.start(replay)  # a fresh file: every CPU is free
        refusals = []
        for pod in self.pods if self.pods is not None else checkpoint_pods(state):
            attempt = replay.copy()
            refused = self._admit(attempt, pod)
            if refused is None:
                replay = attempt
            else:
                refusals.append(refused)
        return refusals

    def memory_hint(self, pod_uid: str, names: Sequence[str]) -> Optional[List[int]]:
        """The NUMA nodes the Memory Manager pinned the memory of the first of ``names`` it pinned (under the pod
        scope its hint comes from the first such container of the pod); None: no pinned memory."""
        for name in names:
            nodes = self.memory.get((pod_uid, name))
            if nodes:
                return sorted(nodes)
        return None

    def placement(self, pod_uid: str, names: Sequence[str]) -> Optional[List[int]]:
        """The NUMA nodes CPUs moved for ``names`` belong on: their pinned memory's (``memory_hint``), else their
        devices'; None: anywhere."""
        memory = self.memory_hint(pod_uid, names)
        if memory is not None:
            return memory
        held = [nodes for name in names for nodes in self.devices.get((pod_uid, name), {}).values()]
        return sorted(frozenset().union(*held)) or None

    def _device_hints(self, pod_uid: str, names: Sequence[str]) -> Optional[Dict[str, Optional[List[TopologyHint]]]]:
        """GetTopologyHints (or, for a pod, GetPodTopologyHints) of the Device Manager for devices already allocated:
        per resource, every NUMA combination holding all of them, preferred when no wider than they are."""
        per_resource: Dict[str, FrozenSet[int]] = {}
        for name in names:
            for resource, nodes in self.devices.get((pod_uid, name), {}).items():
                per_resource[resource] = per_resource.get(resource, frozenset()) | nodes
        if not per_resource:
            return None
        machine = sorted(self.policy.topology.numa_cpus)
        return {resource: [TopologyHint(mask, len(mask) == len(nodes)) for mask in iterate_masks(machine)
                           if nodes.issubset(mask)] for resource, nodes in sorted(per_resource.items())}

    def _merge(self, state: CPUState, pod: Pod, cpu: Hints, names: Sequence[str]) -> Tuple[Optional[List[int]],
                                                                                           Optional[Refusal]]:
        manager = self.manager
        if manager is None:  # set by re-admission before any merge: a caller's mistake, not the kubelet's verdict
            raise StateError("the judge merges hints only while it admits pods")
        nodes = self.memory_hint(pod.uid, names)
        memory = None if nodes is None else [TopologyHint(tuple(nodes), True)]
        devices = self._device_hints(pod.uid, names)
        providers: Providers = [{"cpu": cpu}, None if memory is None else {"memory": memory}, devices]
        merged = manager.merge(providers)
        if merged.admit:
            return merged.nodes, None
        held = CPUSet().union(*(cpus for name in names for cpus in [state.get(pod.uid, name)] if cpus is not None))
        topo = self.policy.topology
        where = sorted({topo.loc[cpu][2] for cpu in held if cpu in topo.loc})
        devices_on = sorted(frozenset().union(*(on for name in names
                                                for on in self.devices.get((pod.uid, name), {}).values())))
        detail = ("topology manager policy %s, scope %s, rejects CPUs %s on NUMA node(s) %s%s%s when the restarted "
                  "kubelet admits the pod again (CPU hints %s, memory hints %s)"
                  % (manager.policy, self.scope, held or "none", where, "" if nodes is None else
                     ", its memory pinned to NUMA node(s) %s," % nodes,
                     ", its devices on NUMA node(s) %s," % devices_on if devices_on else "", _shown(cpu),
                     _shown(memory)))
        return None, Refusal(pod.uid, ", ".join(names), TopologyAffinityError.TEXT, detail)

    def _admit(self, state: CPUState, pod: Pod) -> Optional[Refusal]:
        """The Topology Manager's Admit of ``pod`` and the CPU manager's Allocate of each container, on ``state``."""
        names = [item.name for item in pod.all_containers()]
        by_pod = self.manager is not None and self.scope == "pod"
        affinity: Optional[List[int]] = None
        if by_pod and names:
            affinity, refused = self._merge(state, pod, self.policy.topology_hints(state, pod, names[0], "pod"), names)
            if refused is not None:
                return refused
        for name in names:
            if self.manager is not None and not by_pod:
                affinity, refused = self._merge(state, pod, self.policy.topology_hints(state, pod, name, "container"),
                                                [name])
                if refused is not None:
                    return refused
            try:
                self.policy.allocate(state, pod, name, affinity)
            except SMTAlignmentError as exc:
                return Refusal(pod.uid, name, str(exc), "SMTAlignmentError when the restarted kubelet admits the pod "
                               "again")
            except AllocationError as exc:
                return Refusal(pod.uid, name, "Allocate failed due to %s, which is unexpected" % exc,
                               "UnexpectedAdmissionError when the restarted kubelet admits the pod again")
        return None
