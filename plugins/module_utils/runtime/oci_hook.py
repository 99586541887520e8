# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What an OCI runtime hands a hook (runtime-spec ``runtime.md`` "State", ``config.md`` "Hooks"): the container's
state on stdin (``id``, ``pid``, ``bundle``, ``annotations``) and its bundle's ``config.json``, read as the container
model.

runc runs a ``createRuntime`` hook during ``create``, after the container's cgroup exists and before its process
runs its first instruction (it waits in ``runc init``). containerd's CRI (1.6, 1.7: tried) and CRI-O name the
Kubernetes pod and container in the annotations, each with keys of its own, and the container is read with the keys
of the runtime that created it only (``runtime_keys``): the pod's own annotations, which its tenant writes, reach the
spec too. The CPU request is the spec's ``linux.resources.cpu`` as the kubelet asked for it, the QoS class the
kubelet's cgroup parent (RUNTIME.md 3).

Both inputs are hostile until parsed: each has a size limit and stdin a read timeout; anything malformed is a
``HookInputError`` naming what was wrong.
"""

from __future__ import annotations

import os
import select
import time

from ..errors import HookInputError, RuntimeOutputError
from ..paths import is_absolute_path
from .cgroup_paths import cgroupfs_path, qos_from_cgroup
from ..wire.json_lean import loads
from .ids import check_container_id

TYPE_CHECKING = False
if TYPE_CHECKING:  # every container start imports this module: typing (about 5 ms) is not loaded at run time
    from typing import IO, Any, Dict, List, Optional, Tuple

    from .model import ContainerInfo

# The OCI state: an ID, a PID, a path and the annotations. Kubernetes allows a pod 256 KiB of annotations
# (TotalAnnotationSizeLimitB), CRI-O copies them into a sandbox's state twice, and JSON can spell a byte in six
# (\u003c): 2 x 256 KiB x 6 = 3 MiB. The bound is on memory, well above what any pod can send.
MAX_STATE_BYTES = 4 * 1024 * 1024
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # config.json: its environment and mounts are the large parts (tens of KiB)
STATE_TIMEOUT = 2.0  # seconds for the runtime to write the state and close stdin
CONTAINER, SANDBOX = "container", "sandbox"

# Each runtime's own keys: (type, pod UID, pod name, namespace, container name). The type key is the runtime's mark:
# each runtime sets its own on every container and sandbox, and never the other's.
#
# containerd's CRI (container_create_linux.go and sandbox_run_linux.go, 1.6 to 2.x) writes its io.kubernetes.cri.*
# keys after the pod's and the container's annotations that the operator lets through (pod_annotations,
# container_annotations), so its values win; nothing else of the pod's reaches the spec.
CONTAINERD_KEYS = ("io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-uid",
                   "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                   "io.kubernetes.cri.container-name")
# CRI-O (1.36: internal/factory/container/container.go SpecAddAnnotations, server/sandbox_run_linux.go) copies every
# annotation of the pod, which its tenant writes, into the spec of the pod's sandbox and of each of its containers.
# A container's spec: the pod's annotations, then CRI-O's own io.kubernetes.cri-o.* keys over them, then the
# kubelet's container annotations and labels (pod UID, name, namespace, container name) last. A sandbox's: CRI-O's
# keys first, the pod's annotations and labels over them (the tenant may rewrite the type), the kubelet's pod keys
# and CRI-O's container name label "POD" last.
CRIO_KEYS = ("io.kubernetes.cri-o.ContainerType", "io.kubernetes.pod.uid", "io.kubernetes.pod.name",
             "io.kubernetes.pod.namespace", "io.kubernetes.container.name")
CONTAINERD_SANDBOX_ID, CRIO_SANDBOX_ID = "io.kubernetes.cri.sandbox-id", "io.kubernetes.cri-o.SandboxID"
CRIO_INFRA_NAME = "POD"  # CRI-O's sandbox (oci.InfraContainerName); no Kubernetes container has an upper-case name


class HookState:
    """The OCI state on the hook's stdin: the container's ID, its process (0 before it runs), bundle and
    annotations."""

    __slots__ = ("annotations", "bundle", "id", "pid")

    def __init__(self, cid: str, pid: int, bundle: str, annotations: Dict[str, str]) -> None:
        self.id, self.pid, self.bundle, self.annotations = cid, pid, bundle, annotations

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HookState):
            return NotImplemented
        return (self.id, self.pid, self.bundle, self.annotations) == (other.id, other.pid, other.bundle,
                                                                      other.annotations)

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable


class HookedContainer:
    """A Kubernetes container (or pod sandbox) being created, as its hook sees it: who it is and where its cgroup is,
    and (``info``, built when asked) the container model with its CPU request."""

    __slots__ = ("_info", "_resources", "annotations", "cgroup_path", "id", "kind", "name", "pod_name",
                 "pod_namespace", "pod_uid", "qos")

    def __init__(self, kind: str, cid: str, *, pod: List[str], name: str, cgroup_path: str,
                 resources: List[int], annotations: Optional[Dict[str, str]] = None) -> None:
        """``pod``: UID, name, namespace; ``resources``: CPU shares, quota, period and the memory limit;
        ``annotations``: the spec's and the state's (the runtime's keys, and the pod's that it passed on)."""
        self.kind = kind  # CONTAINER or SANDBOX
        self.id = cid
        self.pod_uid, self.pod_name, self.pod_namespace = pod
        self.name = name if kind == CONTAINER else ""
        self.cgroup_path = cgroup_path  # cgroupfs form; "" when the spec has none
        self.qos = qos_from_cgroup(cgroup_path.rsplit("/", 1)[0]) if cgroup_path else ""
        self._resources = resources
        self._info: Optional[ContainerInfo] = None
        self.annotations = annotations or {}

    @property
    def by_crio(self) -> bool:
        """CRI-O created it: its spec has every annotation of its pod (containerd passes on only those its
        configuration's ``pod_annotations`` list)."""
        return CRIO_KEYS[0] in self.annotations

    @property
    def sandbox_id(self) -> str:
        """Its pod sandbox's ID, as its runtime wrote it ("" when the spec does not say)."""
        found = self.annotations.get(CRIO_SANDBOX_ID if self.by_crio else CONTAINERD_SANDBOX_ID)
        return found if isinstance(found, str) else ""

    @property
    def ref(self) -> str:
        return "%s/%s/%s (%s)" % (self.pod_namespace, self.pod_name, self.name, self.id[:12])

    @property
    def info(self) -> ContainerInfo:
        """The container model (``runtime.model``), which only a decision beyond a check needs."""
        if self._info is None:
            from .model import ContainerInfo  # noqa: PLC0415  # the pod model: not on the check path

            shares, quota, period, limit = self._resources
            self._info = ContainerInfo(self.id, self.pod_uid, self.pod_name, self.pod_namespace, self.name, 0,
                                       self.qos, self.cgroup_path, shares, quota, period, limit, 0, 0)
        return self._info


def read_state(stream: IO[bytes], timeout: float = STATE_TIMEOUT) -> HookState:
    """The OCI state the runtime writes on the hook's stdin: at most ``MAX_STATE_BYTES`` within ``timeout``."""
    return parse_state(read_stdin(stream, timeout))


def read_stdin(stream: IO[bytes], timeout: float = STATE_TIMEOUT) -> bytes:
    """The bytes of the OCI state: at most ``MAX_STATE_BYTES``, the whole of it within ``timeout``."""
    return _read_limited(stream, MAX_STATE_BYTES, timeout)


def parse_state(data: bytes) -> HookState:
    """The OCI state from the bytes on the hook's stdin."""
    doc = _json_object(data, "the OCI state on stdin")
    cid, bundle, pid = doc.get("id"), doc.get("bundle"), doc.get("pid", 0)
    annotations = doc.get("annotations") or {}
    if not isinstance(cid, str) or not isinstance(bundle, str) or not is_absolute_path(bundle):
        raise HookInputError("the OCI state on stdin has no container id or no absolute bundle path")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise HookInputError("the OCI state on stdin has a bad pid %r" % (pid,))
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise HookInputError("the OCI state on stdin has annotations that are not strings")
    return HookState(cid, pid, bundle, annotations)


def read_config(bundle: str) -> Dict[str, Any]:
    """The bundle's ``config.json`` (at most ``MAX_CONFIG_BYTES``)."""
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise HookInputError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise HookInputError("%s is larger than %d bytes" % (path, MAX_CONFIG_BYTES))
    return _json_object(data, path)


def container(state: HookState, config: Dict[str, Any]) -> Optional[HookedContainer]:
    """The Kubernetes container being created; None when the annotations do not name one (it passes untouched).

    Who it is comes from the keys of the runtime that created it (``runtime_keys``), never from the other runtime's:
    those can only have come from the pod's annotations. On CRI-O, a spec named ``POD`` is the pod's sandbox, whatever
    its type key says (the pod's annotations are written over that key in a sandbox's spec, never over the name)."""
    annotations = dict(config.get("annotations") or {}) if isinstance(config.get("annotations"), dict) else {}
    annotations.update(state.annotations)
    names = runtime_keys(annotations, state.id)
    if names is None:
        return None
    kind, uid, pod_name, namespace, name = (annotations.get(key, "") for key in names)
    if names is CRIO_KEYS and name == CRIO_INFRA_NAME:
        kind = SANDBOX
    if kind not in (CONTAINER, SANDBOX) or not uid or (kind == CONTAINER and not name):
        return None
    _check_id(state.id)
    linux = _object(config.get("linux"), "linux")
    resources = _object(linux.get("resources"), "linux.resources")
    cpu = _object(resources.get("cpu"), "linux.resources.cpu")
    memory = _object(resources.get("memory"), "linux.resources.memory")
    spec_path = linux.get("cgroupsPath", "")
    if not isinstance(spec_path, str):
        raise HookInputError("linux.cgroupsPath of container %s is not a string" % state.id)
    try:
        cgroup_path = cgroupfs_path(spec_path) if spec_path else ""
    except RuntimeOutputError as exc:
        raise HookInputError("linux.cgroupsPath of container %s: %s" % (state.id, exc)) from None
    numbers = [_number(cpu, "shares"), _number(cpu, "quota"), _number(cpu, "period"), _number(memory, "limit")]
    return HookedContainer(kind, state.id, pod=[uid, pod_name, namespace], name=name, cgroup_path=cgroup_path,
                           resources=numbers, annotations=annotations)


def runtime_keys(annotations: Dict[str, str], cid: str) -> Optional[Tuple[str, ...]]:
    """The identity keys of the runtime that created container ``cid``: containerd's or CRI-O's, told apart by each
    runtime's mark (its type key, which it always sets and the other never does); None when neither is there (not a
    Kubernetes container: podman, ctr, docker).

    Both marks -> ``HookInputError`` (the container is refused): one of them came from the pod's annotations, which
    its tenant writes (CRI-O copies them into every spec of the pod; containerd those the operator lets through),
    and the annotations cannot tell which. Refusing is the safe choice: picking either runtime's keys would let a
    tenant on the other runtime choose who its container is (another pod's UID, a sandbox, a type that passes
    untouched). Only the pod that carries the foreign mark is refused, and no runtime writes it for a pod of its own.
    """
    containerd, crio = CONTAINERD_KEYS[0] in annotations, CRIO_KEYS[0] in annotations
    if containerd and crio:
        _check_id(cid)
        raise HookInputError(
            "container %s carries both containerd's mark (%s) and CRI-O's (%s): a runtime sets only its own, so one "
            "came from its pod's annotations, and which runtime created it cannot be told; not created"
            % (cid, CONTAINERD_KEYS[0], CRIO_KEYS[0]))
    return CONTAINERD_KEYS if containerd else (CRIO_KEYS if crio else None)


def _check_id(cid: str) -> None:
    try:
        check_container_id(cid)
    except RuntimeOutputError as exc:
        raise HookInputError("the OCI state on stdin: %s" % exc) from None


def _read_limited(stream: IO[bytes], limit: int, timeout: float) -> bytes:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # an in-memory stream (io.UnsupportedOperation): nothing to wait for
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise HookInputError("the OCI state on stdin is larger than %d bytes" % limit) from None
        return data
    chunks: List[bytes] = []
    size, deadline = 0, time.monotonic() + timeout
    while True:
        ready, _w, _x = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:  # the whole state within the timeout, not each read
            raise HookInputError("no complete OCI state on stdin within %.0f s" % timeout)
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise HookInputError("the OCI state on stdin is larger than %d bytes" % limit)
        chunks.append(chunk)


def _json_object(data: bytes, what: str) -> Dict[str, Any]:
    try:
        doc = loads(data)
    except ValueError as exc:
        raise HookInputError("%s is not JSON: %s" % (what, exc)) from None
    if not isinstance(doc, dict):
        raise HookInputError("%s is not a JSON object" % what)
    return doc


def _object(value: Any, what: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HookInputError("%s in config.json is not an object" % what)
    return value


def _number(section: Dict[str, Any], key: str) -> int:
    value = section.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise HookInputError("config.json: %s is not an integer: %r" % (key, value))
    return value
