"""A container runtime in memory that behaves like containerd + runc where a CPU manager can tell:
updates land in a fake cgroupfs tree (cpuset.cpus, cpuset.mems, cpu.cfs_quota_us), zero fields are left
alone, unknown IDs raise NotFound. Used by the manager tests and the reconcile benchmark."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (
    ContainerNotFoundError, RuntimeUnavailableError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (
    EXITED, RUNNING, ContainerInfo, ListedContainer, RuntimeBase)

from .cri_units import milli_to_quota, milli_to_shares

PARENTS = {"Guaranteed": "/kubepods/pod%s", "Burstable": "/kubepods/burstable/pod%s",
           "BestEffort": "/kubepods/besteffort/pod%s"}


class FakeRuntime(RuntimeBase):
    name = "fake"

    def __init__(self, cgroup_root: str, all_cpus: str = "0-7", mems: str = "0") -> None:
        super().__init__()
        self.root = cgroup_root
        self.all_cpus = all_cpus
        self.mems = mems
        self.listed: Dict[str, ListedContainer] = {}
        self.infos: Dict[str, ContainerInfo] = {}
        self.down = False
        self.vanish_on_update: set = set()
        self.clock = 1_000
        self.parents: Dict[str, str] = {}  # container ID -> pod cgroup parent, for containers added without one
        self.pod_notes: Dict[str, Dict[str, str]] = {}  # sandbox ID -> the pod's annotations
        self.counter = 0

    # --- building the node ------------------------------------------------------------------------------
    def add(self, pod_uid: str, container: str, qos: str, milli: int = 0, pod_name: str = "",
            namespace: str = "default", attempt: int = 0, state: str = RUNNING, exit_code: int = 0,
            annotations: Optional[Dict[str, str]] = None, cid: Optional[str] = None,
            cgroup_path: Optional[str] = None) -> str:
        """A container; ``cid`` and ``cgroup_path`` for one made elsewhere (the OCI hook's fake node: its cgroup exists
        and is left as it is)."""
        self.counter += 1
        self.clock += 10
        made = cgroup_path is not None
        cid = cid or hashlib.sha256(b"%d" % self.counter).hexdigest()
        path = cgroup_path or PARENTS[qos] % pod_uid + "/" + cid
        limit = milli if qos == "Guaranteed" else 0
        if annotations is not None:
            self.pod_notes["sb-" + pod_uid] = annotations
        self.listed[cid] = ListedContainer(cid, "sb-" + pod_uid, pod_uid, pod_name or pod_uid, namespace, container,
                                           attempt, state, self.clock)
        self.infos[cid] = ContainerInfo(cid, pod_uid, pod_name or pod_uid, namespace, container, attempt, qos, path,
                                        milli_to_shares(milli), milli_to_quota(limit), 100000,
                                        64 << 20 if qos == "Guaranteed" else 0, exit_code,
                                        self.clock + 5 if state == EXITED else 0)
        files = () if made else (("cpuset", "cpuset.cpus", self.all_cpus), ("cpuset", "cpuset.mems", self.mems),
                                 ("cpu", "cpu.cfs_quota_us", str(milli_to_quota(limit) or -1)),
                                 ("cpu", "cpu.cfs_period_us", "100000"))
        for controller, name, value in files:
            self.write(controller, path, name, value)
            pod = path.rsplit("/", 1)[0]
            if not os.path.exists(os.path.join(self.root, controller, pod.lstrip("/"), name)):
                self.write(controller, pod, name, value)
        return cid

    def exit(self, cid: str, code: int = 0) -> None:
        self.clock += 10
        self.listed[cid] = self.listed[cid]._replace(state=EXITED)
        self.infos[cid] = self.infos[cid]._replace(exit_code=code, finished_at=self.clock)

    def remove(self, cid: str) -> None:
        del self.listed[cid]
        del self.infos[cid]

    def remove_pod(self, pod_uid: str) -> None:
        for cid in [c for c, item in self.listed.items() if item.pod_uid == pod_uid]:
            self.remove(cid)

    def write(self, controller: str, path: str, name: str, value: str) -> None:
        directory = os.path.join(self.root, controller, path.lstrip("/"))
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
            handle.write(value + "\n")

    def read(self, cid: str, name: str = "cpuset.cpus") -> str:
        controller = "cpu" if name.startswith("cpu.") else "cpuset"
        with open(os.path.join(self.root, controller, self.infos[cid].cgroup_path.lstrip("/"), name),
                  encoding="utf-8") as handle:
            return handle.read().strip()

    # --- the Runtime interface ----------------------------------------------------------------------------
    def _check(self) -> None:
        if self.down:
            raise RuntimeUnavailableError("container runtime unavailable: connection refused")

    def version(self) -> Dict[str, str]:
        self._check()
        return {"RuntimeName": "fake"}

    def list_containers(self) -> List[ListedContainer]:
        self.count("list")
        self._check()
        return list(self.listed.values())

    def inspect(self, container_id: str) -> ContainerInfo:
        self.count("inspect")
        self._check()
        if container_id not in self.infos:
            raise ContainerNotFoundError("container %s not found" % container_id)
        return self.infos[container_id]

    def pod_annotations(self, sandbox_id: str) -> Dict[str, str]:
        self.count("inspect_pod")
        self._check()
        if sandbox_id not in self.pod_notes and not any(item.sandbox_id == sandbox_id for item in self.listed.values()):
            raise ContainerNotFoundError("pod sandbox %s not found" % sandbox_id)  # (a pod's sandbox comes first)
        return self.pod_notes.get(sandbox_id, {})

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        self.count("inspect_pod")
        self._check()
        for cid, item in self.listed.items():
            if item.sandbox_id == sandbox_id:
                return self.parents.get(cid) or self.infos[cid].pod_cgroup_path
        raise ContainerNotFoundError("pod sandbox %s not found" % sandbox_id)

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        self.count("update")
        self._check()
        if container_id in self.vanish_on_update:
            self.remove(container_id)
        if container_id not in self.infos:
            raise ContainerNotFoundError("container %s not found" % container_id)
        path = self.infos[container_id].cgroup_path
        if cpuset_cpus:
            self.write("cpuset", path, "cpuset.cpus", str(cpuset_cpus))
        if cpuset_mems:
            self.write("cpuset", path, "cpuset.mems", str(cpuset_mems))
        if cpu_quota:
            self.write("cpu", path, "cpu.cfs_quota_us", str(cpu_quota))
