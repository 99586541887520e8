# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A throwaway containerd with kubelet-like pods, for the integration tests, the demo and the benchmarks.

Everything lives in one directory (config, root, state, socket, logs); images are built locally from the
busybox-static binary (no registry is reachable). Pods are created through CRI exactly as a kubelet with
the cgroupfs driver and CFS quota would create them (shared/crictl-samples/inputs shows the shapes).
Needs root, containerd, runc and busybox-static (ENVIRONMENT.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import importlib
import uuid
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
importlib.import_module("conftest")  # makes the collection importable from a checkout

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime import cri_grpc  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire.proto_schema import Schema  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import (  # noqa: E402
    milli_to_quota, milli_to_shares)

# The kubelet's side of the CRI (creating pods), which kubecpu itself never calls: CRI v1 names and numbers.
_NS = [("network", 1, "NamespaceMode"), ("pid", 2, "NamespaceMode"), ("ipc", 3, "NamespaceMode"),
       ("target_id", 4, "string")]
_POD_META = [("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string"), ("attempt", 4, "uint32")]
_SANDBOX_ID = [("pod_sandbox_id", 1, "string")]
_CONTAINER_ID = [("container_id", 1, "string")]
LAB_MESSAGES = {
    "NamespaceOption": _NS,
    "LinuxSandboxSecurityContext": [("namespace_options", 1, "NamespaceOption")],
    "LinuxPodSandboxConfig": [("cgroup_parent", 1, "string"), ("security_context", 2, "LinuxSandboxSecurityContext")],
    "PodSandboxMetadata": _POD_META,
    "PodSandboxConfig": [("metadata", 1, "PodSandboxMetadata"), ("hostname", 2, "string"),
                         ("log_directory", 3, "string"), ("labels", 6, "map"), ("annotations", 7, "map"),
                         ("linux", 8, "LinuxPodSandboxConfig")],
    "RunPodSandboxRequest": [("config", 1, "PodSandboxConfig"), ("runtime_handler", 2, "string")],
    "RunPodSandboxResponse": _SANDBOX_ID,
    "StopPodSandboxRequest": _SANDBOX_ID, "RemovePodSandboxRequest": _SANDBOX_ID, "Empty": [],
    "ListPodSandboxRequest": [],
    "PodSandbox": [("id", 1, "string"), ("metadata", 2, "PodSandboxMetadata"), ("state", 3, "PodSandboxState"),
                   ("created_at", 4, "int64"), ("labels", 5, "map")],
    "ListPodSandboxResponse": [("items", 1, "[]PodSandbox")],
    "ImageSpec": [("image", 1, "string"), ("annotations", 2, "map"), ("user_specified_image", 18, "string")],
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "LinuxContainerResources": cri_grpc.MESSAGES["LinuxContainerResources"],
    "LinuxContainerSecurityContext": [("namespace_options", 3, "NamespaceOption")],
    "LinuxContainerConfig": [("resources", 1, "LinuxContainerResources"),
                             ("security_context", 2, "LinuxContainerSecurityContext")],
    "ContainerMetadata": cri_grpc.MESSAGES["ContainerMetadata"],
    "ContainerConfig": [("metadata", 1, "ContainerMetadata"), ("image", 2, "ImageSpec"), ("command", 3, "[]string"),
                        ("args", 4, "[]string"), ("working_dir", 5, "string"), ("envs", 6, "[]KeyValue"),
                        ("labels", 9, "map"), ("annotations", 10, "map"), ("log_path", 11, "string"),
                        ("linux", 15, "LinuxContainerConfig")],
    "CreateContainerRequest": [("pod_sandbox_id", 1, "string"), ("config", 2, "ContainerConfig"),
                               ("sandbox_config", 3, "PodSandboxConfig")],
    "CreateContainerResponse": _CONTAINER_ID,
    "StartContainerRequest": _CONTAINER_ID, "RemoveContainerRequest": _CONTAINER_ID,
    "StopContainerRequest": [("container_id", 1, "string"), ("timeout", 2, "int64")],
    "ImageStatusRequest": [("image", 1, "ImageSpec")], "Image": [("id", 1, "string")],
    "ImageStatusResponse": [("image", 1, "Image")],
}
LAB_ENUMS = {"NamespaceMode": ["POD", "CONTAINER", "NODE", "TARGET"],
             "PodSandboxState": ["SANDBOX_READY", "SANDBOX_NOTREADY"]}


class LabPod(NamedTuple):
    id: str
    uid: str
    name: str
    namespace: str
    state: str


class LabCRI(cri_grpc.CRIRuntime):
    """kubecpu's CRI backend plus the kubelet's calls that create and remove pods and containers."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        super().__init__(endpoint, timeout)
        self.lab = Schema("kubecpu/lab_cri_v1.proto", "runtime.v1", LAB_MESSAGES, LAB_ENUMS)

    def _message(self, name: str, doc: Dict[str, Any]) -> Any:
        return getattr(self.lab, name)(**doc)

    def run_pod_sandbox(self, config: Dict[str, Any], handler: str = "") -> str:
        request = self.lab.RunPodSandboxRequest(config=self._message("PodSandboxConfig", config),
                                                runtime_handler=handler)
        return str(self.call("RunPodSandbox", request, self.lab.RunPodSandboxResponse).pod_sandbox_id)

    def create_container(self, sandbox_id: str, config: Dict[str, Any], sandbox_config: Dict[str, Any]) -> str:
        request = self.lab.CreateContainerRequest(pod_sandbox_id=sandbox_id,
                                                  config=self._message("ContainerConfig", config),
                                                  sandbox_config=self._message("PodSandboxConfig", sandbox_config))
        return str(self.call("CreateContainer", request, self.lab.CreateContainerResponse).container_id)

    def start_container(self, container_id: str) -> None:
        self.call("StartContainer", self.lab.StartContainerRequest(container_id=container_id), self.lab.Empty,
                  target=container_id)

    def stop_container(self, container_id: str, timeout: int = 0) -> None:
        self.call("StopContainer", self.lab.StopContainerRequest(container_id=container_id, timeout=timeout),
                  self.lab.Empty, target=container_id)

    def remove_container(self, container_id: str) -> None:
        self.call("RemoveContainer", self.lab.RemoveContainerRequest(container_id=container_id), self.lab.Empty,
                  target=container_id)

    def resize(self, container_id: str, request: int, limit: Optional[int] = None) -> None:
        """An in-place resize as the kubelet makes it: the CPU request (millicores, as shares) and limit (as quota;
        None: no limit) of the container's resources."""
        linux = self.pb.LinuxContainerResources(cpu_shares=milli_to_shares(request), cpu_period=100000,
                                                cpu_quota=milli_to_quota(limit or 0))
        self.call("UpdateContainerResources",
                  self.pb.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
                  self.pb.UpdateContainerResourcesResponse, target=container_id, operation="update")

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        with contextlib.suppress(ContainerRuntimeError):
            self.call("StopPodSandbox", self.lab.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), self.lab.Empty,
                      target=sandbox_id)
        self.call("RemovePodSandbox", self.lab.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), self.lab.Empty,
                  target=sandbox_id)

    def image_id(self, tag: str) -> str:
        """The ID the runtime gives the image ``tag`` (what the kubelet puts in CreateContainer), "" while its CRI
        does not know it: its ImageService."""
        reply = self.call("ImageStatus", self.lab.ImageStatusRequest(image=self.lab.ImageSpec(image=tag)),
                          self.lab.ImageStatusResponse, target=tag, service="/runtime.v1.ImageService/")
        return str(reply.image.id)

    def list_pods(self) -> List[LabPod]:
        reply = self.call("ListPodSandbox", self.lab.ListPodSandboxRequest(), self.lab.ListPodSandboxResponse)
        return [LabPod(item.id, item.metadata.uid, item.metadata.name, item.metadata.namespace,
                       self.lab.enum_name("PodSandboxState", item.state)) for item in reply.items]

    def status_info(self, container_id: str) -> Dict[str, Any]:
        """The runtime's verbose info of a container (containerd: pid, runtimeSpec, config)."""
        reply = self.call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id, verbose=True),
                          self.pb.ContainerStatusResponse, target=container_id)
        return dict(json.loads(dict(reply.info)["info"]))


BUSYBOX_IMAGE = "localhost/busybox:1.35.0"
# A container's command that prints what it runs its first instruction on (in its log), then sleeps.
FIRST_LINE = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep infinity"]
PAUSE_IMAGE = "localhost/pause:busybox"
PACKAGES = ("containerd", "runc", "busybox-static")
# Where systemd is PID 1 (the guest), a runtime in the lab runs in a mount namespace of its own: systemd reparses its
# mount table on every mount and unmount it sees, and each pod's sandbox, rootfs and CNI mounts were seen. In the
# guest 30 tmpfs mounts and unmounts cost systemd 4.7 s and dbus-daemon 1.8 s of CPU in the root namespace, none in
# one of their own; a lab of containerd 2.1.9 (systemd driver) started, 4 pods made and removed, stopped: systemd and
# dbus-daemon 12.2 and 9.1 s, then 8.3 and 4.5 s (2026-12-03, beside the suite; the systemd driver's scopes remain).
# The runtime's mounts stay its own (slave: what is mounted on the node later still reaches it); the cgroups, sockets
# and files the tests and the kubelet read are the same. A restart (``start_daemon`` again) makes a new namespace: the
# runtime does not see its predecessor's mounts, which its shims keep for their containers.
OWN_MOUNTS = ["unshare", "--mount", "--propagation", "slave", "--"]

CONFIG = """version = 2
root = "{dir}/root"
state = "{dir}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{dir}/containerd.sock"
[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      {base_spec}
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {systemd}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{dir}/cni"
"""
# containerd 2's version 3 file: the CRI plugin split into runtime and images, strings quoted as containerd writes
# them; NRI is on by default (its section only moves the socket).
CONFIG_V3 = """version = 3
root = '{dir}/root'
state = '{dir}/state'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
                    'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.erofs']
imports = [{imports}]
[grpc]
  address = '{dir}/containerd.sock'
[ttrpc]
  address = '{dir}/containerd.sock.ttrpc'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{pause}'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      {base_spec}
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = {systemd}
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '{dir}/cni'
"""
NRI_CONFIG = """[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{dir}/nri.sock"
  plugin_path = "{dir}/nri-plugins"
  plugin_config_path = "{dir}/nri-conf"
  plugin_request_timeout = "{nri_timeout}"
"""


def missing_requirements() -> List[str]:
    """Why a real containerd cannot run here ([] when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    for tool in ("containerd", "runc", "ctr"):
        if shutil.which(tool) is None:
            problems.append("%s is not installed" % tool)
    if not os.path.exists("/bin/busybox"):
        problems.append("busybox-static is not installed")
    if not os.path.isdir("/sys/fs/cgroup/cpuset") and not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        problems.append("no cpuset cgroup")
    return problems


def install_packages() -> None:
    """apt-get install what the lab needs (Debian 12, root)."""
    if not missing_requirements() or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env, stdout=subprocess.DEVNULL)


def _image_tar(tag: str, cmd: List[str]) -> bytes:
    """A single-layer docker-archive image holding /bin/busybox and its applet links."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add("/bin/busybox", arcname="bin/busybox")
        for applet in ("sh", "sleep", "cat", "true", "awk", "date", "grep"):
            info = tarfile.TarInfo("bin/" + applet)
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Lab:
    """One containerd in a temporary directory; ``with Lab() as lab:`` starts and tears it down."""

    def __init__(self, directory: Optional[str] = None, binaries: Optional[str] = None, *, nri: bool = False,
                 systemd: bool = False, slow: bool = False, base_spec: Optional[str] = None,
                 config: Optional[str] = None) -> None:
        """``binaries``: a directory with another containerd (and its shim and ctr), first on its PATH; ``nri``: its
        NRI plugin socket at ``nri_socket`` (containerd 1.7 and later); ``systemd``: the systemd cgroup driver (pods
        in ``kubepods.slice`` as a kubelet with ``cgroupDriver: systemd`` makes them; needs systemd as PID 1);
        ``slow``: under emulation (a guest vCPU 25-30x slower), containerd waits 30 s for the NRI plugin (2 s, its
        default, otherwise) and the kubelet's calls 120 s; ``base_spec``: the runc handler's ``base_runtime_spec``
        (the OCI spec every container starts from: where an OCI hook is installed); ``config``: the whole
        configuration file's text instead of the lab's own (``config_text``)."""
        self.dir = directory or tempfile.mkdtemp(prefix="kubecpu-lab-")
        self.binaries = binaries
        self.nri = nri
        self.systemd = systemd
        self.base_spec = base_spec
        self.config = config
        self.oom_floor = -1000  # the lowest oom_score_adj asked for (containerd clamps: restrict_oom_score_adj)
        self.nri_timeout = "30s" if slow else "2s"  # what containerd waits for a plugin's answer
        self.cri_timeout = 120.0 if slow else 10.0
        self.nri_socket = os.path.join(self.dir, "nri.sock")
        self.socket = os.path.join(self.dir, "containerd.sock")
        self.endpoint = "unix://" + self.socket
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]
        self.cri: Any = None
        self.pods: List[str] = []
        self.parents: Dict[str, str] = {}  # sandbox ID -> its pod's cgroup parent

    @property
    def env(self) -> Dict[str, str]:
        """The environment of containerd and ctr: ``binaries`` first on the PATH (the shim is found there)."""
        if not self.binaries:
            return dict(os.environ)
        return dict(os.environ, PATH=self.binaries + os.pathsep + os.environ.get("PATH", ""))

    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    @property
    def config_path(self) -> str:
        return os.path.join(self.dir, "config.toml")

    @functools.cached_property
    def major(self) -> int:
        """The major version of the containerd this lab runs (1 or 2)."""
        out = subprocess.run(["containerd", "--version"], check=True, capture_output=True, text=True,
                             env=self.env).stdout
        found = re.search(r"\sv?([0-9]+)\.[0-9]+\.[0-9]+", out)
        if found is None:
            raise RuntimeError("cannot read containerd's version from %r" % out)
        return int(found.group(1))

    def config_text(self, imports: Sequence[str] = ()) -> str:
        """The lab's configuration for its containerd: version 2 for 1.x, version 3 for 2.x (``imports`` there)."""
        base = 'base_runtime_spec = "%s"' % self.base_spec if self.base_spec else ""
        values = {"dir": self.dir, "pause": PAUSE_IMAGE, "systemd": str(self.systemd).lower(), "base_spec": base}
        if self.major >= 2:
            text = CONFIG_V3.format(imports=", ".join("'%s'" % name for name in imports), **values)
        elif imports:
            raise ValueError("the lab writes imports for containerd 2 only")
        else:
            text = CONFIG.format(**values)
        if self.nri:  # containerd 2: NRI is on by default, only its socket moves into the lab
            nri = NRI_CONFIG.format(dir=self.dir, nri_timeout=self.nri_timeout)
            text += nri.replace("  disable = false\n", "") if self.major >= 2 else nri
        elif self.major >= 2:  # not wanted: off, or every such lab would listen on the node's /var/run/nri/nri.sock
            text += '[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n'
        return text

    def start(self) -> None:
        os.makedirs(os.path.join(self.dir, "cni"), exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as handle:
            handle.write(self.config if self.config is not None else self.config_text())
        self.start_daemon()
        for path in self.image_files():
            subprocess.run(["ctr", "-a", self.socket, "-n", "k8s.io", "images", "import", path], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env)
        self.cri = LabCRI(self.endpoint, timeout=self.cri_timeout)
        # containerd's CRI learns of an imported image from an event, a moment after ctr has returned: a sandbox made
        # before that would be pulled (there is no registry)
        deadline = time.monotonic() + 120
        while not all(self.cri.image_id(tag) for tag in (BUSYBOX_IMAGE, PAUSE_IMAGE)):
            if time.monotonic() > deadline:
                raise RuntimeError("the runtime's CRI does not list the imported images; see %s/daemon.log" % self.dir)
            time.sleep(0.05)

    @functools.cached_property
    def image_id(self) -> str:
        """The busybox image's ID, asked of the runtime when the first container is made (a ``lab.py`` call that
        makes none asks nothing)."""
        found = self.cri.image_id(BUSYBOX_IMAGE)
        if not found:
            raise RuntimeError("image %s not imported" % BUSYBOX_IMAGE)
        return found

    def daemon_argv(self) -> List[str]:
        return ["containerd", "--config", self.config_path]

    def own_mounts(self) -> List[str]:
        """The prefix that gives the runtime a mount namespace of its own (OWN_MOUNTS) where systemd is PID 1."""
        return OWN_MOUNTS if os.path.isdir("/run/systemd/system") else []

    def image_files(self) -> List[str]:
        """The lab's two images (busybox, and busybox sleeping as the pause image) as files in its directory."""
        paths = []
        for tag, cmd in ((BUSYBOX_IMAGE, ["/bin/sh"]), (PAUSE_IMAGE, ["/bin/sleep", "infinity"])):
            paths.append(os.path.join(self.dir, tag.replace("/", "_").replace(":", "_") + ".tar"))
            with open(paths[-1], "wb") as handle:
                handle.write(_image_tar(tag, cmd))
        return paths

    def start_daemon(self) -> None:
        log = open(os.path.join(self.dir, "daemon.log"), "ab")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(self.own_mounts() + self.daemon_argv(), stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True)  # outlives a detached ``lab.py start``
        with open(os.path.join(self.dir, "containerd.pid"), "w", encoding="utf-8") as handle:
            handle.write(str(self.proc.pid))
        deadline = time.monotonic() + 120  # a deadline, not a wait: 30x slower under emulation
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the runtime did not start; see %s/daemon.log" % self.dir)
            time.sleep(0.05)
        time.sleep(0.2)
        cri = getattr(self, "cri", None)
        while cri is not None:  # a restart: the socket comes before the CRI plugin serves ("not initialized yet")
            try:
                cri.list_containers()
                break
            except ContainerRuntimeError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the runtime's CRI did not come back; see %s/daemon.log" % self.dir) from None
                time.sleep(0.05)

    def stop_daemon(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        self.proc = None

    def attach(self) -> Lab:
        """This directory's running containerd (``lab.py start``), for another process's calls."""
        self.cri = LabCRI(self.endpoint, timeout=self.cri_timeout)
        return self

    def detach(self) -> None:
        """Leave the containerd running (its pods too): this process's view of it only is closed."""
        if self.cri is not None:
            self.cri.close()
        self.proc, self.pods = None, []

    # --- kubelet-like pods --------------------------------------------------------------------------------
    def run_pod(self, name: str, qos: str, containers: List[Dict[str, Any]], *, namespace: str = "lab",
                uid: Optional[str] = None, start: bool = True,
                annotations: Optional[Dict[str, str]] = None, handler: str = "") -> Dict[str, Any]:
        """A pod with ``containers`` = [{"name", "cpu" (millicores or None), "memory" (bytes or None),
        "command" (argv, default sleep infinity), "limit" (default: = request for Guaranteed)}]; ``handler``: its
        RuntimeClass's runtime handler (none: the runtime's default)."""
        uid = uid or str(uuid.uuid4())
        parent = self.pod_parent(qos, uid)
        labels = {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
                  "io.kubernetes.pod.uid": uid}
        sandbox = {"metadata": {"name": name, "uid": uid, "namespace": namespace, "attempt": 0},
                   "log_directory": os.path.join(self.dir, "logs", "%s_%s_%s" % (namespace, name, uid)),
                   "labels": labels, "annotations": dict({"kubernetes.io/config.source": "api"}, **(annotations or {})),
                   "linux": {"cgroup_parent": parent,
                             "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}}}
        sandbox_id = self.cri.run_pod_sandbox(sandbox, handler)
        self.pods.append(sandbox_id)
        self.parents[sandbox_id] = parent
        pod = {"uid": uid, "name": name, "namespace": namespace, "sandbox_id": sandbox_id, "sandbox": sandbox,
               "qos": qos, "containers": {}}
        for spec in containers:
            pod["containers"][spec["name"]] = self.run_container(pod, spec, start=start)
        return pod

    def pod_parent(self, qos: str, uid: str) -> str:
        """The cgroup parent the kubelet gives a pod: cgroupfs paths, or systemd slice names (``-`` in the UID
        escaped as ``_``)."""
        if self.systemd:
            level = {"Guaranteed": "", "Burstable": "burstable-", "BestEffort": "besteffort-"}[qos]
            return "kubepods-%spod%s.slice" % (level, uid.replace("-", "_"))
        return {"Guaranteed": "/kubepods/pod%s", "Burstable": "/kubepods/burstable/pod%s",
                "BestEffort": "/kubepods/besteffort/pod%s"}[qos] % uid

    def run_container(self, pod: Dict[str, Any], spec: Dict[str, Any], attempt: int = 0, start: bool = True) -> str:
        cpu = spec.get("cpu")
        limit = spec.get("limit", cpu if pod["qos"] == "Guaranteed" else None)
        memory = spec.get("memory", 64 << 20 if pod["qos"] == "Guaranteed" else 0)
        resources = {"cpu_period": 100000, "cpu_shares": milli_to_shares(cpu or 0),
                     "cpu_quota": milli_to_quota(limit or 0),
                     "memory_limit_in_bytes": memory or 0,
                     "oom_score_adj": max(-997 if pod["qos"] == "Guaranteed" else 999, self.oom_floor)}
        labels = dict(pod["sandbox"]["labels"], **{"io.kubernetes.container.name": spec["name"]})
        config = {"metadata": {"name": spec["name"], "attempt": attempt},
                  "image": {"image": self.image_id, "user_specified_image": BUSYBOX_IMAGE},
                  "command": spec.get("command", ["/bin/sleep", "infinity"]), "labels": labels,
                  "annotations": spec.get("annotations", {"io.kubernetes.container.restartCount": str(attempt)}),
                  "log_path": "%s/%d.log" % (spec["name"], attempt),
                  "linux": {"resources": resources,
                            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}}}
        # the kubelet makes the container's log directory (containerd would, CRI-O's conmon does not)
        os.makedirs(os.path.join(pod["sandbox"]["log_directory"], spec["name"]), exist_ok=True)
        cid = self.cri.create_container(pod["sandbox_id"], config, pod["sandbox"])
        if start:
            self.cri.start_container(cid)
        return str(cid)

    def remove_pod(self, pod: Dict[str, Any]) -> None:
        self.cri.remove_pod_sandbox(pod["sandbox_id"])
        with contextlib.suppress(ValueError):
            self.pods.remove(pod["sandbox_id"])
        self.remove_pod_cgroup(pod["sandbox"]["linux"]["cgroup_parent"])

    def remove_pod_cgroup(self, parent: str) -> None:
        """What the kubelet does once a pod is gone: its cgroup removed (cgroupfs driver; systemd removes a slice
        itself). Left behind, a lab's pods add up to thousands of kubepods cgroups that every walk of the tree
        reads."""
        if self.systemd or not parent.startswith("/"):
            return
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            roots = ["/sys/fs/cgroup"]
        else:
            roots = [os.path.join("/sys/fs/cgroup", name) for name in sorted(os.listdir("/sys/fs/cgroup"))]
        for root in roots:
            with contextlib.suppress(OSError):  # absent in this hierarchy, or still busy: the kubelet retries
                os.rmdir(root + parent)

    def teardown(self) -> None:
        if self.cri is not None and self.proc is not None:
            for sandbox_id in list(self.pods):
                with contextlib.suppress(Exception):
                    self.cri.remove_pod_sandbox(sandbox_id)
                    self.remove_pod_cgroup(self.parents.get(sandbox_id, ""))
            self.cri.close()
        self.stop_daemon()
        self.unmount()
        shutil.rmtree(self.dir, ignore_errors=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-R", os.path.join(self.dir, "state")], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # --- what the kernel says ------------------------------------------------------------------------------
    def cgroup_dir(self, cid: str, controller: str = "cpuset") -> str:
        """The container's cgroup directory (cgroup v1: under ``controller``'s hierarchy; v2: the unified one)."""
        path = self.cri.inspect(cid).cgroup_path
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            return "/sys/fs/cgroup" + path
        return "/sys/fs/cgroup/%s%s" % (controller, path)

    def cgroup_file(self, cid: str, name: str, controller: str = "cpuset") -> str:
        with open(os.path.join(self.cgroup_dir(cid, controller), name), encoding="utf-8") as handle:
            return handle.read().strip()

    def cgroup_cpus(self, pod: Dict[str, Any], cid: str) -> str:
        """The cpuset the container's cgroup was given (v2: ``cpuset.cpus``, else what it has, ``.effective``)."""
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            return self.cgroup_file(cid, "cpuset.cpus") or self.cgroup_file(cid, "cpuset.cpus.effective")
        return self.cgroup_file(cid, "cpuset.cpus")

    def placement(self, cid: str) -> Dict[str, str]:
        """Where the container runs: its cgroup's cpuset and its first process's allowed CPUs."""
        return {"cgroup": self.cgroup_cpus({}, cid), "proc": self.allowed_cpus(cid)}

    def allowed_cpus(self, cid: str) -> str:
        """Cpus_allowed_list of the container's first process."""
        info = self.cri.status_info(cid)
        with open("/proc/%d/status" % info["pid"], encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
        return ""


CRIO_CONFIG = """[crio]
root = "{dir}/root"
runroot = "{runroot}"
storage_driver = "overlay"
log_dir = "{dir}/logs"
version_file = "{dir}/version"
version_file_persist = "{dir}/version-persist"
clean_shutdown_file = "{dir}/clean.shutdown"
[crio.api]
listen = "{dir}/crio.sock"
[crio.runtime]
default_runtime = "runc"
conmon = "/usr/bin/conmon"
cgroup_manager = "{cgroup_manager}"
irqbalance_config_restore_file = "disable"
pinns_path = "{binaries}/pinns"
hooks_dir = ["{dir}/hooks.d"]
container_exits_dir = "{dir}/exits"
container_attach_socket_dir = "{dir}/attach"
namespaces_dir = "{dir}/ns"
enable_pod_events = true
[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_root = "{dir}/runc"
{handlers}[crio.image]
pause_image = "{pause}"
signature_policy = "{dir}/policy.json"
[crio.network]
network_dir = "{dir}/cni"
plugin_dirs = ["/usr/lib/cni"]
[crio.nri]
enable_nri = {nri}
nri_listen = "{dir}/nri.sock"
nri_plugin_request_timeout = "{nri_timeout}"
"""


class CrioLab(Lab):
    """The same lab on CRI-O (``binaries``: its ``crio`` and ``pinns``) with Debian's conmon and runc: its images
    loaded into its storage with podman (no registry here), OCI hooks from ``hooks_dir``. ``allowed_annotations``: a
    second runc handler, ``high-performance`` (a RuntimeClass's), that allows them: its pods get CRI-O's
    high-performance hooks (the default handler's never do: CRI-O 1.36 finds no configuration for the empty handler
    name a pod without a RuntimeClass has). CRI-O's copy of the banned interrupts is never restored at its start (that
    would write /etc/sysconfig)."""

    def __init__(self, *args: Any, allowed_annotations: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_annotations = tuple(allowed_annotations)

    @property
    def major(self) -> int:
        return 0  # not containerd

    @property
    def hooks_dir(self) -> str:
        return os.path.join(self.dir, "hooks.d")

    @property
    def config_path(self) -> str:
        return os.path.join(self.dir, "crio.conf")

    def config_text(self, imports: Sequence[str] = ()) -> str:
        return CRIO_CONFIG.format(dir=self.dir, runroot=self.runroot, binaries=self.binaries, pause=PAUSE_IMAGE,
                                  runc=shutil.which("runc") or "runc", nri=str(self.nri).lower(),
                                  nri_timeout=self.nri_timeout,
                                  cgroup_manager="systemd" if self.systemd else "cgroupfs",
                                  handlers=self._handlers())

    def _handlers(self) -> str:
        if not self.allowed_annotations:
            return ""
        allowed = ", ".join('"%s"' % name for name in self.allowed_annotations)
        return ('[crio.runtime.runtimes.high-performance]\nruntime_path = "%s"\nruntime_root = "%s/runc"\n'
                'allowed_annotations = [%s]\n' % (shutil.which("runc") or "runc", self.dir, allowed))

    @functools.cached_property
    def runroot(self) -> str:
        """containers/storage's run directory: a path of at most 50 characters, so not in the lab's directory."""
        return tempfile.mkdtemp(prefix="kubecpu-crio-", dir="/run")

    def start(self) -> None:
        with open("/proc/self/oom_score_adj", encoding="ascii") as handle:  # CRI-O has no restrict_oom_score_adj:
            self.oom_floor = int(handle.read())  # without CAP_SYS_RESOURCE runc cannot go below its own
        self.socket = os.path.join(self.dir, "crio.sock")
        self.endpoint = "unix://" + self.socket
        for name in ("cni", "hooks.d", "logs"):
            os.makedirs(os.path.join(self.dir, name), exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as handle:
            handle.write(self.config if self.config is not None else self.config_text())
        with open(os.path.join(self.dir, "policy.json"), "w", encoding="utf-8") as handle:
            json.dump({"default": [{"type": "insecureAcceptAnything"}]}, handle)
        storage = ["podman", "--root", os.path.join(self.dir, "root"), "--runroot", self.runroot,
                   "--storage-driver", "overlay"]
        for path in self.image_files():
            subprocess.run(storage + ["load", "-q", "-i", path], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        self.start_daemon()
        self.cri = LabCRI(self.endpoint, timeout=self.cri_timeout)

    def daemon_argv(self) -> List[str]:
        return [os.path.join(self.binaries or "", "crio"), "--config", self.config_path, "--config-dir", ""]

    def attach(self) -> Lab:
        raise NotImplementedError("lab.py start runs containerd labs only")

    def remove_pod(self, pod: Dict[str, Any]) -> None:
        """Its containers killed first: CRI-O's RemovePodSandbox gives each the default 10 s to stop (a shell as PID 1
        ignores SIGTERM), where containerd's kills them at once."""
        for cid in pod["containers"].values():
            with contextlib.suppress(ContainerRuntimeError):
                self.cri.stop_container(cid, 0)
        super().remove_pod(pod)

    def unmount(self) -> None:
        for path in (os.path.join(self.dir, "root"), self.runroot):
            subprocess.run(["umount", "-R", path], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.runroot, ignore_errors=True)


SETTINGS = "lab.json"  # what ``lab.py start`` made the lab with, in its directory


def main(argv: Optional[List[str]] = None) -> int:
    """``lab.py start DIR [--systemd] [--nri BINARIES | --binaries BINARIES]``: a containerd left running in DIR (its
    endpoint printed as JSON); ``lab.py pod DIR NAME QOS MILLICPU...``: a pod of one container per CPU request (0:
    none) in it, each printing its first Cpus_allowed_list into its log (the paths printed); ``lab.py rmpod DIR UID``:
    that pod removed; ``lab.py ps DIR``: each running container by its pod's UID (whoever made the pod): its ID, cpuset
    and first process's Cpus_allowed_list;
    ``lab.py restart DIR``: containerd restarted on its config.toml as it is now (the pods keep running); ``lab.py cpus
    DIR ID``: a container's cpuset in cgroupfs and its process's Cpus_allowed_list; ``lab.py stop DIR``: its pods
    removed, it stopped, DIR removed. For tests that script a node from outside."""
    import argparse  # noqa: PLC0415  # the command line only

    parser = argparse.ArgumentParser(description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start")
    start.add_argument("dir")
    start.add_argument("--systemd", action="store_true")
    start.add_argument("--nri", metavar="BINARIES")
    start.add_argument("--binaries", help="the containerd to run (its directory), NRI off")
    start.add_argument("--slow", action="store_true", help="under emulation: longer timeouts")
    pod = sub.add_parser("pod")
    pod.add_argument("dir")
    pod.add_argument("name")
    pod.add_argument("qos", choices=["Guaranteed", "Burstable", "BestEffort"])
    pod.add_argument("millicpu", nargs="+", type=int)
    stop = sub.add_parser("stop")
    stop.add_argument("dir")
    gone = sub.add_parser("rmpod")
    gone.add_argument("dir")
    gone.add_argument("uid")
    where = sub.add_parser("cpus")
    where.add_argument("dir")
    where.add_argument("container_id")
    again = sub.add_parser("restart")
    again.add_argument("dir")
    listing = sub.add_parser("ps")
    listing.add_argument("dir")
    args = parser.parse_args(argv)
    if args.command == "start":
        os.makedirs(args.dir, exist_ok=True)
        settings = {"binaries": args.nri or args.binaries, "nri": bool(args.nri), "systemd": args.systemd,
                    "slow": args.slow}
        lab = Lab(args.dir, **settings)
        lab.start()
        with open(os.path.join(args.dir, SETTINGS), "w", encoding="utf-8") as handle:
            json.dump(settings, handle)  # the later commands' Lab is this one
        print(json.dumps({"endpoint": lab.endpoint, "nri_socket": lab.nri_socket if args.nri else None}))
        lab.detach()
        return 0
    try:
        with open(os.path.join(args.dir, SETTINGS), encoding="utf-8") as handle:
            lab = Lab(args.dir, **json.load(handle)).attach()
    except FileNotFoundError:
        print("lab.py: no lab was started in %s" % args.dir, file=sys.stderr)
        return 0 if args.command == "stop" else 2
    if args.command == "cpus":  # what cgroupfs and the kernel say of one container
        print(json.dumps(lab.placement(args.container_id)))
        lab.detach()
        return 0
    if args.command == "restart":  # containerd again on its config.toml as it is now (an edit taken), pods kept
        _stop_daemon_of(args.dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lab.socket)
        lab.start_daemon()
        print(json.dumps({"endpoint": lab.endpoint}))
        lab.detach()
        return 0
    if args.command == "ps":  # the running containers, whoever made them (a kubelet's too), and where they run
        print(json.dumps({item.pod_uid: dict(lab.placement(item.id), id=item.id)
                          for item in lab.cri.list_containers() if item.state == "CONTAINER_RUNNING"}))
        lab.detach()
        return 0
    if args.command == "rmpod":
        for item in lab.cri.list_pods():
            if item.uid == args.uid:
                lab.cri.remove_pod_sandbox(item.id)
        print(json.dumps({"removed": args.uid}))
        lab.detach()
        return 0
    if args.command == "pod":
        containers = [{"name": "c%d" % n, "cpu": milli or None, "command": FIRST_LINE}
                      for n, milli in enumerate(args.millicpu)]
        made = lab.run_pod(args.name, args.qos, containers)
        logs = {name: os.path.join(made["sandbox"]["log_directory"], name, "0.log") for name in made["containers"]}
        print(json.dumps({"uid": made["uid"], "containers": made["containers"], "logs": logs}))
        lab.detach()
        return 0
    for item in lab.cri.list_pods():
        with contextlib.suppress(Exception):
            lab.cri.remove_pod_sandbox(item.id)
    _stop_daemon_of(args.dir)
    lab.teardown()
    return 0


def _stop_daemon_of(directory: str) -> None:
    """SIGTERM to the containerd ``lab.py start`` left running in ``directory``; waits (60 s at most) for it to go."""
    with open(os.path.join(directory, "containerd.pid"), encoding="utf-8") as handle:
        pid = int(handle.read())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
