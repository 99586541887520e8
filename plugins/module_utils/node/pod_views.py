# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Pods as the runtime shows them: the newest attempt of each container, init containers recognised by order,
and the pod model the policy allocates for (CRI knows no pods' specs, RUNTIME.md section 6)."""

from __future__ import annotations

from fractions import Fraction
from typing import AbstractSet, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import AllocationError, ContainerNotFoundError, PodSpecError
from ..kubelet.pod import Container, Pod
from ..kubelet.policy import Allocation, Policy
from ..kubelet.qos import GUARANTEED
from ..kubelet.state import CPUState
from ..runtime.model import CREATED, EXITED, RUNNING, ContainerInfo, ListedContainer
from .exclusive import marked
from .plan import Action, Plan

Pair = Tuple[ListedContainer, ContainerInfo]


class PodView(NamedTuple):
    uid: str
    latest: Dict[str, Pair]  # container name -> newest attempt
    model: Pod


def _is_init(listed: ListedContainer, info: ContainerInfo,
             siblings: Iterable[Pair]) -> bool:
    """CRI does not mark init containers. One that exited successfully and was followed by a sibling created
    after it finished ran before the others: the kubelet's init-container order."""
    if listed.state != EXITED or info.exit_code != 0 or info.finished_at <= 0:
        return False
    return any(other.name != listed.name and other.created_at >= info.finished_at for other, _i in siblings)


def _container_model(info: ContainerInfo, init: bool, cpus: Optional[int] = None,
                     exclusive: bool = False) -> Container:
    milli = info.requested_milli() if cpus is None else cpus * 1000
    request = Fraction(milli, 1000) if milli else None
    return Container(name=info.name, cpu_request=request, cpu_limit=request, init=init, exclusive=exclusive)


def build_views(pairs: Sequence[Pair], override: Optional[Tuple[str, str, int]] = None, *,
                exclusive: AbstractSet[Tuple[str, str]] = frozenset()) -> Dict[str, PodView]:
    """Pods from the runtime: the newest attempt per container name, init containers recognised by order.

    ``override`` (pod UID, container name, CPUs) replaces what the runtime says of one container's request
    (the allocate module's ``cpus``): it is then treated as Guaranteed with that integral request. ``exclusive``
    (pod UID, container name): the Burstable pods' containers marked for exclusive CPUs (``node/exclusive.py``; only
    the node manager's own passes mark any, never a path that decides for a kubelet).
    """
    groups: Dict[str, Dict[str, Pair]] = {}
    for listed, info in pairs:
        if not listed.is_kubernetes:
            continue
        pod = groups.setdefault(listed.pod_uid, {})
        have = pod.get(listed.name)
        if have is None or (listed.attempt, listed.created_at) > (have[0].attempt, have[0].created_at):
            pod[listed.name] = (listed, info)
    views = {}
    for uid, latest in groups.items():
        ordered = sorted(latest.values(), key=lambda pair: pair[0].created_at)
        inits: List[Container] = []
        apps: List[Container] = []
        qos = next((info.qos for _l, info in ordered if info.qos), "")
        for listed, info in ordered:
            cpus = override[2] if override is not None and (uid, listed.name) == override[:2] else None
            init = _is_init(listed, info, ordered)
            (inits if init else apps).append(_container_model(info, init, cpus, (uid, listed.name) in exclusive))
        if override is not None and override[0] == uid:
            qos = GUARANTEED
        first = ordered[0][0]
        views[uid] = PodView(uid, latest, Pod(uid=uid, name=first.pod_name, namespace=first.pod_namespace,
                                              init_containers=tuple(inits), containers=tuple(apps), qos=qos))
    return views


def marked_views(plan: Plan, pairs: Sequence[Pair], scope: Optional[AbstractSet[str]], on: bool) -> Dict[str, PodView]:
    """The pods of ``scope`` (None: every pod) as ``build_views`` makes them, with the Burstable pods' containers that
    their ``cpu-exclusive.kubecpu.io`` names marked when ``on`` (``node/exclusive.py``; its errors go to ``plan``):
    the node manager's own pass."""
    scoped = pairs if scope is None else [pair for pair in pairs if pair[0].pod_uid in scope]
    return build_views(scoped, exclusive=marked(plan, scoped, on))


def lone_pod(info: ContainerInfo, exclusive: bool = False) -> Pod:
    """The pod model of a container whose siblings are not known (the OCI hook sees one container): its QoS class
    as its cgroup parent says, its request as its CPU resources say (``exclusive``: marked, as ``build_views``)."""
    return Pod(uid=info.pod_uid, name=info.pod_name, namespace=info.pod_namespace, init_containers=(),
               containers=(_container_model(info, False, exclusive=exclusive),), qos=info.qos)


def seen_with(pairs: Sequence[Pair], info: ContainerInfo, created_at: int,
              exclusive: AbstractSet[Tuple[str, str]] = frozenset()) -> Pod:
    """The pod model of a container being created (the OCI hook's ``info``) among its pod's containers as the runtime
    lists them (``pairs``): its init containers recognised by order, so that it reuses their CPUs as the kubelet's
    static policy does. The container is added as the runtime would list it when the list does not have it yet
    (CRI-O runs the hook inside CreateContainer)."""
    pairs = [pair for pair in pairs if pair[0].pod_uid == info.pod_uid]
    if not any(listed.id == info.id for listed, _info in pairs):
        pairs.append((ListedContainer(info.id, "", info.pod_uid, info.pod_name, info.pod_namespace, info.name,
                                      info.attempt, CREATED, created_at), info))
    return build_views(pairs, exclusive=exclusive)[info.pod_uid].model


def find_container(pairs: Sequence[Pair], container_id: Optional[str], pod_uid: Optional[str],
                   name: Optional[str]) -> Optional[ListedContainer]:
    """A container by ID (a unique prefix of at least 6 characters works, as in crictl), else the newest
    attempt of (pod UID, name)."""
    listed = [item for item, _info in pairs]
    if container_id:
        exact = [c for c in listed if c.id == container_id]
        if exact:
            return exact[0]
        prefixed = [c for c in listed if len(container_id) >= 6 and c.id.startswith(container_id)]
        return prefixed[0] if len(prefixed) == 1 else None
    matches = [c for c in listed if c.pod_uid == pod_uid and c.name == name]
    return max(matches, key=lambda c: (c.attempt, c.created_at)) if matches else None


def describe_target(container_id: Optional[str], pod_uid: Optional[str], name: Optional[str]) -> str:
    return container_id if container_id else "%s of pod %s" % (name, pod_uid)


def allocation_target(pairs: Sequence[Pair], container_id: Optional[str], pod_uid: Optional[str],
                      name: Optional[str], *, cpus: Optional[int],
                      require_runtime_container: bool) -> Tuple[Optional[ListedContainer], str, str, Pod]:
    """The container an allocation is for, its pod UID and name, and the pod model to allocate in. ``cpus``
    overrides what the runtime says of its request; a container the runtime does not have (yet) is allowed
    only by pod UID and name, with ``cpus``, and without ``require_runtime_container``."""
    target = find_container(pairs, container_id, pod_uid, name)
    if target is not None:
        model = build_views(pairs, None if cpus is None else (target.pod_uid, target.name, cpus))[target.pod_uid].model
        return target, target.pod_uid, target.name, model
    if require_runtime_container or not (pod_uid and name):
        raise ContainerNotFoundError("container %s not found in the runtime" % describe_target(
            container_id, pod_uid, name), "allocate", container_id or "")
    if cpus is None:
        raise PodSpecError("container %s is not in the runtime: give cpus to allocate for it"
                           % describe_target(container_id, pod_uid, name))
    model = Pod(uid=pod_uid, name="", namespace="", init_containers=(),
                containers=(Container(name, Fraction(cpus), Fraction(cpus)),), qos=GUARANTEED)
    return None, pod_uid, name, model


def release_stale(policy: Policy, plan: Plan, state: CPUState, views: Dict[str, PodView],
                  scope: Optional[AbstractSet[str]], *, creating: AbstractSet[Tuple[str, str]] = frozenset()) -> None:
    """removeStaleState: entries of pods or containers the runtime no longer has (outside ``scope``, when a pass has
    one, entries are left alone; so are those of containers still being created, ``creating``)."""
    for uid, name, cpus in list(state.assignments()):
        view = views.get(uid)
        if (view is not None and name in view.latest) or (scope is not None and uid not in scope) \
                or (uid, name) in creating:
            continue
        policy.remove_container(state, uid, name)
        why = "pod is gone" if view is None else "container is gone"
        plan.actions.append(Action("release", "", "", uid, name, str(cpus), why))


def _by_creation(views: Dict[str, PodView]) -> List[PodView]:
    return sorted(views.values(), key=lambda v: min(item.created_at for item, _i in v.latest.values()))


def running_pods(views: Dict[str, PodView]) -> List[Pod]:
    """The pod models of the pods with a running container, in creation order: what a restarted kubelet admits
    again (``node/judge.py``)."""
    return [view.model for view in _by_creation(views)
            if any(listed.state == RUNNING for listed, _info in view.latest.values())]


def _finished_inits(view: PodView, state: CPUState) -> AbstractSet[str]:
    """The finished init containers of a running pod that the kubelet admits first: none of its app containers holds
    CPUs yet, so they reuse these (ALGORITHM.md section 7.4). Skipped, an adopted checkpoint lacks the init entries,
    and the restarted kubelet allocates them afresh and rejects the pod when too few CPUs are free."""
    running = any(listed.state == RUNNING for listed, _info in view.latest.values())
    if not running or any(state.get(view.uid, item.name) is not None for item in view.model.containers):
        return frozenset()
    return frozenset(item.name for item in view.model.init_containers if not item.restartable_init)


def allocate_running(plan: Plan, state: CPUState, views: Dict[str, PodView],
                     allocate: Callable[[Pod, str], Allocation]) -> None:
    """Exclusive CPUs for running Guaranteed integral containers without an entry, pods in creation order, a pod's
    finished init containers first when its app containers hold none yet (``_finished_inits``; ``allocate``: the
    manager's admission and policy, on ``state``)."""
    for view in _by_creation(views):
        inits = _finished_inits(view, state)
        for listed, _info in sorted(view.latest.values(), key=lambda pair: pair[0].created_at):
            count = view.model.guaranteed_cpus(listed.name)
            if (listed.state != RUNNING and listed.name not in inits) or state.get(view.uid, listed.name) is not None \
                    or count == 0:
                continue
            try:
                result = allocate(view.model, listed.name)
            except AllocationError as exc:
                plan.error(listed, "cannot allocate %d exclusive CPUs for container %s/%s: %s; it stays in the "
                           "shared pool" % (count, listed.pod_ref, listed.name, exc), "allocation")
                continue
            if result.exclusive:
                why = "restarted container keeps its CPUs" if listed.attempt else _why(view.model, listed.name)
                if listed.state != RUNNING:
                    why = "finished init container: its app containers reuse its CPUs"
                plan.actions.append(Action("allocate", listed.id, listed.pod_ref, view.uid, listed.name,
                                           str(result.cpus), why))


NAMED = "a Burstable pod's container named by cpu-exclusive.kubecpu.io"  # the reason of its allocation (metrics)


def _why(pod: Pod, name: str) -> str:
    return NAMED if pod.container(name).exclusive and pod.qos_class() != GUARANTEED else "Guaranteed integral request"
