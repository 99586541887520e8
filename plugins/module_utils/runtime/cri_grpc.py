# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The CRI backend: the runtime's gRPC API directly (``runtime.v1.RuntimeService``), one channel for all calls.

It needs nothing but the standard library: gRPC over HTTP/2 is ``grpc_h2``, the protobuf encoding
``proto_schema``. The messages it uses are the table below (names and numbers are the CRI API's, RUNTIME.md section
5; each message lists only the fields kubecpu reads or writes), built into classes on first use: nothing is
generated or written on the node.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Dict, List, Mapping, Optional

from ..errors import (ContainerNotFoundError, ContainerRuntimeError, MessageError, RpcStatus, RuntimeOutputError,
                      RuntimeTimeoutError, RuntimeUnavailableError)
from ..kubelet.cpuset import CPUSet
from ..wire.grpc_h2 import Connection
from ..wire.proto_schema import cached
from .cri_decode import container_info, listed_container, parse_info_json, pid_cgroup, sandbox_cgroup_parent
from .ids import check_container_id
from .model import ContainerInfo, ListedContainer, RuntimeBase

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
SERVICE = "/runtime.v1.RuntimeService/"
# The calls a dropped connection may send again (grpc_h2.Connection.unary): each has the same effect however often it
# is made. Version, ListContainers, ContainerStatus and PodSandboxStatus only read; UpdateContainerResources sets
# absolute values (a cpuset, a quota), so a second one finds them set. A call added here must be one of these kinds; any
# other is sent once, and a connection lost after the runtime may have processed it is the caller's error to see.
IDEMPOTENT = frozenset({"Version", "ListContainers", "ContainerStatus", "PodSandboxStatus", "UpdateContainerResources"})

_METADATA = [("name", 1, "string"), ("attempt", 2, "uint32")]
_LINUX_RESOURCES = [("cpu_period", 1, "int64"), ("cpu_quota", 2, "int64"), ("cpu_shares", 3, "int64"),
                    ("memory_limit_in_bytes", 4, "int64"), ("oom_score_adj", 5, "int64"), ("cpuset_cpus", 6, "string"),
                    ("cpuset_mems", 7, "string"), ("memory_swap_limit_in_bytes", 10, "int64")]
MESSAGES = {
    "VersionRequest": [("version", 1, "string")],
    "VersionResponse": [("version", 1, "string"), ("runtime_name", 2, "string"), ("runtime_version", 3, "string"),
                        ("runtime_api_version", 4, "string")],
    "ContainerMetadata": _METADATA,
    "LinuxContainerResources": _LINUX_RESOURCES,
    "ContainerResources": [("linux", 1, "LinuxContainerResources")],
    "ListContainersRequest": [],
    "Container": [("id", 1, "string"), ("pod_sandbox_id", 2, "string"), ("metadata", 3, "ContainerMetadata"),
                  ("state", 6, "ContainerState"), ("created_at", 7, "int64"), ("labels", 8, "map")],
    "ListContainersResponse": [("containers", 1, "[]Container")],
    "ContainerStatusRequest": [("container_id", 1, "string"), ("verbose", 2, "bool")],
    "ContainerStatus": [("id", 1, "string"), ("metadata", 2, "ContainerMetadata"), ("state", 3, "ContainerState"),
                        ("created_at", 4, "int64"), ("started_at", 5, "int64"), ("finished_at", 6, "int64"),
                        ("exit_code", 7, "int32"), ("reason", 10, "string"), ("message", 11, "string"),
                        ("labels", 12, "map"), ("annotations", 13, "map"), ("resources", 16, "ContainerResources")],
    "ContainerStatusResponse": [("status", 1, "ContainerStatus"), ("info", 2, "map")],
    "PodSandboxStatusRequest": [("pod_sandbox_id", 1, "string"), ("verbose", 2, "bool")],
    "PodSandboxStatusResponse": [("status", 1, "PodSandboxStatus"), ("info", 2, "map")],
    "PodSandboxStatus": [("id", 1, "string"), ("annotations", 8, "map")],
    "UpdateContainerResourcesRequest": [("container_id", 1, "string"), ("linux", 2, "LinuxContainerResources"),
                                        ("annotations", 4, "map")],
    "UpdateContainerResourcesResponse": [],
    "GetEventsRequest": [],
    "ContainerEventResponse": [("container_id", 1, "string"), ("container_event_type", 2, "ContainerEventType"),
                               ("created_at", 3, "int64")],
}
ENUMS = {"ContainerState": ["CONTAINER_CREATED", "CONTAINER_RUNNING", "CONTAINER_EXITED", "CONTAINER_UNKNOWN"],
         "ContainerEventType": ["CONTAINER_CREATED_EVENT", "CONTAINER_STARTED_EVENT", "CONTAINER_STOPPED_EVENT",
                                "CONTAINER_DELETED_EVENT"]}

# gRPC status names as Go's codes print them (the CRI's error texts are Go's: "rpc error: code = NotFound desc = ...").
_GO_CODES = {"NOT_FOUND": "NotFound", "UNAVAILABLE": "Unavailable", "DEADLINE_EXCEEDED": "DeadlineExceeded",
             "UNKNOWN": "Unknown", "INVALID_ARGUMENT": "InvalidArgument", "UNIMPLEMENTED": "Unimplemented",
             "FAILED_PRECONDITION": "FailedPrecondition", "INTERNAL": "Internal", "CANCELLED": "Canceled"}


def schema() -> Any:
    """The message classes (built once per process, on first use)."""
    return cached("kubecpu/cri_v1.proto", "runtime.v1", MESSAGES, ENUMS)


def status_error(code: str, details: str, operation: str, target: str, endpoint: str) -> ContainerRuntimeError:
    """A gRPC status as the core's error: NotFound, Unavailable and DeadlineExceeded have their own types."""
    message = "rpc error: code = %s desc = %s" % (_GO_CODES.get(code, code), details)
    head = "%s%s" % (operation, " " + target if target else "")
    if code == "NOT_FOUND":
        return ContainerNotFoundError("container %s not found by the runtime (%s)" % (target, message), operation,
                                      target)
    if code == "UNAVAILABLE":
        return RuntimeUnavailableError("container runtime unavailable: %s (endpoint %s)" % (message, endpoint),
                                       operation, target)
    if code == "DEADLINE_EXCEEDED":
        return RuntimeTimeoutError("%s failed: %s" % (head, message), operation, target)
    if "numerical result out of range" in details:
        return ContainerRuntimeError("%s: a CPU in the requested set is not online on this node (%s)" % (head, message),
                                     operation, target)
    return ContainerRuntimeError("%s failed: %s" % (head, message), operation, target)


class CRIRuntime(RuntimeBase):
    """CRI over gRPC: one connection for every call, each call bounded by the timeout."""

    name = "cri"

    def __init__(self, endpoint: Optional[str] = None, timeout: float = 2.0) -> None:
        super().__init__()
        self.endpoint = endpoint or DEFAULT_ENDPOINT
        self.timeout = timeout
        self.pb = schema()
        self.connection = Connection(self.endpoint)

    def call(self, rpc: str, request: Any, response: Any, *, target: str = "", operation: str = "",
             service: str = SERVICE) -> Any:
        """One unary call; a failure becomes the core's runtime error for its status. A call may be sent again
        on a new connection only when that cannot do it twice (``IDEMPOTENT``)."""
        self.count(operation or rpc)
        try:
            reply = self.connection.unary(service + rpc, request.SerializeToString(), self.timeout,
                                          idempotent=rpc in IDEMPOTENT)
        except RpcStatus as exc:
            raise status_error(exc.code, exc.details, operation or rpc, target, self.endpoint) from None
        try:
            return response.FromString(reply)
        except MessageError as exc:
            raise RuntimeOutputError("%s: the runtime's answer is not a %s (%s)" % (
                operation or rpc, response.__name__, exc), operation or rpc, target) from None

    def close(self) -> None:
        self.connection.close()

    def version(self) -> Dict[str, str]:
        reply = self.call("Version", self.pb.VersionRequest(version="v1"), self.pb.VersionResponse,
                          operation="version")
        return {"RuntimeName": reply.runtime_name, "RuntimeVersion": reply.runtime_version,
                "RuntimeApiVersion": reply.runtime_api_version}

    def list_containers(self) -> List[ListedContainer]:
        reply = self.call("ListContainers", self.pb.ListContainersRequest(), self.pb.ListContainersResponse,
                          operation="list")
        return [listed_container({"id": item.id, "podSandboxId": item.pod_sandbox_id, "labels": dict(item.labels),
                                  "metadata": {"name": item.metadata.name, "attempt": item.metadata.attempt}},
                                 self.pb.enum_name("ContainerState", item.state), item.created_at)
                for item in reply.containers]

    def inspect(self, container_id: str) -> ContainerInfo:
        check_container_id(container_id)
        reply = self.call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id, verbose=True),
                          self.pb.ContainerStatusResponse, target=container_id, operation="inspect")
        status = reply.status
        linux = status.resources.linux
        doc = {"id": status.id, "labels": dict(status.labels), "exitCode": status.exit_code, "reason": status.reason,
               "metadata": {"name": status.metadata.name, "attempt": status.metadata.attempt},
               "resources": {"linux": {"cpuShares": linux.cpu_shares, "cpuQuota": linux.cpu_quota,
                                       "cpuPeriod": linux.cpu_period,
                                       "memoryLimitInBytes": linux.memory_limit_in_bytes}}}
        info = parse_info_json(dict(reply.info), "container %s" % container_id)
        return container_info(doc, info, pid_cgroup=pid_cgroup(info))._replace(finished_at=status.finished_at)

    def pod_annotations(self, sandbox_id: str) -> Mapping[str, Any]:
        check_container_id(sandbox_id)
        reply = self.call("PodSandboxStatus", self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id),
                          self.pb.PodSandboxStatusResponse, target=sandbox_id, operation="inspect_pod")
        return dict(reply.status.annotations)

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        check_container_id(sandbox_id)
        reply = self.call("PodSandboxStatus", self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
                          self.pb.PodSandboxStatusResponse, target=sandbox_id, operation="inspect_pod")
        what = "pod sandbox " + sandbox_id
        return sandbox_cgroup_parent(parse_info_json(dict(reply.info), what), what)

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        check_container_id(container_id)
        linux = self.pb.LinuxContainerResources(
            cpuset_cpus=str(cpuset_cpus) if cpuset_cpus is not None else "",
            cpuset_mems=str(cpuset_mems) if cpuset_mems is not None else "",
            cpu_quota=cpu_quota or 0, cpu_period=cpu_period or 0)
        self.call("UpdateContainerResources",
                  self.pb.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
                  self.pb.UpdateContainerResourcesResponse, target=container_id, operation="update")

    def event_stream(self) -> EventStream:
        """The runtime's container events (GetContainerEvents, containerd 1.7 and later) as a waker for the agent,
        on a connection of their own."""
        return EventStream(Connection(self.endpoint), SERVICE + "GetContainerEvents",
                           self.pb.GetEventsRequest().SerializeToString())


class EventStream:
    """A streaming call read in a thread: each event makes the descriptor readable. A stream that ends, breaks or goes
    silent (the connection's keepalive PING unanswered) is opened again after a back-off, and the agent is woken once
    (events may have been missed meanwhile); ``interruptions`` counts them and ``interrupted`` says the last why. When
    the runtime does not stream at all (UNIMPLEMENTED: containerd 1.6), ``ended`` says so and the agent keeps its other
    wakers. Nothing the runtime sends ends more than this stream."""

    RETRY, MAX_RETRY = 0.5, 30.0  # seconds before the stream is opened again, doubling while it keeps failing

    def __init__(self, connection: Connection, path: str, request: bytes) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._connection = connection
        self._path, self._request = path, request
        self._closing = threading.Event()
        self.events = 0
        self.interruptions = 0
        self.interrupted = ""
        self.ended = ""
        self._thread = threading.Thread(target=self._run, name="kubecpu-cri-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        retry = self.RETRY
        while not self._closing.is_set():
            try:
                for _event in self._connection.stream(self._path, self._request):
                    self.events += 1
                    retry = self.RETRY
                    self._wake(b"e")
                why = "the runtime ended its event stream"
            except RpcStatus as exc:
                if exc.code == "UNIMPLEMENTED":
                    self.ended = "the runtime does not stream container events (UNIMPLEMENTED)"
                    break
                why = "%s: %s" % (exc.code, exc.details)
            except Exception as exc:  # pylint: disable=broad-except  # whatever the runtime sent ends this stream, never the agent
                why = "%s: %s" % (type(exc).__name__, exc)
            if self._closing.is_set():
                break
            self.interruptions += 1
            self.interrupted = why
            self._wake(b"e")  # events may have been missed: a pass
            self._closing.wait(retry)
            retry = min(retry * 2, self.MAX_RETRY)
        self.ended = self.ended or "closed"
        self._wake(b"x")

    def _wake(self, what: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, what)

    def fileno(self) -> int:
        return self._read

    def changed(self) -> bool:
        try:
            return bool(os.read(self._read, 4096).replace(b"x", b""))
        except BlockingIOError:
            return False

    def close(self) -> None:
        self._closing.set()
        self._connection.close()
        self._thread.join(timeout=2)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
