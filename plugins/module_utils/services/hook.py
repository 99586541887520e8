# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu hook``: the OCI ``createRuntime`` hook that makes pinning fail closed.

The runtime runs it for every container it creates, after the container's cgroup exists and before its process
runs its first instruction, and creates the container only when it exits 0. It decides as the agent and the NRI
plugin do (the same state file, lock, policy, options and Topology Manager) and writes the container's cgroup
itself:

* a container holding exclusive CPUs in the state (the NRI plugin answered, or a restarted container): checked, and
  written only when its cgroup differs;
* a Guaranteed container with an integral CPU request and no entry: CPUs allocated under the state lock, written
  into its cgroup, and every other container cgroup below ``kubepods`` that overlaps them moved to the shared pool
  that is left (so the new container never shares a CPU);
* every other container: the current shared pool.

It cannot decide correctly (no free CPUs, the state unreadable or corrupt, the lock not free within ``LOCK_TIMEOUT``)
-> ``HookRefusal``: the CLI exits 1 with one line naming the container and the cause, the runtime refuses to create
the container, the kubelet reports ``CreateContainerError`` and retries; nothing runs unpinned. A container the
annotations do not name as a Kubernetes container passes untouched; so does everything under the ``none`` policy.

The cgroups it writes are marked (``node.hook_marks``) so that the next pass of the agent or the plugin brings the
runtime's own record in line. A container that is already right is mostly answered before this module is even
loaded (``services.hook_check``, from the view of the state this module writes after each decision it verified);
here, the check reads the state and one cgroup file, and only an allocation imports the policy and discovers the
topology.

A container whose pod already holds exclusive CPUs (an init container that ran, a sibling) is allocated in its pod
as the runtime shows it (one list call and an inspection of each sibling, before the lock is taken): the CPUs of
the pod's finished init containers are reused as the kubelet's static policy reuses them, so a pod never holds more
exclusive CPUs than the kubelet would charge it. When the runtime cannot show that pod within
``POD_VIEW_TIMEOUT``, the container is refused (the kubelet retries), never allocated beside CPUs it should reuse.
The first container of a pod needs no runtime call: there is nothing of its pod to reuse.

Where it still differs from the agent: the Topology Manager's pod scope is decided for the containers created so
far, not for the pod's whole spec (which no runtime shows).
"""

from __future__ import annotations

import re
import time
from typing import IO, TYPE_CHECKING, Callable, List, NamedTuple, Optional, Tuple

from ..errors import (AllocationError, ContainerNotFoundError, ContainerRuntimeError, HookInputError, HookRefusal,
                      KubecpuError, RuntimeTimeoutError, StoreError)
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..node.config import NodeConfig
from ..node.hook_marks import HookMarks
from ..node.kubelet_policy import kubelet_pins, options_refused
from ..node.state_store import StateStore
from ..runtime.cgroup_paths import kubepods_root
from ..runtime.cgroups import CgroupFS
from ..runtime.oci_hook import CONTAINER, HookedContainer, container, parse_state, read_config, read_stdin
from .hook_pods import HookPods

if TYPE_CHECKING:
    from ..kubelet.pod import Pod
    from ..runtime.model import Runtime

LOCK_TIMEOUT = 2.0  # seconds for the state lock: well within the runtime's hook timeout (the role writes 10 s)
POD_VIEW_TIMEOUT = 4.0  # seconds for the runtime to show a pod's containers: lock and allocation fit in the 10 s left
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


class HookResult(NamedTuple):
    action: str  # passed (not ours), checked (already right), set (its cgroup written), allocated
    container: str  # namespace/pod/container (ID), "" when passed
    cpus: str
    moved: int = 0  # other containers moved off newly exclusive CPUs
    view_error: str = ""  # the view could not be written: the next start checks the slow way (never a refusal)
    note: str = ""  # why it passed a container it would place (the kubelet pins CPUs itself)

    def to_dict(self) -> dict:  # type: ignore[type-arg]
        """The answer the CLI prints: ``view_error`` and ``note`` only when they say something."""
        return {key: value for key, value in self._asdict().items()
                if value or key not in ("view_error", "note")}


class Hook:
    def __init__(self, config: NodeConfig, lock_timeout: float = LOCK_TIMEOUT,
                 runtime: Optional[Callable[[], Runtime]] = None) -> None:
        """``runtime``: makes the runtime connection that shows a pod's containers (default: the configured one)."""
        self.config = config
        self.runtime = runtime or self._configured_runtime
        self.cgroups = CgroupFS(config.cgroup_root)
        self.store = StateStore(config.state_path, config.policy, read_only=config.read_only or None,
                                lock_timeout=lock_timeout, kubelet=config.kubelet, hard_timeout=True)
        self.marks = HookMarks.beside(self.store)
        self.pods = HookPods(config, self.runtime)  # its pod as the options see it (marked containers, partition)

    def run(self, stdin: IO[bytes]) -> HookResult:
        return self.answer(read_stdin(stdin))

    def answer(self, state_bytes: bytes) -> HookResult:
        """What ``run`` decides, from the bytes the runtime wrote on stdin."""
        state = parse_state(state_bytes)
        hooked = container(state, read_config(state.bundle))
        if hooked is None or self.config.policy != "static":
            return HookResult("passed", "", "")
        try:
            return self.place(hooked)
        except HookRefusal:
            raise
        except KubecpuError as exc:
            raise HookRefusal("container %s not created: %s" % (hooked.ref, exc)) from None

    def place(self, hooked: HookedContainer) -> HookResult:
        if not hooked.cgroup_path:
            raise HookInputError("its config.json has no linux.cgroupsPath")
        aside = kubelet_pins(self.config.kubelet_state_path, self.config.force) or options_refused(
            self.config.kubelet_state_path, self.config.options)
        if aside:  # the kubelet places this container itself: nothing written, nothing refused
            return HookResult("passed", hooked.ref, "", note=aside)
        current = self.cgroups.cpus(hooked.cgroup_path, configured=True)  # what runc wrote from the spec
        state = self.store.load()
        target, exclusive = self._target(hooked, state)
        if (state is not None and target is not None and current == target
                and not (exclusive and self._overlapping(hooked, target))):
            # verified: the next start of a container checks in the quick path
            return HookResult("checked", hooked.ref, str(target), view_error=self._write_view(state))
        # its pod as the runtime shows it, when the pod holds CPUs already: asked before the lock is taken
        pod = self._pod(hooked, state) if target is None and self._exclusive_count(hooked) else None
        with self.store.locked():  # a write: decided again on the state as it is under the lock
            state = self.store.load()
            target, exclusive = self._target(hooked, state)
            if state is None or target is None:
                if state is None and not self._exclusive_count(hooked) and self.pods.partition() is None:
                    # no state: nothing is exclusive anywhere, and without the partition every CPU is shared
                    return HookResult("passed", hooked.ref, "")
                return self._allocate(hooked, pod)
            # An entry found (the NRI plugin's, or one an earlier run committed): whoever saved it may have been
            # killed, or its reply dropped, before the others moved off its CPUs; they move now.
            written = current != target
            if written:
                self.cgroups.set_cpus(hooked.cgroup_path, target)
            moved = self._move_overlapping(hooked, target, self.pods.pool(state)) if exclusive else []
            self.marks.mark(([hooked.id] if written else []) + moved)
            return HookResult("set" if written else "checked", hooked.ref, str(target), len(moved),
                              self._write_view(state))

    def _target(self, hooked: HookedContainer, state: Optional[CPUState]) -> Tuple[Optional[CPUSet], bool]:
        """Its exclusive CPUs (and True), else the shared pool when it needs none; None when it needs an allocation
        (or there is no state)."""
        if state is None:
            return None, False
        held = state.get(hooked.pod_uid, hooked.name) if hooked.kind == CONTAINER else None
        if held is not None:
            return held, True
        return (None if self._exclusive_count(hooked) else self.pods.shared(hooked, state)), False

    def _exclusive_count(self, hooked: HookedContainer) -> int:
        return self.pods.count(hooked) if hooked.kind == CONTAINER else 0

    def _configured_runtime(self) -> Runtime:
        from ..node.factory import build_runtime  # noqa: PLC0415  # only a pod's second container asks the runtime

        return build_runtime(self.config)

    def _pod(self, hooked: HookedContainer, state: Optional[CPUState]) -> Optional[Pod]:
        """The pod model to allocate in when its pod already holds exclusive CPUs in ``state`` (its init containers
        recognised by order, from the runtime's list); None when it holds none (the container alone is its pod, as
        far as reuse goes). Refused when the runtime cannot show the pod: allocating without it could keep CPUs the
        kubelet would reuse."""
        if state is None or not any(uid == hooked.pod_uid and name != hooked.name
                                    for uid, name, _cpus in state.assignments()):
            return None
        from ..node.pod_views import seen_with  # noqa: PLC0415

        deadline = time.monotonic() + POD_VIEW_TIMEOUT
        try:
            runtime = self.runtime()
            try:
                pairs = []
                for listed in runtime.list_containers():
                    if listed.pod_uid != hooked.pod_uid or listed.id == hooked.id:
                        continue
                    if time.monotonic() > deadline:
                        raise RuntimeTimeoutError("the runtime did not show pod %s within %.0fs"
                                                  % (hooked.pod_uid, POD_VIEW_TIMEOUT), "list", hooked.pod_uid)
                    try:
                        pairs.append((listed, runtime.describe(listed)))
                    except ContainerNotFoundError:
                        continue  # removed since the list: not this pod's to reuse
            finally:
                runtime.close()
        except ContainerRuntimeError as exc:
            raise HookRefusal("container %s not created: its pod holds exclusive CPUs already and the runtime could "
                              "not show the pod, so its init containers' CPUs cannot be reused: %s"
                              % (hooked.ref, exc)) from None
        return seen_with(pairs, self.pods.info(hooked), time.time_ns(), self.pods.marks(hooked, pairs))

    def _allocate(self, hooked: HookedContainer, pod: Optional[Pod]) -> HookResult:
        """Under the lock: the policy's allocation recorded, the cgroup written, the overlapping containers moved
        (``pod``: the pod to allocate in, None for the container alone)."""
        from ..node.factory import build_policy, load_topology  # noqa: PLC0415
        from ..node.manager import NodeManager  # noqa: PLC0415  # only an allocation needs the policy

        config = self.config
        topology = load_topology(config)
        policy = build_policy(topology, config.policy, config.reserved_cpus, config.num_reserved,
                              config.policy_options, kubelet_minor=config.kubelet.minor)
        manager = NodeManager(topology, policy, self.store, None, cgroups=self.cgroups, options=config.options,
                              sysfs_root=config.sysfs_root)
        moved: List[str] = []

        def place_first(after: CPUState) -> None:  # before the state is saved: a committed entry was placed
            held = after.get(hooked.pod_uid, hooked.name)
            self.cgroups.set_cpus(hooked.cgroup_path, self.pods.shared(hooked, after) if held is None else held)
            if held is not None:
                moved.extend(self._move_overlapping(hooked, held, self.pods.pool(after)))
                manager.creating.mark(hooked.pod_uid, hooked.name, hooked.cgroup_path)  # kept till the runtime lists it
            self.marks.mark([hooked.id] + moved)

        try:
            plan = manager.allocate_pod(pod or self.pods.lone(hooked), hooked.name, before_commit=place_first)
        except AllocationError as exc:
            raise HookRefusal("container %s not created: no exclusive CPUs for it: %s" % (hooked.ref, exc)) from None
        held = plan.after.get(hooked.pod_uid, hooked.name)
        # (None: the policy gave it none after all, not Guaranteed as the model says: the shared pool)
        cpus = self.pods.shared(hooked, plan.after) if held is None else held
        return HookResult("allocated", hooked.ref, str(cpus), len(moved), self._write_view(plan.after))

    def _write_view(self, state: CPUState) -> str:
        """The view of ``state`` for the quick path; "" when written, else why not. A view is a cache: a full disk
        or a read-only ``/var/lib`` costs the next start its quick answer, never this container its creation."""
        try:
            self.store.write_hook_view(state)
        except StoreError as exc:
            return str(exc)
        return ""

    def _overlapping(self, hooked: HookedContainer, exclusive: CPUSet) -> List[str]:
        """The other container cgroups (below the kubelet's top cgroup this container's path names) on any of
        ``exclusive``."""
        kubepods = kubepods_root(hooked.cgroup_path)
        found = []
        for path in self.cgroups.container_cgroups(kubepods) if kubepods else ():
            if path == hooked.cgroup_path:
                continue
            have = self.cgroups.cpus(path, configured=True) or self.cgroups.cpus(path)  # empty: the parent's
            if have is not None and have.intersection(exclusive):
                found.append(path)
        return found

    def _move_overlapping(self, hooked: HookedContainer, exclusive: CPUSet, pool: CPUSet) -> List[str]:
        """Every other container cgroup on ``exclusive`` (its own cgroups too) to ``pool``; the IDs of those moved."""
        moved = []
        for path in self._overlapping(hooked, exclusive):
            self.cgroups.move_cpus(path, pool)
            found = _CONTAINER_ID.search(path.rsplit("/", 1)[-1])
            if found:
                moved.append(found.group(0))
        return moved
