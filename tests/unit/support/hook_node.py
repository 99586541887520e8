"""A fake node for the OCI hook's tests: sysfs (1 socket x 4 cores x 2 threads), cgroupfs v1 or v2 with the
kubelet's kubepods tree, the bundles and OCI states containerd writes, and a state file."""

from __future__ import annotations

import io
import json
import os
import re

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_marks import HookMarks
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroup_paths import cgroupfs_path
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import Hook

from . import fake_sysfs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))  # the collection
ALL = CPUSet.parse("0-7")
POD = "%08x-f547-4cc8-86c8-f905f933ae0a"


class Node:
    """A fake node: its sysfs, cgroupfs (v1 or v2) with container cgroups below kubepods, bundles and a state."""

    def __init__(self, tmp_path, v2):
        self.tmp = tmp_path
        self.sysfs = str(tmp_path / "sys")
        fake_sysfs.build(self.sysfs, fake_sysfs.machine(1, 4, 2))
        self.cgroup = tmp_path / "cgroup"
        self.v2 = v2
        if v2:
            self.cgroup.mkdir()
            (self.cgroup / "cgroup.controllers").write_text("cpuset cpu memory pids\n")
        self.state = str(tmp_path / "state")
        self.kubelet_state = str(tmp_path / "kubelet-state")  # none until ``kubelet_pins``
        self.made = 0

    def config(self, **changes):
        settings = dict(state_path=self.state, sysfs_root=self.sysfs, cgroup_root=str(self.cgroup),
                        reserved_cpus=CPUSet.parse("0"), kubelet_state_path=self.kubelet_state)
        settings.update(changes)
        return NodeConfig(**settings)

    def hook(self, **changes):
        return Hook(self.config(**changes), lock_timeout=0.3)

    def directory(self, path):
        return self.cgroup / path.lstrip("/") if self.v2 else self.cgroup / "cpuset" / path.lstrip("/")

    def container(self, qos="Guaranteed", millicpu=2000, cpus=ALL, annotations=True, root="kubepods",
                  driver="cgroupfs", prefix="cri-containerd", uid=None, name="app", pod_annotations=None,
                  limit=True):
        """A container the runtime is creating: its cgroup (on ``cpus``), its bundle; the OCI state's bytes. Below the
        kubelet's top cgroup ``root`` (``kubelet/kubepods`` for ``cgroupRoot: /kubelet``; systemd driver:
        ``kubelet-kubepods`` for ``cgroupRoot: /kubelet.slice``), the runtime's scope ``prefix`` (``crio``). A new
        pod, or the pod ``uid`` (a container ``name`` of it). ``pod_annotations``: the pod's that reach the spec (CRI-O
        copies them all, containerd those its ``pod_annotations`` lists); ``limit`` False: no CFS quota (no CPU
        limit)."""
        self.made += 1
        uid, cid = uid or POD % self.made, "%064x" % self.made
        level = "" if qos == "Guaranteed" else qos.lower()
        if driver == "systemd":
            parent = "-".join(filter(None, (root, level)))
            spec_path = "%s-pod%s.slice:%s:%s" % (parent, uid.replace("-", "_"), prefix, cid)
            path = cgroupfs_path(spec_path)
        else:
            spec_path = path = "/%s/pod%s/%s" % ("/".join(filter(None, (root, level))), uid, cid)
        self.write_cpus(path, cpus)
        bundle = self.tmp / "bundles" / cid
        bundle.mkdir(parents=True)
        names = {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.container-name": name,
                 "io.kubernetes.cri.sandbox-uid": uid, "io.kubernetes.cri.sandbox-name": "pod-%d" % int(uid[:8], 16),
                 "io.kubernetes.cri.sandbox-namespace": "lab", "io.kubernetes.cri.sandbox-id": "sb-" + uid,
                 } if annotations else {}
        names = dict(pod_annotations or {}, **names)  # the runtime's keys are written over the pod's
        quota = millicpu * 100 if qos != "BestEffort" and limit else 0
        (bundle / "config.json").write_text(json.dumps({
            "ociVersion": "1.0.2-dev", "annotations": names,
            "linux": {"cgroupsPath": spec_path, "resources": {"cpu": {"shares": max(2, millicpu * 1024 // 1000),
                                                                      "quota": quota or -1, "period": 100000}}}}))
        state = {"ociVersion": "1.0.2-dev", "id": cid, "status": "creating", "pid": 4242, "bundle": str(bundle),
                 "annotations": names}
        return {"uid": uid, "id": cid, "path": path, "stdin": json.dumps(state).encode(), "name": name, "qos": qos,
                "milli": millicpu}

    def write_cpus(self, path, cpus):
        folder = self.directory(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpuset.cpus").write_text(str(cpus) + "\n")
        if self.v2:  # the kernel's answer: what was written (the parents allow every CPU)
            (folder / "cpuset.cpus.effective").write_text(str(cpus) + "\n")

    def cpus(self, made):
        return self.cpus_at(made["path"])

    def cpus_at(self, path):
        return CPUSet.parse((self.directory(path) / "cpuset.cpus").read_text().strip())

    def kubelet_pins(self, pinned="2,6"):
        """The kubelet's checkpoint as a kubelet with the static policy writes it: one container on ``pinned``."""
        with open(self.kubelet_state, "w", encoding="utf-8") as handle:
            json.dump({"policyName": "static", "defaultCpuSet": str(ALL - CPUSet.parse(pinned)),
                       "entries": {POD % 900: {"db": pinned}}, "checksum": 1}, handle)

    def overlaps(self):
        """Every pair of container cgroups (below any kubepods) where one's exclusive entry meets the other's CPUs."""
        state = self.saved()
        exclusive = [(uid, cpus) for uid, _name, cpus in state.assignments()]
        top = self.directory("/")
        found = []
        for folder, _dirs, files in os.walk(top):
            if "cpuset.cpus" not in files or not re.search(r"[0-9a-f]{64}", os.path.basename(folder)):
                continue  # not a container's cgroup
            text = open(os.path.join(folder, "cpuset.cpus"), encoding="utf-8").read().strip()
            # empty, as the kernel reads it: v2, the parent's (every CPU here); v1, no CPU (no task runs there). Only
            # this fake has an empty one: the kernel applies a write to cgroupfs whole, while a kill between this
            # directory's truncate and write (the hook's SIGKILL test) leaves the file empty.
            cpus = CPUSet.parse(text) if text else (ALL if self.v2 else CPUSet.parse(""))
            for uid, held in exclusive:
                if uid not in folder.replace("_", "-") and cpus.intersection(held):  # another pod's container on them
                    found.append((os.path.relpath(folder, top), str(cpus), uid, str(held)))
        return found

    def run(self, made, **changes):
        return self.hook(**changes).run(io.BytesIO(made["stdin"]))

    def saved(self):
        return StateStore(self.state, read_only=True).load()

    def marks(self):
        return HookMarks(self.state).pending()
