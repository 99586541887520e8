# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The node's CPU manager (the kubelet's Manager, cpu_manager.go): allocate, remove and reconcile.

Every caller (``bin/kubecpu``, each Ansible module, the agent loop) goes through ``NodeManager``, so they
cannot disagree. A call returns a ``Plan`` (state before and after, actions); with ``apply`` the state is
saved (durably, under the store's lock) and the runtime actions are carried out, still under the lock, so
two callers never double-book a CPU or push stale sets. Without ``apply`` nothing is written or changed.

Reconcile, one pass (better than the kubelet's, RUNTIME.md section 6):
1. one list call; containers seen for the first time are inspected once (cached by ID);
2. state entries of pods and containers the runtime no longer has are released (leaked CPUs);
3. running Guaranteed containers with an integral CPU request and no entry get exclusive CPUs
   (init containers first; their CPUs are reused by the pod's app containers, as the kubelet does);
   a restarted container (new ID, same pod and name) finds its entry and keeps its CPUs;
4. every running container's cpuset (read from cgroupfs, which also verifies what the runtime applied)
   is compared with its target (exclusive set, else the shared pool) and updated where it differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from fractions import Fraction
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from .cgroups import CgroupFS
from .cpuset import CPUSet
from .errors import (AllocationError, ContainerNotFoundError, ContainerRuntimeError, KubecpuError, PodSpecError,
                     SafetyError, StateError, StoreError, TopologyAffinityError)
from .hints import TopologyHint, container_hints, pod_hints
from .pod import GUARANTEED, Container, Pod
from .policy import STATIC, Policy, StaticPolicy
from .runtime import EXITED, RUNNING, ContainerInfo, ListedContainer, Runtime
from .state import CPUState
from .state_store import KUBELET_PATH, StateStore
from .topology import Topology
from .topology_manager import SCOPES, TopologyManager

ISOLATED_MODES = ("ignore", "prefer", "only")
Pair = Tuple[ListedContainer, ContainerInfo]
QUOTA_MODES = ("keep", "unlimited")


class ManagerOptions(NamedTuple):
    """Beyond the kubelet; each off by default so the kubelet-exact behaviour stays the default."""

    isolated_cpus: str = "ignore"  # ignore | prefer | only: take exclusive CPUs from the isolcpus set
    align_memory: bool = False  # cpuset.mems = NUMA nodes of the exclusive CPUs
    cpu_quota: str = "keep"  # keep | unlimited: no CFS quota for exclusively pinned containers (and their pod)
    topology_manager_policy: str = "none"  # with a policy, CPUs are chosen inside the merged NUMA affinity
    topology_manager_scope: str = "container"
    topology_manager_options: Optional[Mapping[str, str]] = None


class Action(NamedTuple):
    action: str  # allocate | update | release | quota
    container_id: str
    pod: str
    pod_uid: str
    container: str
    cpus: str
    reason: str
    mems: Optional[str] = None
    quota: Optional[int] = None
    period: Optional[int] = None
    cgroup: str = ""

    def to_dict(self) -> Dict[str, Any]:
        doc = {k: v for k, v in self._asdict().items() if v is not None and v != ""}
        doc.setdefault("container_id", "")
        doc.setdefault("cpus", "")
        return doc


class Plan:
    """What a call would do or did: the state before and after, actions, per-container errors."""

    def __init__(self, before: CPUState) -> None:
        self.before = before
        self.after = before
        self.actions: List[Action] = []
        self.errors: List[Dict[str, str]] = []
        self.skipped: List[Dict[str, str]] = []
        self.applied = False
        self.counts: Dict[str, int] = {}
        self.runtime_calls: Dict[str, int] = {}
        self.seconds = 0.0
        self.result: Dict[str, Any] = {}

    @property
    def changed(self) -> bool:
        return self.before != self.after or bool(self.actions)

    def error(self, container: Optional[ListedContainer], message: str, kind: str = "error") -> None:
        entry = {"error": message, "kind": kind}
        if container is not None:
            entry.update(container_id=container.id, pod=container.pod_ref, container=container.name)
        self.errors.append(entry)

    def to_dict(self) -> Dict[str, Any]:
        counts = dict(self.counts)
        for action in ("allocate", "update", "release", "quota"):
            counts[action] = sum(1 for a in self.actions if a.action == action)
        counts["errors"] = len(self.errors)
        doc = {"changed": self.changed, "actions": [a.to_dict() for a in self.actions], "errors": self.errors,
               "skipped": self.skipped, "counts": counts, "runtime_calls": self.runtime_calls,
               "applied": self.applied, "duration_seconds": round(self.seconds, 6),
               "state_before": self.before.to_dict(), "state_after": self.after.to_dict()}
        doc.update(self.result)
        return doc


# --- the container cache (what a container is never changes for an ID) ----------------------------------------
class ContainerCache:
    """Container facts by ID plus the cpusets last pushed; in memory, optionally mirrored in a small file."""

    def __init__(self, path: Optional[str] = None, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.infos: Dict[str, ContainerInfo] = {}
        self.states: Dict[str, str] = {}
        self.dirty = False
        self._seen: Optional[Tuple[int, int, int]] = None  # the file's (inode, size, mtime) last read or written
        self.refresh()

    def refresh(self) -> None:
        """Take in what other processes have inspected since this cache last read or wrote its file (a stat when
        nothing changed): called under the state lock, so concurrent one-shot runs inspect each container once."""
        if not self.path:
            return
        try:
            info = os.stat(self.path)
            signature = (info.st_ino, info.st_size, info.st_mtime_ns)
            if signature == self._seen:
                return
            with open(self.path, encoding="utf-8") as handle:
                doc = json.load(handle)
            self._seen = signature
            for item in doc.get("containers", []):
                known = ContainerInfo.from_dict(item["info"])
                if known.id not in self.infos:
                    self.infos[known.id] = known
                    self.states[known.id] = str(item.get("state", ""))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, KubecpuError):
            pass  # a cache: what it cannot tell is inspected again

    def get(self, listed: ListedContainer) -> Optional[ContainerInfo]:
        """The cached facts, unless the container has since exited (its exit status is new information)."""
        info = self.infos.get(listed.id)
        if info is None or (listed.state == EXITED and self.states.get(listed.id) != EXITED):
            return None
        return info

    def put(self, info: ContainerInfo, state: str) -> None:
        self.infos[info.id] = info
        self.states[info.id] = state
        self.dirty = True

    def retain(self, ids: Set[str]) -> None:
        for gone in [cid for cid in self.infos if cid not in ids]:
            del self.infos[gone]
            self.states.pop(gone, None)
            self.dirty = True

    def save(self) -> None:
        if not self.path or not self.dirty or self.read_only:
            return
        doc = {"format": "kubecpu.container-cache/v1",
               "containers": [{"state": self.states.get(cid, ""), "info": info.to_dict()}
                              for cid, info in sorted(self.infos.items())]}
        directory = os.path.dirname(os.path.abspath(self.path))
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(prefix=".containers.tmp-", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(doc, handle, separators=(",", ":"))
                handle.flush()
                info = os.fstat(handle.fileno())
            os.replace(tmp, self.path)
            self._seen = (info.st_ino, info.st_size, info.st_mtime_ns)
            self.dirty = False


# --- what the runtime shows, grouped by pod ----------------------------------------------------------------
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


def _container_model(info: ContainerInfo, init: bool, cpus: Optional[int] = None) -> Container:
    milli = info.requested_milli() if cpus is None else cpus * 1000
    request = Fraction(milli, 1000) if milli else None
    return Container(name=info.name, cpu_request=request, cpu_limit=request, init=init)


def build_views(pairs: Sequence[Pair],
                override: Optional[Tuple[str, str, int]] = None) -> Dict[str, PodView]:
    """Pods from the runtime: the newest attempt per container name, init containers recognised by order.

    ``override`` (pod UID, container name, CPUs) replaces what the runtime says of one container's request
    (the allocate module's ``cpus``): it is then treated as Guaranteed with that integral request.
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
            (inits if init else apps).append(_container_model(info, init, cpus))
        if override is not None and override[0] == uid:
            qos = GUARANTEED
        first = ordered[0][0]
        views[uid] = PodView(uid, latest, Pod(uid=uid, name=first.pod_name, namespace=first.pod_namespace,
                                              init_containers=tuple(inits), containers=tuple(apps), qos=qos))
    return views


def check_kubelet_policy(path: str = KUBELET_PATH, force: bool = False) -> Optional[str]:
    """Refuse to manage CPUs when the kubelet pins them itself (its checkpoint says ``static``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    policy = next((v for k, v in doc.items() if k.lower() == "policyname"), None) if isinstance(doc, dict) else None
    if policy == STATIC and not force:
        raise SafetyError("the kubelet pins CPUs on this node itself (%s says policy static): two CPU managers "
                          "would fight over cpusets; use kubecpu only with cpuManagerPolicy none, or set force "
                          "to override" % path)
    return policy if isinstance(policy, str) else None


def check_reservation(policy: Policy) -> None:
    if isinstance(policy, StaticPolicy) and not policy.reserved:
        raise SafetyError("the static policy needs at least one reserved CPU when it manages running containers: "
                          "with none, allocations can empty the shared pool and the state stops validating "
                          "(\"default cpuset cannot be empty\"); set reserved_cpus or num_reserved")


class NodeManager:
    """The CPU manager of one node: topology, policy, state store, and (for runtime work) a runtime."""

    def __init__(self, topology: Topology, policy: Policy, store: StateStore, runtime: Optional[Runtime] = None, *,
                 cgroups: Optional[CgroupFS] = None, cache: Optional[ContainerCache] = None,
                 options: Optional[ManagerOptions] = None) -> None:
        options = options or ManagerOptions()
        if options.isolated_cpus not in ISOLATED_MODES:
            raise PodSpecError("isolated_cpus must be one of %s" % ", ".join(ISOLATED_MODES))
        if options.cpu_quota not in QUOTA_MODES:
            raise PodSpecError("cpu_quota must be one of %s" % ", ".join(QUOTA_MODES))
        if options.isolated_cpus == "only" and not topology.isolated:
            raise SafetyError("isolated_cpus is only, but this node has no isolated CPUs "
                              "(/sys/devices/system/cpu/isolated is empty)")
        self.topology = topology
        self.policy = policy
        self.store = store
        self.runtime = runtime
        self.cgroups = cgroups or CgroupFS()
        self.cache = cache if cache is not None else ContainerCache()
        self.options = options
        if options.topology_manager_scope not in SCOPES:
            raise PodSpecError("topology_manager_scope must be one of %s" % ", ".join(SCOPES))
        self.topology_manager: Optional[TopologyManager] = None
        if options.topology_manager_policy != "none":
            self.topology_manager = TopologyManager(options.topology_manager_policy, sorted(topology.numa_cpus),
                                                    options.topology_manager_options, topology.numa_distances)
        self.pushed: Dict[str, CPUSet] = {}  # container ID -> cpuset last pushed (when cgroupfs cannot be read)

    # --- state --------------------------------------------------------------------------------------------
    def _load(self) -> CPUState:
        state = self.store.load_or_new()
        try:
            self.policy.start(state)
        except StateError as exc:
            raise StateError("state file %s does not fit this node: %s" % (self.store.path, exc)) from None
        return state

    def _commit(self, plan: Plan, state: CPUState, apply: bool) -> None:
        plan.after = state
        if not apply:
            return
        if not self.store.read_only:
            self.store.save(state)
        elif state != plan.before:
            raise StoreError("state file %s is read-only: the change was not recorded" % self.store.path)

    def read_state(self) -> CPUState:
        with self.store.locked():
            return self._load()

    @contextlib.contextmanager
    def _locked_state(self) -> Iterator[Tuple[CPUState, Plan]]:
        """Under the state lock: the validated state and a fresh plan starting from it."""
        with self.store.locked():
            state = self._load()
            yield state, Plan(state.copy())

    def _allocate_kwargs(self) -> Dict[str, Any]:
        isolated = self.topology.isolated
        if self.options.isolated_cpus == "only":
            return {"within": isolated}
        if self.options.isolated_cpus == "prefer" and isolated:
            return {"prefer": isolated}
        return {}

    def _admit(self, state: CPUState, pod: Pod, container: str,
               hint_nodes: Optional[Sequence[int]]) -> Optional[Sequence[int]]:
        """The Topology Manager's admission of a container about to get exclusive CPUs: the CPU hints (and a
        preferred hint for ``hint_nodes``, a device's NUMA node) merged under the policy. Returns the NUMA
        affinity to allocate in; raises TopologyAffinityError when the policy does not admit it. Without a policy
        ``hint_nodes`` stays a plain NUMA preference, as before."""
        if self.topology_manager is None or not isinstance(self.policy, StaticPolicy):
            return hint_nodes
        policy = self.policy
        if state.get(pod.uid, container) is not None or pod.guaranteed_cpus(container) == 0:
            return hint_nodes
        available, reusable = policy.available(state), policy.reusable(state, pod)
        if self.options.topology_manager_scope == "pod":
            held = [(pod.guaranteed_cpus(c.name), state.get(pod.uid, c.name)) for c in pod.all_containers()]
            cpu_hints = pod_hints(self.topology, policy.options, available, pod.guaranteed_pod_cpus(),
                                  reusable=reusable, assigned=[(r, cpus) for r, cpus in held if cpus is not None])
        else:
            cpu_hints = container_hints(self.topology, policy.options, available, pod.guaranteed_cpus(container),
                                        reusable=reusable)
        providers: List[Optional[Mapping[str, Optional[Sequence[TopologyHint]]]]] = [{"cpu": cpu_hints}]
        if hint_nodes:
            providers.append({"device": [TopologyHint(tuple(sorted(hint_nodes)), True)]})
        merged = self.topology_manager.merge(providers)
        if not merged.admit:
            raise TopologyAffinityError("topology manager policy %s, scope %s, CPU hints %s"
                                        % (self.topology_manager.policy, self.options.topology_manager_scope,
                                           "none" if cpu_hints is None else
                                           ", ".join("%s%s" % (list(h.affinity or ()), "" if h.preferred else "?")
                                                     for h in cpu_hints) or "empty"))
        return merged.nodes

    # --- without a runtime (bin/kubecpu allocate / release) -------------------------------------------------
    def allocate_pod(self, pod: Pod, container: str, numa_affinity: Optional[Sequence[int]] = None,
                     apply: bool = True) -> Plan:
        pod.container(container)
        with self._locked_state() as (state, plan):
            affinity = self._admit(state, pod, container, numa_affinity)
            result = self.policy.allocate(state, pod, container, affinity, **self._allocate_kwargs())
            plan.result = {"cpus": str(result.cpus), "exclusive": result.exclusive}
            if result.exclusive and plan.before.get(pod.uid, container) is None:
                plan.actions.append(Action("allocate", "", "%s/%s" % (pod.namespace, pod.name), pod.uid, container,
                                           str(result.cpus), "exclusive CPUs for a Guaranteed integral request"))
            self._commit(plan, state, apply)
        return plan

    def release_entry(self, pod_uid: str, container: str, apply: bool = True) -> Plan:
        with self._locked_state() as (state, plan):
            held = state.get(pod_uid, container)
            released = self.policy.remove_container(state, pod_uid, container)
            plan.result = {"released": str(released)}
            if held is not None:
                plan.actions.append(Action("release", "", "", pod_uid, container, str(held), "released on request"))
            self._commit(plan, state, apply)
        return plan

    # --- with the runtime --------------------------------------------------------------------------------------
    def _runtime(self) -> Runtime:
        if self.runtime is None:
            raise SafetyError("this operation needs a container runtime")
        return self.runtime

    def observe(self, plan: Plan) -> List[Pair]:
        """The Kubernetes containers the runtime has, each with its facts: one list call, and an inspection
        only for containers not seen before (or newly exited). Vanished ones go to ``plan.skipped``."""
        runtime = self._runtime()
        listed = runtime.list_containers()
        pairs: List[Pair] = []
        inspected = 0
        for item in listed:
            if not item.is_kubernetes:
                continue
            info = self.cache.get(item)
            if info is None:
                try:
                    info = runtime.describe(item)
                except ContainerNotFoundError:
                    plan.skipped.append({"container_id": item.id, "pod": item.pod_ref, "container": item.name,
                                         "reason": "removed between the list and its inspection"})
                    continue
                inspected += 1
                self.cache.put(info, item.state)
            pairs.append((item, info))
        present = {item.id for item in listed}
        self.cache.retain(present)
        self.pushed = {cid: cpus for cid, cpus in self.pushed.items() if cid in present}
        plan.counts.update(containers=len(listed), running=sum(1 for c in listed if c.state == RUNNING),
                           inspected=inspected)
        return pairs

    @contextlib.contextmanager
    def _session(self) -> Iterator[Tuple[CPUState, Plan, List[Pair]]]:
        """Under the state lock: the validated state, a fresh plan, and what the runtime shows; accounts the
        runtime calls and the time on the way out."""
        started = time.monotonic()
        calls = dict(self._runtime().calls)
        with self._locked_state() as (state, plan):
            self.cache.refresh()
            yield state, plan, self.observe(plan)
        self._account(plan, calls, started)

    def reconcile(self, apply: bool = True) -> Plan:
        with self._session() as (state, plan, pairs):
            views = build_views(pairs)
            self._release_stale(plan, state, views)
            if self.policy.name == STATIC:
                self._allocate_running(plan, state, views)
            self._finish(plan, state, pairs, apply)
        return plan

    def admission(self) -> Dict[str, Any]:
        """What if every running container were admitted afresh under this manager's Topology Manager policy (as
        the kubelet re-admits them after its checkpoint is removed): per running Guaranteed container with an
        integer request, admitted or rejected, and where its CPUs would land. Reads the runtime; changes nothing."""
        listing = Plan(CPUState(self.policy.name))
        views = build_views(self.observe(listing))
        fresh = CPUState(self.policy.name)
        self.policy.start(fresh)
        simulated = Plan(fresh.copy())
        if isinstance(self.policy, StaticPolicy):
            self._allocate_running(simulated, fresh, views)
        rows: List[Dict[str, Any]] = []
        for action in simulated.actions:
            cpus = CPUSet.parse(action.cpus)
            rows.append({"pod": action.pod, "pod_uid": action.pod_uid, "container": action.container,
                         "container_id": action.container_id, "admitted": True, "cpus": action.cpus,
                         "numa_nodes": sorted({self.topology.loc[c][2] for c in cpus if c in self.topology.loc}),
                         "reason": None})
        for error in simulated.errors:
            rows.append({"pod": error.get("pod"), "pod_uid": None, "container": error.get("container"),
                         "container_id": error.get("container_id"), "admitted": False, "cpus": None,
                         "numa_nodes": [], "reason": error["error"],
                         "topology": TopologyAffinityError.TEXT in error["error"]})
        rows.sort(key=lambda r: (r["pod"] or "", r["container"] or ""))
        return {"topology_manager_policy": self.options.topology_manager_policy,
                "topology_manager_scope": self.options.topology_manager_scope, "containers": rows,
                "admitted": sum(1 for r in rows if r["admitted"]),
                "rejected": sum(1 for r in rows if not r["admitted"]), "skipped": listing.skipped}

    def allocate_container(self, container_id: Optional[str] = None, pod_uid: Optional[str] = None, *,
                           container: Optional[str] = None, cpus: Optional[int] = None,
                           numa_affinity: Optional[Sequence[int]] = None, apply: bool = True, push: bool = True,
                           require_runtime_container: bool = True) -> Plan:
        """Allocate for one container (by ID, or by pod UID and name), then sync cpusets node-wide."""
        with self._session() as (state, plan, pairs):
            target = _find(pairs, container_id, pod_uid, container)
            if target is None:
                if require_runtime_container or not (pod_uid and container):
                    raise ContainerNotFoundError("container %s not found in the runtime" % _describe(
                        container_id, pod_uid, container), "allocate", container_id or "")
                if cpus is None:
                    raise PodSpecError("container %s is not in the runtime: give cpus to allocate for it"
                                       % _describe(container_id, pod_uid, container))
                model = Pod(uid=pod_uid, name="", namespace="", init_containers=(),
                            containers=(Container(container, Fraction(cpus), Fraction(cpus)),), qos=GUARANTEED)
                uid, name = pod_uid, container
            else:
                uid, name = target.pod_uid, target.name
                override = (uid, name, cpus) if cpus is not None else None
                model = build_views(pairs, override)[uid].model
            had = state.get(uid, name)
            affinity = self._admit(state, model, name, numa_affinity)
            result = self.policy.allocate(state, model, name, affinity, **self._allocate_kwargs())
            plan.result = {"cpus": str(result.cpus), "exclusive": result.exclusive, "pod_uid": uid,
                           "container": name, "container_id": target.id if target else ""}
            if result.exclusive and had is None:
                plan.actions.append(Action("allocate", target.id if target else "", target.pod_ref if target else "",
                                           uid, name, str(result.cpus), "requested by the allocate module"))
            self._finish(plan, state, pairs, apply, push)
        return plan

    def release_container(self, container_id: Optional[str] = None, pod_uid: Optional[str] = None, *,
                          container: Optional[str] = None, apply: bool = True, push: bool = True) -> Plan:
        """Release one container's exclusive CPUs; a running container goes back to the shared pool."""
        with self._session() as (state, plan, pairs):
            target = _find(pairs, container_id, pod_uid, container)
            if target is None and not (pod_uid and container):
                raise ContainerNotFoundError("container %s not found in the runtime" % container_id, "release",
                                             container_id or "")
            uid, name = (target.pod_uid, target.name) if target else (pod_uid or "", container or "")
            held = state.get(uid, name)
            released = self.policy.remove_container(state, uid, name)
            plan.result = {"released": str(released), "pod_uid": uid, "container": name,
                           "container_id": target.id if target else ""}
            if held is not None:
                plan.actions.append(Action("release", target.id if target else "", target.pod_ref if target else "",
                                           uid, name, str(held), "released by the allocate module (state absent)"))
            self._finish(plan, state, pairs, apply, push)
        return plan

    # --- the steps ------------------------------------------------------------------------------------------
    def _release_stale(self, plan: Plan, state: CPUState, views: Dict[str, PodView]) -> None:
        """removeStaleState: entries of pods or containers the runtime no longer has."""
        for uid, name, cpus in list(state.assignments()):
            view = views.get(uid)
            if view is not None and name in view.latest:
                continue
            self.policy.remove_container(state, uid, name)
            why = "pod is gone" if view is None else "container is gone"
            plan.actions.append(Action("release", "", "", uid, name, str(cpus), why))

    def _allocate_running(self, plan: Plan, state: CPUState, views: Dict[str, PodView]) -> None:
        ordered = sorted(views.values(), key=lambda v: min(item.created_at for item, _i in v.latest.values()))
        for view in ordered:
            members = sorted(view.latest.values(), key=lambda pair: pair[0].created_at)
            for listed, _info in members:
                if listed.state != RUNNING or state.get(view.uid, listed.name) is not None:
                    continue
                if view.model.guaranteed_cpus(listed.name) == 0:
                    continue
                try:
                    affinity = self._admit(state, view.model, listed.name, None)
                    result = self.policy.allocate(state, view.model, listed.name, affinity, **self._allocate_kwargs())
                except AllocationError as exc:
                    plan.error(listed, "cannot allocate %d exclusive CPUs for container %s/%s: %s; it stays in "
                               "the shared pool" % (view.model.guaranteed_cpus(listed.name), listed.pod_ref,
                                                    listed.name, exc), "allocation")
                    continue
                why = "restarted container keeps its CPUs" if listed.attempt else "Guaranteed integral request"
                plan.actions.append(Action("allocate", listed.id, listed.pod_ref, view.uid, listed.name,
                                           str(result.cpus), why))

    def _targets(self, plan: Plan, state: CPUState, pairs: Sequence[Pair]) -> None:
        """The cpuset (and with the options, memory nodes and quota) each running container should have."""
        if self.policy.name != STATIC:
            return
        all_nodes = CPUSet(self.topology.numa_cpus)
        pods_exclusive: Dict[str, bool] = {}
        for listed, info in pairs:
            if listed.state != RUNNING or not listed.is_kubernetes:
                continue
            assigned = state.get(listed.pod_uid, listed.name)
            exclusive = assigned is not None
            pods_exclusive[listed.pod_uid] = pods_exclusive.get(listed.pod_uid, False) or exclusive
            target = assigned if assigned is not None else state.default
            current = self.cgroups.cpus(info.cgroup_path)
            known = current if current is not None else self.pushed.get(listed.id)
            cpus = None if known == target else target
            mems = quota = period = None
            if self.options.align_memory:
                want = CPUSet(self.topology.loc[c][2] for c in target) if exclusive else all_nodes
                if self.cgroups.mems(info.cgroup_path) != want:
                    mems = want
            if self.options.cpu_quota == "unlimited":
                want_quota = -1 if exclusive else (info.cpu_quota if info.cpu_quota > 0 else -1)
                have = self.cgroups.quota(info.cgroup_path)
                if have is not None and have[0] != want_quota:
                    quota, period = want_quota, (info.cpu_period or have[1]) if want_quota > 0 else None
            if cpus is None and mems is None and quota is None:
                continue
            shown = target if cpus is None else cpus
            if cpus is None:
                why = "memory nodes or quota differ"
            elif not exclusive:
                why = "shared pool is now %s (was %s)" % (target, "unknown" if known is None else known)
            elif listed.id in self.pushed:
                why = "exclusive CPUs drifted in cgroupfs (%s)" % known
            elif listed.attempt > 0:
                why = "restarted container keeps its CPUs"
            else:
                why = "exclusive CPUs"
            plan.actions.append(Action("update", listed.id, listed.pod_ref, listed.pod_uid, listed.name, str(shown),
                                       why, None if mems is None else str(mems), quota, period,
                                       info.cgroup_path))
        if self.options.cpu_quota == "unlimited":
            self._pod_quotas(plan, pairs, pods_exclusive)

    def _pod_quotas(self, plan: Plan, pairs: Sequence[Pair],
                    pods_exclusive: Dict[str, bool]) -> None:
        """Pod-level CFS quota: none while the pod holds exclusive CPUs, else the sum of its containers' quotas."""
        seen: Set[str] = set()
        for listed, info in pairs:
            if listed.pod_uid in seen or listed.pod_uid not in pods_exclusive or info.qos != GUARANTEED:
                continue
            seen.add(listed.pod_uid)
            path = info.pod_cgroup_path
            have = self.cgroups.quota(path)
            if have is None:
                continue
            if pods_exclusive[listed.pod_uid]:
                want = -1
            else:
                quotas = [i.cpu_quota for other, i in pairs
                          if other.pod_uid == listed.pod_uid and other.state == RUNNING]
                want = sum(quotas) if quotas and all(q > 0 for q in quotas) else -1
            if have[0] != want:
                plan.actions.append(Action("quota", "", listed.pod_ref, listed.pod_uid, "", "",
                                           "pod-level CFS quota", quota=want, period=have[1], cgroup=path))

    def _finish(self, plan: Plan, state: CPUState, pairs: Sequence[Pair],
                apply: bool, push: bool = True) -> None:
        """Plan the cpuset updates; with ``apply`` save the state, and with ``push`` too carry them out."""
        self._targets(plan, state, pairs)
        self._commit(plan, state, apply)
        if apply and push:
            self._apply(plan)
        self.cache.save()

    def _apply(self, plan: Plan) -> None:
        """Shrink first (shared containers leaving CPUs that became exclusive), pin last; pod quotas first."""
        runtime = self._runtime()
        order = {"quota": 0, "update": 1}
        updates = sorted((a for a in plan.actions if a.action in order), key=lambda a: (
            order[a.action], a.quota is None or a.quota >= 0, a.reason.startswith("exclusive")))
        failed: List[Action] = []
        for action in updates:
            try:
                if action.action == "quota":
                    self.cgroups.set_quota(action.cgroup, action.quota or -1, action.period or 100000)
                    continue
                cpus = CPUSet.parse(action.cpus)
                runtime.update(action.container_id, cpuset_cpus=cpus,
                               cpuset_mems=None if action.mems is None else CPUSet.parse(action.mems),
                               cpu_quota=action.quota, cpu_period=action.period)
                self.pushed[action.container_id] = cpus
            except ContainerNotFoundError:
                failed.append(action)
                plan.skipped.append({"container_id": action.container_id, "pod": action.pod,
                                     "container": action.container, "reason": "removed before its update"})
            except (ContainerRuntimeError, StoreError) as exc:
                failed.append(action)
                plan.errors.append({"container_id": action.container_id, "pod": action.pod,
                                    "container": action.container, "error": str(exc), "kind": "update"})
        plan.actions = [a for a in plan.actions if a not in failed]
        plan.applied = True

    def _account(self, plan: Plan, calls_before: Dict[str, int], started: float) -> None:
        after = self._runtime().calls
        plan.runtime_calls = {k: v - calls_before.get(k, 0) for k, v in after.items() if v - calls_before.get(k, 0)}
        plan.seconds = time.monotonic() - started


def _find(pairs: Sequence[Pair], container_id: Optional[str], pod_uid: Optional[str],
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


def _describe(container_id: Optional[str], pod_uid: Optional[str], name: Optional[str]) -> str:
    return container_id if container_id else "%s of pod %s" % (name, pod_uid)
