# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The node's CPU manager (the kubelet's Manager, cpu_manager.go): orchestration only.

Every caller (``bin/kubecpu``, each module, the agent, the NRI plugin, the OCI hook) goes through ``NodeManager``.
A call observes (one list call; the container cache spares inspections), then under the state lock decides (stale
entries released, resizes, the policy behind the Topology Manager's admission) and commits (the state file, then the
interrupts: node/housekeeping.py), then applies the cgroup targets through the runtime with the lock released
(node/push.py); it returns a ``Plan``. A pass is RUNTIME.md section 6. Closes its runtime."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..errors import ContainerNotFoundError, KubeletPinsError, SafetyError, StateError, StoreError
from ..kubelet.pod import Pod
from ..kubelet.policy import STATIC, Allocation, Policy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..runtime.cgroups import CgroupFS
from ..runtime.container_cache import ContainerCache
from ..runtime.model import CREATED, RUNNING, Runtime
from .admission import Admission
from .config import ManagerOptions
from .hook_marks import CreatingMarks, HookMarks
from .housekeeping import irq_isolation, irq_pods, isolate_in_pass, kept_off
from .power import cpu_power, power_in_pass, saw_pods
from .plan import Action, Plan
from .push import push_unlocked
from .pod_views import (Pair, PodView, allocate_running, allocation_target, find_container, marked_views,
                        release_stale)
from .resize import BaselineFile, baselines_path, resize_running, sync_baselines
from .state_store import StateStore
from .targets import CgroupTargets, Scope


class NodeManager:
    """The CPU manager of one node: topology, policy, state store, and (for runtime work) a runtime."""

    def __init__(self, topology: Topology, policy: Policy, store: StateStore, runtime: Optional[Runtime] = None, *,
                 cgroups: Optional[CgroupFS] = None, cache: Optional[ContainerCache] = None,
                 options: Optional[ManagerOptions] = None, sysfs_root: Optional[str] = None) -> None:
        options = options or ManagerOptions()
        if options.isolated_cpus == "only" and not topology.isolated:
            raise SafetyError("isolated_cpus is only, but this node has no isolated CPUs "
                              "(/sys/devices/system/cpu/isolated is empty)")
        self.topology = topology
        self.policy = policy
        self.store = store
        self.runtime = runtime
        self.cache = cache if cache is not None else ContainerCache()
        self.baselines = BaselineFile(None if store.read_only else baselines_path(store.path))
        self.options = options
        self.topology_admission = Admission(topology, options.topology_manager_policy,
                                            options.topology_manager_scope, options.topology_manager_options)
        self.cgroup_targets = CgroupTargets(topology, cgroups or CgroupFS(), options, HookMarks.beside(store),
                                            reserved=policy.reserved)
        self.creating = CreatingMarks.beside(store)
        self.sysfs_root = sysfs_root  # the machine's files below it: /proc/irq for the interrupts
        self.irq = irq_isolation(options.irq_isolation, topology.all_cpus, None if store.read_only else store.path,
                                 sysfs_root)
        self.irq_pods: Optional[Set[str]] = None  # the annotated pods the last observe saw (irq_isolation annotated)
        self.power = cpu_power(options.cpu_power, None if store.read_only else store.path, sysfs_root)  # node/power.py
        self.steps_aside: Callable[[], str] = lambda: ""  # asked at every pass (node.kubelet_policy; the factory's)
        if runtime is not None:
            runtime.want_annotations = options.reads_annotations

    cgroups = property(lambda self: self.cgroup_targets.cgroups)

    def __enter__(self) -> NodeManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()

    def read_state(self) -> CPUState:  # no lock: the file is only ever replaced whole
        return self._load()

    def _load(self) -> CPUState:
        state = self.store.load_or_new()
        try:
            self.policy.start(state, running=True)  # a running manager's state, not a kubelet's start
        except StateError as exc:
            raise StateError("state file %s does not fit this node: %s" % (self.store.path, exc)) from None
        return state

    @contextlib.contextmanager
    def _locked_state(self, apply: bool = True) -> Iterator[Tuple[CPUState, Plan]]:
        """Under the state lock (a check takes none: the file is only ever replaced whole): the validated state and a
        fresh plan starting from it."""
        with self.store.locked() if apply else contextlib.nullcontext():
            state = self._load()
            yield state, Plan(state.copy())

    def _commit(self, plan: Plan, state: CPUState, apply: bool) -> None:
        plan.after = state
        isolate_in_pass(self.irq, plan, kept_off(self.options.irq_isolation, state, self.irq_pods), apply)
        power_in_pass(self.power, plan, state, apply)
        if not apply:
            return
        if not self.store.read_only:
            self.store.save(state)
            self.baselines.save(sync_baselines(self.baselines.load(), state))
        elif state != plan.before:
            raise StoreError("state file %s is read-only: the change was not recorded" % self.store.path)

    def _allocate(self, state: CPUState, pod: Pod, container: str, hint_nodes: Optional[Sequence[int]]) -> Allocation:
        """Admission, then the policy's allocation: from the pod's reusable CPUs (its finished init containers') first,
        so a pod never holds more than it is charged (docs/SECURITY.md, "reuse first"), else from the isolcpus set
        first or only, as configured. What kubecpu writes for a kubelet is the policy's choice alone."""
        affinity = self.topology_admission.admit(self.policy, state, pod, container, hint_nodes)
        isolated, mode = self.topology.isolated, self.options.isolated_cpus
        reusable = self.policy.reusable(state, pod)
        prefer = reusable if reusable else (isolated if mode == "prefer" and isolated else None)
        return self.policy.allocate(state, pod, container, affinity, within=isolated if mode == "only" else None,
                                    prefer=prefer)

    def allocate_running(self, plan: Plan, state: CPUState, views: Dict[str, PodView]) -> None:
        allocate_running(plan, state, views, lambda model, name: self._allocate(state, model, name, None))

    # --- without a runtime (bin/kubecpu allocate / release) -------------------------------------------------
    def allocate_pod(self, pod: Pod, container: str, numa_affinity: Optional[Sequence[int]] = None,
                     apply: bool = True, before_commit: Optional[Callable[[CPUState], None]] = None) -> Plan:
        """One container's allocation recorded. ``before_commit(new state)``, under the lock before the save: writes
        that must precede the commit (the OCI hook's cgroups); if it raises (or the process is killed), nothing is."""
        pod.container(container)
        with self._locked_state(apply) as (state, plan):
            result = self._allocate(state, pod, container, numa_affinity)
            plan.result = {"cpus": str(result.cpus), "exclusive": result.exclusive}
            if result.exclusive and plan.before.get(pod.uid, container) is None:
                plan.actions.append(Action("allocate", "", "%s/%s" % (pod.namespace, pod.name), pod.uid, container,
                                           str(result.cpus), "exclusive CPUs for a Guaranteed integral request"))
            if apply and before_commit is not None:
                before_commit(state)
            self._commit(plan, state, apply)
        return plan

    def release_entry(self, pod_uid: str, container: str, apply: bool = True) -> Plan:
        with self._locked_state(apply) as (state, plan):
            held = state.get(pod_uid, container)
            plan.result = {"released": str(self.policy.remove_container(state, pod_uid, container))}
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
        listed = self._runtime().list_containers()
        pairs, inspected = self.cache.facts(self._runtime(), listed, plan.skipped, self.cgroup_targets.current_request)
        present = {item.id for item in listed}
        self.cache.retain(present)
        self.cgroup_targets.forget_except(present)
        self.irq_pods = irq_pods(info for _listed, info in pairs)
        saw_pods(self.power, pairs)
        plan.counts.update(containers=len(listed), running=sum(1 for c in listed if c.state == RUNNING),
                           created=sum(1 for c in listed if c.state == CREATED and c.is_kubernetes),
                           inspected=inspected)
        return pairs

    @contextlib.contextmanager
    def session(self, apply: bool, push: bool = True,
                scope: Scope = None) -> Iterator[Tuple[CPUState, Plan, List[Pair]]]:
        """The validated state, a fresh plan and what the runtime shows; leaving, the cgroup targets planned
        (``scope``), the state committed, the updates pushed (defrag_node changes the state in it). The lock is held
        only to decide and commit, so the OCI hook's wait for it is computation, never another pod's runtime calls; a
        defragmentation's moves alone are pushed under it (each waits for the CPUs it takes, a failed one is saved)."""
        started = time.monotonic()
        runtime = self._runtime()
        aside = self.steps_aside()
        if aside:
            raise KubeletPinsError(aside)
        calls = dict(runtime.calls)
        self.cache.refresh()
        seen = Plan(CPUState(self.policy.name))
        pairs = self.observe(seen)  # the runtime's list and inspections: before the lock
        with self._locked_state(apply) as (state, plan):
            plan.skipped.extend(seen.skipped)
            plan.counts.update(seen.counts)
            yield state, plan, pairs
            if self.policy.name == STATIC:
                self.cgroup_targets.plan(plan, state, pairs, scope)
            self._commit(plan, state, apply)
            moves = any(action.action == "move" for action in plan.actions)
            if apply and push and moves:
                self.cgroup_targets.apply(plan, runtime)
                if plan.recommit:  # moves stopped at a failed one: the state says where each container is
                    self.store.save(plan.after)
            committed = self.store.generation() if apply else None
        if apply and push and not moves:
            push_unlocked(self.cgroup_targets, self.store, plan, runtime, pairs=pairs, scope=scope, committed=committed,
                          load=self._load if self.policy.name == STATIC else None)
        if apply:  # a check writes nothing, not even the cache
            self.cache.save()
        plan.runtime_calls = {k: v - calls.get(k, 0) for k, v in runtime.calls.items() if v - calls.get(k, 0)}
        plan.seconds = time.monotonic() - started

    def reconcile(self, apply: bool = True, scope: Scope = None) -> Plan:
        """A pass. ``scope``, when the caller knows what changed since its last pass (the NRI plugin): the pods decided
        again; the others keep their CPUs and are updated only when the shared pool changes. None: every pod."""
        with self.session(apply, scope=scope) as (state, plan, pairs):
            views = marked_views(plan, pairs, scope, self.options.exclusive_burstable)
            creating = self.creating.creating(lambda uid, name: uid in views and name in views[uid].latest,
                                              lambda path: self.cgroups.cpus(path) is not None)
            release_stale(self.policy, plan, state, views, scope, creating=creating)
            resize_running(self.policy, plan, state, views, self.baselines.load())
            self.allocate_running(plan, state, views)
        return plan

    def push(self, state: CPUState, apply: bool = True) -> Plan:
        """Every running container's cpuset to what ``state`` gives it (its exclusive CPUs, else the shared pool),
        through the runtime: what the kubelet's reconcile does with its checkpoint, done at once after a rewrite.
        Neither reads nor writes a state file."""
        plan = Plan(state.copy())
        pairs = self.observe(plan)
        self.cgroup_targets.plan(plan, state, pairs)
        plan.after = state
        if apply:
            self.cgroup_targets.apply(plan, self._runtime())
        return plan

    def allocate_container(self, container_id: Optional[str] = None, pod_uid: Optional[str] = None, *,
                           container: Optional[str] = None, cpus: Optional[int] = None,
                           numa_affinity: Optional[Sequence[int]] = None, apply: bool = True, push: bool = True,
                           require_runtime_container: bool = True) -> Plan:
        """Allocate for one container (by ID, or by pod UID and name), then sync cpusets node-wide."""
        with self.session(apply, push) as (state, plan, pairs):
            target, uid, name, model = allocation_target(pairs, container_id, pod_uid, container, cpus=cpus,
                                                         require_runtime_container=require_runtime_container)
            had = state.get(uid, name)
            result = self._allocate(state, model, name, numa_affinity)
            found = ("", "") if target is None else (target.id, target.pod_ref)
            plan.result = {"cpus": str(result.cpus), "exclusive": result.exclusive, "pod_uid": uid,
                           "container": name, "container_id": found[0]}
            if result.exclusive and had is None:
                plan.actions.append(Action("allocate", found[0], found[1], uid, name, str(result.cpus),
                                           "requested by the allocate module"))
        return plan

    def release_container(self, container_id: Optional[str] = None, pod_uid: Optional[str] = None, *,
                          container: Optional[str] = None, apply: bool = True, push: bool = True) -> Plan:
        """Release one container's exclusive CPUs; a running container goes back to the shared pool."""
        with self.session(apply, push) as (state, plan, pairs):
            target = find_container(pairs, container_id, pod_uid, container)
            if target is None and not (pod_uid and container):
                raise ContainerNotFoundError("container %s not found in the runtime" % container_id, "release",
                                             container_id or "")
            uid, name = (target.pod_uid, target.name) if target else (pod_uid or "", container or "")
            found = ("", "") if target is None else (target.id, target.pod_ref)
            held = state.get(uid, name)
            released = self.policy.remove_container(state, uid, name)
            plan.result = {"released": str(released), "pod_uid": uid, "container": name, "container_id": found[0]}
            if held is not None:
                plan.actions.append(Action("release", found[0], found[1], uid, name, str(held),
                                           "released by the allocate module (state absent)"))
        return plan
