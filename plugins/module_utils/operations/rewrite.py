# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Reconfigure a kubelet node without draining it: the checkpoint the kubelet will accept under its new CPU manager
configuration, and the containers whose CPUs that moves.

The kubelet refuses a checkpoint that no longer fits its configuration (KUBELET_CONFIG.md section 4) and the
documented way out is a drain. kubecpu computes the file instead, the way the static policy itself would have:
- static to static: every assignment still valid under the new configuration is kept as it is; one that holds a
  CPU now reserved (or no longer online) moves to CPUs the new policy chooses for its size, with the new options
  and Topology Manager; the shared pool is recomputed. Containers of one pod that shared CPUs (an init container's
  reused by an app container) share the new ones. When the file is already accepted it is returned unchanged.
- none to static: the running Guaranteed containers with integral requests are adopted, allocated as the kubelet
  would have at admission (pods in creation order, init-container reuse, options, Topology Manager);
- static to none: the file the kubelet writes for ``none``, every pinned container back on all CPUs.
When a container cannot keep its CPU count under the new configuration, nothing is rewritten and the containers
that do not fit are named.

Every file returned passes the judge (``node/judge.py``): the restarted kubelet's start validation and its
re-admission of every running pod (CPU hints from the CPUs each container holds, memory hints from the Memory
Manager's checkpoint, merged by the new Topology Manager policy and scope, init-container reuse). So a moved
container goes where its pod's admission puts it: beside the NUMA nodes its memory is pinned to, and under the pod
scope beside its pod's other containers (the whole pod moves when they cannot be joined). A pod the judge still
rejects moves whole; when it is rejected again, nothing is rewritten and the reason says the change needs a drain.
Only computes: the role writes the file (kubelet stopped) and pushes the moves through the runtime.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union, cast

from ..errors import AllocationError, ContainerRuntimeError, RestoreFailure
from ..kubelet.checkpoint_formats import read, write
from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import DeviceNodes
from ..kubelet.kubelet_versions import DEFAULT, KubeletVersion
from ..kubelet.pod import Container, Pod
from ..kubelet.qos import GUARANTEED
from ..kubelet.policy import NONE, STATIC, Policy, StaticPolicy
from ..kubelet.state import CPUState
from ..node.admission import Admission
from ..node.judge import Judge, MemoryNodes, Refusal, overlapping
from ..node.plan import Plan
from ..node.state_store import fingerprint

# Given the fresh state of the new static policy, allocate the running containers into it (the node manager's
# admission of what runs, node/what_if.adopt) and say what it did.
Adopter = Callable[[CPUState], Plan]


class Move(NamedTuple):
    pod_uid: str
    container: str
    cpus_before: str
    cpus_after: str
    reason: str

    def to_dict(self) -> Dict[str, str]:
        return self._asdict()


class Rewrite(NamedTuple):
    """``data``: the new checkpoint (None: none is possible, ``reason`` says why; unchanged bytes when nothing has to
    change). ``unfit``: the containers that would not keep their CPU count."""

    data: Optional[bytes]
    moves: List[Move]
    unfit: List[Dict[str, str]]
    reason: str
    policy_before: Optional[str]

    def to_dict(self, current: Optional[bytes]) -> Dict[str, object]:
        return {"possible": self.data is not None or (current is None and not self.unfit),
                "rewritten_state": None if self.data is None else self.data.decode("utf-8"),
                "planned_from": fingerprint(current),
                "unchanged": self.data is not None and self.data == current,
                "moves": [move.to_dict() for move in self.moves], "unfit": self.unfit, "reason": self.reason,
                "policy_before": self.policy_before}


def stored_policy(data: bytes, kubelet: KubeletVersion) -> Tuple[Optional[str], Optional[CPUState], str]:
    """The checkpoint's policy and state as the kubelet reads them, or why it cannot be read."""
    failure = ""
    for name in (STATIC, NONE):
        try:
            return name, read(data, name, kubelet).state, ""
        except RestoreFailure as exc:
            failure = failure or str(exc)
            if "differs from state checkpoint policy" not in str(exc):
                return None, None, str(exc)
    return None, None, failure


def rewrite_checkpoint(data: Optional[bytes], policy: Policy, *, admission: Optional[Admission] = None,
                       adopt: Optional[Adopter] = None, kubelet: KubeletVersion = DEFAULT,
                       memory: Optional[MemoryNodes] = None, pods: Optional[Sequence[Pod]] = None,
                       devices: Optional[DeviceNodes] = None) -> Rewrite:
    """The checkpoint for ``policy`` (the new configuration's, already built) from ``data`` (None: no file), in the
    format kubelet ``kubelet`` reads and writes (pod-level entries and baselines kept). Every file returned passes the
    judge (``node/judge.py``): the restarted kubelet under ``policy`` and ``admission``, with the Memory Manager's
    pinned NUMA nodes (``memory``) and the Device Manager's devices' (``devices``), admitting the running pods
    (``pods``, in creation order; None: the checkpoint's)."""
    admission = admission if admission is not None else Admission(policy.topology)
    judge = admission.judge(policy, memory=memory, pods=pods, devices=devices)
    if data is None:
        if policy.name == STATIC and adopt is not None:
            return _adopt(None, policy, adopt, judge, kubelet)
        return Rewrite(None, [], [], "there is no checkpoint: the kubelet starts from a fresh one", None)
    before, state, failure = stored_policy(data, kubelet)
    if state is None:
        return Rewrite(None, [], [], "the checkpoint cannot be read (%s): rebuild it (bin/kubecpu state --rebuild) "
                       "or drain the node" % failure, None)
    if policy.name == NONE:
        return _to_none(data, state, policy, judge, kubelet)
    if before == NONE:
        return _adopt(data, policy, adopt, judge, kubelet)
    return _static_to_static(data, state, _Rules(cast(StaticPolicy, policy), admission, judge), kubelet)


def _to_none(data: bytes, state: CPUState, policy: Policy, judge: Judge, kubelet: KubeletVersion) -> Rewrite:
    if state.policy_name == NONE:
        return Rewrite(data, [], [], "", NONE)
    everything = str(policy.topology.all_cpus)
    moves = [Move(pod, name, str(cpus), everything, "the none policy pins nothing: back on every CPU")
             for pod, name, cpus in state.assignments()]
    return _checked(CPUState(NONE), moves, STATIC, judge, kubelet)


def _adopt(data: Optional[bytes], policy: Policy, adopt: Optional[Adopter], judge: Judge,
           kubelet: KubeletVersion) -> Rewrite:
    before = NONE if data is not None else None
    if adopt is None:
        return Rewrite(None, [], [], "none -> static adopts the running Guaranteed containers, and no runtime was "
                       "given to list them", before)
    fresh = CPUState(STATIC)
    policy.start(fresh)
    shared = str(fresh.default)
    try:
        plan = adopt(fresh)
    except ContainerRuntimeError as exc:
        return Rewrite(None, [], [], "none -> static adopts the running Guaranteed containers, and the runtime "
                       "cannot list them: %s" % exc, before)
    unfit = [{"pod": str(e.get("pod", "")), "container": str(e.get("container", "")), "reason": str(e.get("error", ""))}
             for e in plan.errors]
    if unfit:
        return Rewrite(None, [], unfit, "%d running container(s) cannot get exclusive CPUs under the new "
                       "configuration: nothing is rewritten" % len(unfit), before)
    moves = [Move(action.pod_uid, action.container, shared, action.cpus, "adopted: " + action.reason)
             for action in plan.actions if action.action == "allocate"]
    return _checked(fresh, moves, before, judge, kubelet)


class _Rules(NamedTuple):
    """The new configuration: its policy, its Topology Manager (which places a moved container) and the judge."""

    policy: StaticPolicy
    admission: Admission
    judge: Judge


Group = Tuple[CPUSet, Dict[str, CPUSet]]  # containers of a pod whose CPUs overlap: their union, and each one's CPUs


class _Unit(NamedTuple):
    """What moves together: ``moving`` groups of one pod's containers (CPUs, names), and under the Topology Manager's
    pod scope the pod's ``staying`` groups, which the pod's admission counts where they are (or, when it cannot admit
    the pod so, move too: ``_place``)."""

    pod: str
    moving: List[Group]
    staying: List[Group]
    reasons: Dict[str, str]

    @property
    def size(self) -> int:
        return sum(len(union) for union, _members in self.moving)


def _static_to_static(data: bytes, state: CPUState, rules: _Rules, kubelet: KubeletVersion) -> Rewrite:
    judge = rules.judge
    refused = judge.readmission(state)  # the pods the restarted kubelet would reject as the file stands
    if judge.start(state) is None and not refused:
        return Rewrite(data, [], [], "", STATIC)  # the kubelet accepts it as it is: not a byte changes
    forced: Set[str] = set()  # pods the judge rejected where a first placement put them: all their containers move
    while True:
        placed = _placement(state, rules, refused, forced)
        if isinstance(placed, Rewrite):
            return placed
        kept, moves = placed
        written = write(kept, kubelet)
        refusal = judge.file(written, kubelet)
        if refusal is None:
            return Rewrite(written, sorted(moves), [], "", STATIC)
        if refusal.pod not in state.entries or refusal.pod in forced or refusal.pod in state.pod_entries:
            return Rewrite(None, [], [], _drain(refusal), STATIC)
        forced.add(refusal.pod)


def _drain(refusal: Refusal) -> str:
    return ("the restarted kubelet would refuse the rewritten checkpoint (%s): nothing is rewritten, and the change "
            "needs a drain" % str(refusal))


def _placement(state: CPUState, rules: _Rules, refused: List[Refusal],
               forced: Set[str]) -> Union[Rewrite, Tuple[CPUState, List[Move]]]:
    """The state with every container that cannot stay moved (``_Unit``), and the moves; or the Rewrite that says
    which containers would not keep their CPU count."""
    everything, reserved = rules.policy.all_cpus(), rules.policy.reserved
    by_pod = rules.judge.manager is not None and rules.judge.scope == "pod"
    rejected: Dict[Tuple[str, str], str] = {}
    for refusal in refused:
        rejected.setdefault((refusal.pod, refusal.container), refusal.said)

    def why(pod: str, name: str, cpus: CPUSet) -> Optional[str]:
        """Why the container cannot keep its CPUs (None: it can)."""
        if not cpus.isdisjoint(reserved):
            return "holds reserved CPU(s) %s" % cpus.intersection(reserved)
        if not cpus.issubset(everything):
            return "holds CPU(s) %s the kubelet no longer manages" % cpus.difference(everything)
        if pod in forced:
            return "the restarted kubelet would reject its pod where a first placement put it"
        return next((reason for (uid, names), reason in sorted(rejected.items())
                     if uid == pod and (by_pod or names == name)), None)

    kept = CPUState(STATIC, pod_entries=state.pod_entries, baselines=state.baselines, pod_level=state.pod_level)
    units: List[_Unit] = []
    unfit: List[Dict[str, str]] = []
    for pod, containers in sorted(state.entries.items()):
        groups: List[Group] = [(union, {name: containers[name] for name in names})
                               for union, names in overlapping(containers)]
        found = {name: why(pod, name, cpus) for _union, members in groups for name, cpus in members.items()}
        moving = [group for group in groups if any(found[name] is not None for name in group[1])]
        staying = [group for group in groups if group not in moving]
        for _union, members in staying:
            for name, cpus in members.items():
                kept.set(pod, name, cpus)
        if not moving:
            continue
        first = next(reason for reason in found.values() if reason is not None)
        if pod in state.pod_entries:  # inside pod-level exclusive CPUs, which kubecpu does not move
            unfit.extend({"pod": pod, "container": name, "reason": "holds CPUs of its pod's pod-level assignment "
                          "%s, which kubecpu does not move" % state.pod_entries[pod]}
                         for _union, members in moving for name in sorted(members))
            continue
        reasons = {name: found[name] or "shares CPUs with a container of its pod that moves: %s" % first
                   for _union, members in moving for name in members}
        reasons.update({name: "moves with its pod (the Topology Manager's pod scope admits a pod's containers "
                        "together): %s" % first for _union, members in staying for name in members})
        if by_pod:
            units.append(_Unit(pod, moving, staying, reasons))
        else:
            units.extend(_Unit(pod, [group], [], reasons) for group in moving)
    kept.default = everything.difference(kept.assigned()).difference(kept.pod_assigned())
    moves: List[Move] = []
    for unit in sorted(units, key=lambda u: (-u.size, u.pod, [sorted(members) for _cpus, members in u.moving])):
        try:  # the largest first; containers whose CPUs overlap move as one
            kept, placed = _place(rules, kept, unit)
        except AllocationError as exc:
            unfit.extend({"pod": unit.pod, "container": name, "reason": "needs %d CPUs: %s" % (unit.size, exc)}
                         for _cpus, members in unit.moving for name in sorted(members))
            continue
        moves.extend(placed)
    if unfit:
        return Rewrite(None, [], unfit, "%d pinned container(s) cannot keep their CPU count under the new "
                       "configuration: nothing is rewritten" % len(unfit), STATIC)
    return kept, moves


def _place(rules: _Rules, kept: CPUState, unit: _Unit) -> Tuple[CPUState, List[Move]]:
    """``unit`` moved on a copy of ``kept``: its moving groups beside its staying ones, or, when the pod's admission
    refuses that, the whole pod. Raises AllocationError (TopologyAffinityError included) when neither fits."""
    attempt = kept.copy()
    try:
        return attempt, _allocate(rules, attempt, unit.pod, moving=unit.moving, staying=unit.staying,
                                  reasons=unit.reasons)
    except AllocationError:
        if not unit.staying:
            raise
    attempt = kept.copy()
    for _union, members in unit.staying:
        for name in members:
            rules.policy.remove_container(attempt, unit.pod, name)
    return attempt, _allocate(rules, attempt, unit.pod, moving=unit.moving + unit.staying, staying=[],
                              reasons=unit.reasons)


def _allocate(rules: _Rules, state: CPUState, pod: str, *, moving: List[Group], staying: List[Group],
              reasons: Dict[str, str]) -> List[Move]:
    """The moving groups allocated on ``state`` as the kubelet admits a pod whose containers hold what ``staying``
    holds: each group one container of its size, placed by the Topology Manager (CPU hints, and a preferred hint for
    the NUMA nodes the Memory Manager pinned its memory to) and the static policy; each member's CPUs mapped in
    order onto the group's new ones, so that shared CPUs stay shared."""
    policy, admission, judge = rules
    by_pod = judge.manager is not None and judge.scope == "pod"
    keepers = [max(members, key=lambda name: (len(members[name]), name)) for _union, members in staying]
    sizes = [(name, len(members[name])) for name, (_union, members) in zip(keepers, staying)]
    sizes += [(min(members), len(union)) for union, members in moving]
    model = Pod(pod, "", "", (), tuple(Container(name, Fraction(size), Fraction(size), Fraction(1), Fraction(1))
                                       for name, size in sizes), GUARANTEED)
    ordered = sorted(moving, key=lambda group: (-len(group[0]), sorted(group[1])))
    everyone = sorted(name for _union, members in moving + staying for name in members)
    affinity = None
    if by_pod:  # the pod's admission, once, its staying containers counted where they are
        affinity = admission.admit(policy, state, model, min(ordered[0][1]), judge.placement(pod, everyone))
    moves = []
    for union, members in ordered:
        name = min(members)
        if not by_pod:
            affinity = admission.admit(policy, state, model, name, judge.placement(pod, sorted(members)))
        result = policy.allocate(state, model, name, affinity)
        image = dict(zip(sorted(union), sorted(result.cpus)))  # each CPU's place in the new set, in order
        for member, before in sorted(members.items()):
            after = CPUSet(image[cpu] for cpu in before)
            state.set(pod, member, after)
            if after != before:  # one that lands where it was has not moved
                moves.append(Move(pod, member, str(before), str(after), reasons[member]))
    return moves


def _checked(state: CPUState, moves: List[Move], before: Optional[str], judge: Judge,
             kubelet: KubeletVersion) -> Rewrite:
    """The file for ``state``, read back and judged as the restarted kubelet judges it (``node/judge.py``): one it
    would refuse is not returned (with strict reservation, exclusive CPUs may leave no shared CPU, and the kubelet
    then refuses to start: "default cpuset cannot be empty")."""
    data = write(state, kubelet)
    refusal = judge.file(data, kubelet)
    if refusal is not None:
        return Rewrite(None, [], [], _drain(refusal), before)
    return Rewrite(data, sorted(moves), [], "", before)
