# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Exclusive CPUs for chosen containers of a Burstable pod (kubernetes/kubernetes#123530; docs/HOUSEKEEPING.md).

A pod with one latency-critical container and helpers without limits is Burstable, and the kubelet's static policy
never pins it. With ``exclusive_burstable`` on, the pod names the containers to pin in its annotation::

    cpu-exclusive.kubecpu.io: "app,db"

Each named container of a Burstable pod whose CPU request is a whole number of CPUs (its limit absent or equal) is
marked in the pod model (``kubelet.pod.Container.exclusive``), and the static policy gives it that many exclusive CPUs
with its own algorithm, options and Topology Manager, as it gives a Guaranteed pod's container. Its entry is in
kubecpu's state file like any other, so the reconcile, the OCI hook, the NRI plugin's reply, the defragmentation, the
interrupt isolation and the report all see it. Only the node manager's own passes (and the hook's allocation) mark a
container: every path that decides for a kubelet (the rewrite's adoption, the rebuild, the judge, the re-admission
report) builds its pods unmarked, so such an entry never reaches a kubelet's checkpoint. Switched off (or the
annotation gone with its pod), the container is no longer marked, and the next pass gives its CPUs back to the shared
pool, as an in-place resize to a fractional request does.

Refused (``refusal``, ``parse_names``), with a message naming the container and why: an annotation that is not a list
of container names, and a named container whose pod is not Burstable, whose request is missing or fractional or whose
limit is not its request. The NRI plugin and the OCI hook refuse its creation; the agent, which sees it running,
leaves it in the shared pool and reports it. A name the pod does not have cannot be told at a container's creation
(no runtime shows a pod's spec, and its later containers are not created yet): the agent and the NRI plugin report it
once the pod's newest container is ``SETTLED_NS`` old.
"""

from __future__ import annotations

import time
from typing import AbstractSet, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..errors import PodSpecError
from ..kubelet.qos import BEST_EFFORT, BURSTABLE, GUARANTEED
from ..runtime.model import CREATED, EXCLUSIVE_ANNOTATION, MAX_NAMES_BYTES, RUNNING, ContainerInfo, ListedContainer
from .plan import Plan

ANNOTATION = EXCLUSIVE_ANNOTATION
KIND = "exclusive"  # a plan's error of a named container that may not have exclusive CPUs (the NRI plugin refuses it)
SETTLED_NS = 60 * 10**9  # a pod whose newest container is this old has created all it will: its missing names reported
_LABEL = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
Pair = Tuple[ListedContainer, ContainerInfo]


def parse_names(text: str) -> FrozenSet[str]:
    """The container names of the annotation's value: Kubernetes container names (DNS labels: at most 63 characters
    of a-z, 0-9 and '-', starting and ending with a letter or digit), separated by commas, spaces around each ignored.
    PodSpecError, naming what is wrong, for anything else."""
    if len(text.encode("utf-8", "replace")) > MAX_NAMES_BYTES:
        raise PodSpecError("%s is longer than %d bytes" % (ANNOTATION, MAX_NAMES_BYTES))
    names = [part.strip() for part in text.split(",")]
    if names == [""]:
        raise PodSpecError('%s is empty: it names no container (for example "app" or "app,db")' % ANNOTATION)
    seen = set()
    for name in names:
        if not name:
            raise PodSpecError('%s "%s" has an empty name (names are separated by single commas)' % (ANNOTATION, text))
        if len(name) > 63 or not set(name) <= _LABEL or not name[0].isalnum() or not name[-1].isalnum():
            raise PodSpecError('%s names "%s", which is not a container name (at most 63 characters of a-z, 0-9 and '
                               "'-', starting and ending with a letter or digit)" % (ANNOTATION, name))
        if name in seen:
            raise PodSpecError('%s names "%s" twice' % (ANNOTATION, name))
        seen.add(name)
    return frozenset(seen)


def refusal(info: ContainerInfo) -> str:
    """Why a container the annotation names cannot have exclusive CPUs; "" when it can (its pod Burstable, its request
    a whole number of CPUs, its limit absent or equal). The request is the runtime's CPU shares, the limit its CFS
    quota (RUNTIME.md 3)."""
    if info.qos == GUARANTEED:
        return ("its pod is Guaranteed: the static policy already pins its containers with a whole number of CPUs, and "
                "%s is for Burstable pods" % ANNOTATION)
    if info.qos == BEST_EFFORT:
        return "its pod is BestEffort: it has no CPU request to pin"
    if info.qos != BURSTABLE:
        return "its QoS class is unknown (its cgroup is not below a kubelet's Burstable pod)"
    milli = info.cpu_request_milli
    if milli == 0:
        return "it has no CPU request (exclusive CPUs need a request of a whole number of CPUs)"
    if milli % 1000:
        return "its CPU request %dm is not a whole number of CPUs" % milli
    limit = info.cpu_limit_milli
    if limit and limit != milli:
        return "its CPU limit %dm is not its request %dm (the limit must be absent or equal)" % (limit, milli)
    return ""


def named(info: ContainerInfo) -> Tuple[bool, str]:
    """Whether the pod's annotation names this container, and why it may not have exclusive CPUs ("" when it may, or
    when it is not named)."""
    text = (info.annotations or {}).get(ANNOTATION)
    if text is None:
        return False, ""
    try:
        names = parse_names(text)
    except PodSpecError as exc:
        return True, "its pod's %s cannot be read, so which containers it names is not known: %s" % (ANNOTATION, exc)
    if info.name not in names:
        return False, ""
    return True, refusal(info)


def refused_message(info: ContainerInfo, why: str) -> str:
    ref = "%s/%s" % (info.pod_namespace or "default", info.pod_name or info.pod_uid)
    return "container %s of pod %s is named by %s but %s" % (info.name, ref, ANNOTATION, why)


def marked(plan: Plan, pairs: Sequence[Pair], on: bool, now_ns: Optional[int] = None) -> FrozenSet[Tuple[str, str]]:
    """The containers (pod UID, name) marked for exclusive CPUs among ``pairs``; none unless ``on``. Each named
    container that may not have them is the plan's error (kind ``exclusive``: it stays in the shared pool, and the NRI
    plugin refuses its creation); each name a settled running pod does not have, an error of kind ``annotation``."""
    if not on:
        return frozenset()
    found = set()
    pods: Dict[str, List[Pair]] = {}
    for listed, info in pairs:
        if not listed.is_kubernetes or ANNOTATION not in (info.annotations or {}):
            continue
        pods.setdefault(listed.pod_uid, []).append((listed, info))
        if listed.state not in (RUNNING, CREATED):
            continue
        is_named, why = named(info)
        if why:
            plan.error(listed, refused_message(info, why) + ": it stays in the shared pool", KIND)
        elif is_named:
            found.add((listed.pod_uid, listed.name))
    _missing(plan, pods, time.time_ns() if now_ns is None else now_ns)
    return frozenset(found)


def _missing(plan: Plan, pods: Dict[str, List[Pair]], now_ns: int) -> None:
    """The names a running pod's annotation gives that none of its containers has, once its newest container is
    ``SETTLED_NS`` old (before, they may still be created)."""
    for members in pods.values():
        listed, info = members[0]
        try:
            names = parse_names((info.annotations or {})[ANNOTATION])
        except PodSpecError:
            continue  # said per container
        have = {item.name for item, _info in members}
        lacking = sorted(names - have)
        newest = max(item.created_at for item, _info in members)
        if lacking and any(item.state == RUNNING for item, _info in members) and now_ns - newest >= SETTLED_NS:
            plan.errors.append({"error": "pod %s: %s names %s, which the pod does not have (its containers: %s)"
                                         % (listed.pod_ref, ANNOTATION, ", ".join(lacking), ", ".join(sorted(have))),
                                "kind": "annotation", "pod": listed.pod_ref})


def refused_in(plan_errors: Sequence[Dict[str, str]], container_id: str) -> Optional[str]:
    """The refusal of container ``container_id`` among a pass's errors (the NRI plugin refuses its creation)."""
    return next((e["error"] for e in plan_errors if e.get("kind") == KIND and e.get("container_id") == container_id),
                None)


def marked_names(pairs: Sequence[Pair], marks: AbstractSet[Tuple[str, str]]) -> FrozenSet[str]:
    """Of ``marks``, the names of the containers of the pod of ``pairs``' first (the OCI hook's pod)."""
    uid = pairs[0][0].pod_uid if pairs else ""
    return frozenset(name for pod, name in marks if pod == uid)


def follows_limit(info: ContainerInfo, on: bool) -> bool:
    """Whether an in-place resize of this container is seen in its CFS quota: a Burstable container whose limit is its
    request, with ``exclusive_burstable`` on (without a limit, cgroupfs shows a resize only as a CPU weight, which
    cannot tell a whole number of CPUs: the NRI plugin, which the runtime tells, sees it; the agent at a restart)."""
    return on and info.qos == BURSTABLE and info.cpu_limit_milli > 0 and info.cpu_limit_milli == info.cpu_request_milli


def with_quota(info: ContainerInfo, quota: int, period: int) -> ContainerInfo:
    """The facts with the CFS quota cgroupfs shows now; a Burstable container's request follows its limit (an in-place
    resize keeps them equal: ``follows_limit``)."""
    changed = info._replace(cpu_quota=quota, cpu_period=period)
    if info.qos == BURSTABLE:
        changed = changed._replace(cpu_shares=max(2, changed.cpu_limit_milli * 1024 // 1000))
    return changed
