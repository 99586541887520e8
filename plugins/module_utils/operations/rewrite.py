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
that do not fit are named. The result is checked with the kubelet's own start validation before it is returned.
Only computes: the role writes the file (kubelet stopped) and pushes the moves through the runtime.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, cast

from ..errors import AllocationError, ContainerRuntimeError, RestoreFailure, StateError
from ..kubelet.checkpoint_formats import read, write
from ..kubelet.cpuset import CPUSet
from ..kubelet.kubelet_versions import DEFAULT, KubeletVersion
from ..kubelet.pod import Container, Pod
from ..kubelet.qos import GUARANTEED
from ..kubelet.policy import NONE, STATIC, Policy, StaticPolicy
from ..kubelet.state import CPUState
from ..node.admission import Admission
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
                       adopt: Optional[Adopter] = None, kubelet: KubeletVersion = DEFAULT) -> Rewrite:
    """The checkpoint for ``policy`` (the new configuration's, already built) from ``data`` (None: no file), in the
    format kubelet ``kubelet`` reads and writes (pod-level entries and baselines kept)."""
    if data is None:
        if policy.name == STATIC and adopt is not None:
            return _adopt(None, policy, adopt, kubelet)
        return Rewrite(None, [], [], "there is no checkpoint: the kubelet starts from a fresh one", None)
    before, state, failure = stored_policy(data, kubelet)
    if state is None:
        return Rewrite(None, [], [], "the checkpoint cannot be read (%s): rebuild it (bin/kubecpu state --rebuild) "
                       "or drain the node" % failure, None)
    if policy.name == NONE:
        return _to_none(data, state, policy, kubelet)
    if before == NONE:
        return _adopt(data, policy, adopt, kubelet)
    return _static_to_static(data, state, cast(StaticPolicy, policy), admission, kubelet)


def _to_none(data: bytes, state: CPUState, policy: Policy, kubelet: KubeletVersion) -> Rewrite:
    if state.policy_name == NONE:
        return Rewrite(data, [], [], "", NONE)
    everything = str(policy.topology.all_cpus)
    moves = [Move(pod, name, str(cpus), everything, "the none policy pins nothing: back on every CPU")
             for pod, name, cpus in state.assignments()]
    return Rewrite(write(CPUState(NONE), kubelet), moves, [], "", STATIC)


def _adopt(data: Optional[bytes], policy: Policy, adopt: Optional[Adopter], kubelet: KubeletVersion) -> Rewrite:
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
    return _checked(fresh, policy, moves, before, kubelet)


def _static_to_static(data: bytes, state: CPUState, policy: StaticPolicy, admission: Optional[Admission],
                      kubelet: KubeletVersion) -> Rewrite:
    # what the restarted kubelet's Topology Manager would reject when it admits the running pods again
    rejected = {(r["pod"], r["container"]): r["reason"] for r in (
        admission.readmission(policy, state) if admission is not None else [])}
    by_pod = admission is not None and admission.scope == "pod"
    try:
        policy.start(state.copy())
        if not rejected:
            return Rewrite(data, [], [], "", STATIC)  # the kubelet accepts it as it is: not a byte changes
    except StateError:
        pass
    everything, reserved = policy.all_cpus(), policy.reserved

    def why(pod: str, name: str, cpus: CPUSet) -> Optional[str]:
        """Why the container cannot keep its CPUs (None: it can)."""
        if not cpus.isdisjoint(reserved):
            return "holds reserved CPU(s) %s" % cpus.intersection(reserved)
        if not cpus.issubset(everything):
            return "holds CPU(s) %s the kubelet no longer manages" % cpus.difference(everything)
        return next((reason for (uid, names), reason in rejected.items() if uid == pod and (by_pod or names == name)),
                    None)

    kept = CPUState(STATIC, pod_entries=state.pod_entries, baselines=state.baselines, pod_level=state.pod_level)
    moving: List[Tuple[str, Dict[str, CPUSet], CPUSet, Dict[str, str]]] = []
    unfit: List[Dict[str, str]] = []
    for pod, containers in sorted(state.entries.items()):
        for union, names in _overlapping(containers):
            found = {name: why(pod, name, containers[name]) for name in names}
            if all(reason is None for reason in found.values()):
                for name in names:
                    kept.set(pod, name, containers[name])
                continue
            first = next(reason for reason in found.values() if reason is not None)
            if by_pod and any(uid == pod for uid, _names in rejected):
                unfit.extend({"pod": pod, "container": name, "reason": first + "; kubecpu does not move a pod's "
                              "containers together under the pod scope"} for name in names)
            elif pod in state.pod_entries:  # inside pod-level exclusive CPUs, which kubecpu does not move
                unfit.extend({"pod": pod, "container": name, "reason": "holds CPUs of its pod's pod-level assignment "
                              "%s, which kubecpu does not move" % state.pod_entries[pod]} for name in names)
            else:
                moving.append((pod, {name: containers[name] for name in names}, union, {
                    name: found[name] or "shares CPUs with a container of its pod that moves: %s" % first
                    for name in names}))
    kept.default = everything.difference(kept.assigned()).difference(kept.pod_assigned())
    moves: List[Move] = []
    for pod, members, union, reasons in sorted(moving, key=lambda m: (-len(m[2]), m[0], sorted(m[1]))):
        size = Fraction(len(union))  # the largest first; containers whose CPUs overlap move as one
        name = min(members)
        model = Pod(pod, "", "", (), (Container(name, size, size, Fraction(1), Fraction(1)),), GUARANTEED)
        try:
            affinity = admission.admit(policy, kept, model, name, None) if admission is not None else None
            result = policy.allocate(kept, model, name, affinity)
        except AllocationError as exc:
            unfit.extend({"pod": pod, "container": member, "reason": "needs %d CPUs: %s" % (len(union), exc)}
                         for member in sorted(members))
            continue
        image = dict(zip(sorted(union), sorted(result.cpus)))  # each CPU's place in the new set, in order
        for member, cpus in sorted(members.items()):
            after = CPUSet(image[cpu] for cpu in cpus)
            kept.set(pod, member, after)
            moves.append(Move(pod, member, str(cpus), str(after), reasons[member]))
    if unfit:
        return Rewrite(None, [], unfit, "%d pinned container(s) cannot keep their CPU count under the new "
                       "configuration: nothing is rewritten" % len(unfit), STATIC)
    return _checked(kept, policy, sorted(moves), STATIC, kubelet)


def _overlapping(containers: Dict[str, CPUSet]) -> List[Tuple[CPUSet, List[str]]]:
    """A pod's containers in groups whose CPUs overlap, directly or through another member (an init container's
    CPUs reused by its app containers): each group's CPUs and names."""
    groups: List[Tuple[CPUSet, List[str]]] = []
    for name, cpus in sorted(containers.items()):
        joined = [group for group in groups if not group[0].isdisjoint(cpus)]
        groups = [group for group in groups if group[0].isdisjoint(cpus)]
        groups.append((cpus.union(*(group[0] for group in joined)),
                       sorted([name] + [member for group in joined for member in group[1]])))
    return groups


def _checked(state: CPUState, policy: Policy, moves: List[Move], before: Optional[str],
             kubelet: KubeletVersion) -> Rewrite:
    """The file for ``state``, read back and validated as the kubelet does at start: one it would refuse is not
    returned (with strict reservation, exclusive CPUs may leave no shared CPU, and the kubelet then refuses to
    start: "default cpuset cannot be empty")."""
    data = write(state, kubelet)
    try:
        policy.start(read(data, policy.name, kubelet).state)
    except (RestoreFailure, StateError) as exc:
        return Rewrite(None, [], [], "the kubelet would refuse the rewritten checkpoint (%s): nothing is rewritten"
                       % exc, before)
    return Rewrite(data, moves, [], "", before)
