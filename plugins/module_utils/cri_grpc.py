# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The CRI backend: the runtime's gRPC API directly (``runtime.v1.RuntimeService``), one channel for all calls.

Optional: it needs ``grpcio`` and ``protobuf``. The messages it uses are declared below in our own ``.proto``
(field names and numbers are the CRI API's, RUNTIME.md section 5); the Python code for them is generated
once with ``grpcio-tools`` into a private directory (by default beside the state file) and reused. The
crictl backend needs none of this.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional

from .cpuset import CPUSet
from .crictl import classify
from .errors import ContainerRuntimeError, RuntimeUnavailableError
from .runtime import (ContainerInfo, ListedContainer, ListedPod, Runtime, check_container_id, container_info,
                      listed_container, listed_pod, parse_info_json, pid_cgroup, sandbox_cgroup_parent)

PROTO_NAME = "kubecpu_cri_v1.proto"
PROTO = r'''// The subset of the CRI v1 API (k8s.io/cri-api runtime/v1 api.proto) that kubecpu uses.
// Field names and numbers are the CRI's; messages list only the fields kubecpu reads or writes.
syntax = "proto3";
package runtime.v1;

service RuntimeService {
  rpc Version(VersionRequest) returns (VersionResponse) {}
  rpc RunPodSandbox(RunPodSandboxRequest) returns (RunPodSandboxResponse) {}
  rpc StopPodSandbox(StopPodSandboxRequest) returns (StopPodSandboxResponse) {}
  rpc RemovePodSandbox(RemovePodSandboxRequest) returns (RemovePodSandboxResponse) {}
  rpc PodSandboxStatus(PodSandboxStatusRequest) returns (PodSandboxStatusResponse) {}
  rpc ListPodSandbox(ListPodSandboxRequest) returns (ListPodSandboxResponse) {}
  rpc CreateContainer(CreateContainerRequest) returns (CreateContainerResponse) {}
  rpc StartContainer(StartContainerRequest) returns (StartContainerResponse) {}
  rpc StopContainer(StopContainerRequest) returns (StopContainerResponse) {}
  rpc RemoveContainer(RemoveContainerRequest) returns (RemoveContainerResponse) {}
  rpc ListContainers(ListContainersRequest) returns (ListContainersResponse) {}
  rpc ContainerStatus(ContainerStatusRequest) returns (ContainerStatusResponse) {}
  rpc UpdateContainerResources(UpdateContainerResourcesRequest) returns (UpdateContainerResourcesResponse) {}
}

message VersionRequest { string version = 1; }
message VersionResponse {
  string version = 1;
  string runtime_name = 2;
  string runtime_version = 3;
  string runtime_api_version = 4;
}

enum NamespaceMode { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
message NamespaceOption {
  NamespaceMode network = 1;
  NamespaceMode pid = 2;
  NamespaceMode ipc = 3;
  string target_id = 4;
}
message LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; }
message LinuxPodSandboxConfig {
  string cgroup_parent = 1;
  LinuxSandboxSecurityContext security_context = 2;
}
message PodSandboxMetadata {
  string name = 1;
  string uid = 2;
  string namespace = 3;
  uint32 attempt = 4;
}
message PodSandboxConfig {
  PodSandboxMetadata metadata = 1;
  string hostname = 2;
  string log_directory = 3;
  map<string, string> labels = 6;
  map<string, string> annotations = 7;
  LinuxPodSandboxConfig linux = 8;
}
message RunPodSandboxRequest {
  PodSandboxConfig config = 1;
  string runtime_handler = 2;
}
message RunPodSandboxResponse { string pod_sandbox_id = 1; }
message StopPodSandboxRequest { string pod_sandbox_id = 1; }
message StopPodSandboxResponse {}
message RemovePodSandboxRequest { string pod_sandbox_id = 1; }
message RemovePodSandboxResponse {}
enum PodSandboxState { SANDBOX_READY = 0; SANDBOX_NOTREADY = 1; }
message PodSandboxStateValue { PodSandboxState state = 1; }
message PodSandboxFilter {
  string id = 1;
  PodSandboxStateValue state = 2;
  map<string, string> label_selector = 3;
}
message ListPodSandboxRequest { PodSandboxFilter filter = 1; }
message PodSandbox {
  string id = 1;
  PodSandboxMetadata metadata = 2;
  PodSandboxState state = 3;
  int64 created_at = 4;
  map<string, string> labels = 5;
  map<string, string> annotations = 6;
  string runtime_handler = 7;
}
message ListPodSandboxResponse { repeated PodSandbox items = 1; }
message PodSandboxStatusRequest {
  string pod_sandbox_id = 1;
  bool verbose = 2;
}
message PodSandboxStatus {
  string id = 1;
  PodSandboxMetadata metadata = 2;
  PodSandboxState state = 3;
  int64 created_at = 4;
  map<string, string> labels = 7;
  map<string, string> annotations = 8;
  string runtime_handler = 9;
}
message PodSandboxStatusResponse {
  PodSandboxStatus status = 1;
  map<string, string> info = 2;
}

message ImageSpec {
  string image = 1;
  map<string, string> annotations = 2;
  string user_specified_image = 18;
}
message KeyValue {
  string key = 1;
  string value = 2;
}
message LinuxContainerResources {
  int64 cpu_period = 1;
  int64 cpu_quota = 2;
  int64 cpu_shares = 3;
  int64 memory_limit_in_bytes = 4;
  int64 oom_score_adj = 5;
  string cpuset_cpus = 6;
  string cpuset_mems = 7;
  int64 memory_swap_limit_in_bytes = 10;
}
message LinuxContainerSecurityContext { NamespaceOption namespace_options = 3; }
message LinuxContainerConfig {
  LinuxContainerResources resources = 1;
  LinuxContainerSecurityContext security_context = 2;
}
message ContainerMetadata {
  string name = 1;
  uint32 attempt = 2;
}
message ContainerConfig {
  ContainerMetadata metadata = 1;
  ImageSpec image = 2;
  repeated string command = 3;
  repeated string args = 4;
  string working_dir = 5;
  repeated KeyValue envs = 6;
  map<string, string> labels = 9;
  map<string, string> annotations = 10;
  string log_path = 11;
  LinuxContainerConfig linux = 15;
}
message CreateContainerRequest {
  string pod_sandbox_id = 1;
  ContainerConfig config = 2;
  PodSandboxConfig sandbox_config = 3;
}
message CreateContainerResponse { string container_id = 1; }
message StartContainerRequest { string container_id = 1; }
message StartContainerResponse {}
message StopContainerRequest {
  string container_id = 1;
  int64 timeout = 2;
}
message StopContainerResponse {}
message RemoveContainerRequest { string container_id = 1; }
message RemoveContainerResponse {}

enum ContainerState {
  CONTAINER_CREATED = 0;
  CONTAINER_RUNNING = 1;
  CONTAINER_EXITED = 2;
  CONTAINER_UNKNOWN = 3;
}
message ContainerStateValue { ContainerState state = 1; }
message ContainerFilter {
  string id = 1;
  ContainerStateValue state = 2;
  string pod_sandbox_id = 3;
  map<string, string> label_selector = 4;
}
message ListContainersRequest { ContainerFilter filter = 1; }
message Container {
  string id = 1;
  string pod_sandbox_id = 2;
  ContainerMetadata metadata = 3;
  ImageSpec image = 4;
  string image_ref = 5;
  ContainerState state = 6;
  int64 created_at = 7;
  map<string, string> labels = 8;
  map<string, string> annotations = 9;
}
message ListContainersResponse { repeated Container containers = 1; }

message ContainerStatusRequest {
  string container_id = 1;
  bool verbose = 2;
}
message ContainerResources { LinuxContainerResources linux = 1; }
message ContainerStatus {
  string id = 1;
  ContainerMetadata metadata = 2;
  ContainerState state = 3;
  int64 created_at = 4;
  int64 started_at = 5;
  int64 finished_at = 6;
  int32 exit_code = 7;
  string reason = 10;
  string message = 11;
  map<string, string> labels = 12;
  map<string, string> annotations = 13;
  ContainerResources resources = 16;
}
message ContainerStatusResponse {
  ContainerStatus status = 1;
  map<string, string> info = 2;
}

message UpdateContainerResourcesRequest {
  string container_id = 1;
  LinuxContainerResources linux = 2;
  map<string, string> annotations = 4;
}
message UpdateContainerResourcesResponse {}
'''

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
SERVICE = "/runtime.v1.RuntimeService/"
_GO_CODES = {"NOT_FOUND": "NotFound", "UNAVAILABLE": "Unavailable", "DEADLINE_EXCEEDED": "DeadlineExceeded",
             "UNKNOWN": "Unknown", "INVALID_ARGUMENT": "InvalidArgument", "UNIMPLEMENTED": "Unimplemented",
             "FAILED_PRECONDITION": "FailedPrecondition", "INTERNAL": "Internal", "CANCELLED": "Canceled"}
_NEED = "the cri runtime needs the Python packages grpcio and protobuf (and grpcio-tools once, to generate " \
        "its messages): pip install grpcio grpcio-tools protobuf"


def proto_digest() -> str:
    return hashlib.sha256(PROTO.encode("utf-8")).hexdigest()[:16]


def generate_messages(directory: str) -> str:
    """Generate the Python module for PROTO into ``directory``/cri-<digest>/ (once); returns the module path."""
    target = os.path.join(directory, "cri-" + proto_digest())
    module = os.path.join(target, "kubecpu_cri_v1_pb2.py")
    if os.path.exists(module):
        return module
    try:
        from grpc_tools import protoc  # type: ignore[import-untyped]  # noqa: PLC0415  # optional
    except ImportError:
        raise RuntimeUnavailableError(_NEED) from None
    os.makedirs(directory, mode=0o700, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".cri-gen-", dir=directory)
    try:
        with open(os.path.join(work, PROTO_NAME), "w", encoding="utf-8") as handle:
            handle.write(PROTO)
        status = protoc.main(["protoc", "-I", work, "--python_out=" + work, os.path.join(work, PROTO_NAME)])
        if status != 0:
            raise RuntimeUnavailableError("generating the CRI messages with grpcio-tools failed (status %s)" % status)
        try:
            os.rename(work, target)
        except OSError:
            if not os.path.exists(module):  # another process won the race: use its result
                raise
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
    return module


def load_messages(directory: str) -> Any:
    """The generated message module (generated first when needed)."""
    name = "kubecpu_cri_v1_pb2_" + proto_digest()
    if name in sys.modules:
        return sys.modules[name]
    try:
        import google.protobuf  # type: ignore[import-untyped]  # noqa: F401, PLC0415  # pylint: disable=unused-import
    except ImportError:
        raise RuntimeUnavailableError(_NEED) from None
    path = generate_messages(directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeUnavailableError("cannot load the generated CRI messages from %s" % path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def grpc_target(endpoint: str) -> str:
    """CRI endpoints are ``unix:///path`` (or a bare socket path)."""
    if endpoint.startswith("/"):
        return "unix://" + endpoint
    return endpoint


class CRIRuntime(Runtime):
    """CRI over gRPC: one channel for every call, each call bounded by the timeout."""

    name = "cri"

    def __init__(self, endpoint: Optional[str] = None, timeout: float = 2.0, codegen_dir: Optional[str] = None) -> None:
        super().__init__()
        try:
            import grpc  # type: ignore[import-untyped]  # noqa: PLC0415  # optional
        except ImportError:
            raise RuntimeUnavailableError(_NEED) from None
        self._grpc = grpc
        self.endpoint = endpoint or DEFAULT_ENDPOINT
        self.timeout = timeout
        self.pb = load_messages(codegen_dir or os.path.join(tempfile.gettempdir(), "kubecpu-%d" % os.getuid()))
        self.channel = grpc.insecure_channel(grpc_target(self.endpoint))
        self._methods: Dict[str, Any] = {}

    def _call(self, rpc: str, request: Any, response: str, target: str = "", operation: str = "") -> Any:
        self.count(operation or rpc)
        method = self._methods.get(rpc)
        if method is None:
            method = self.channel.unary_unary(SERVICE + rpc, request_serializer=type(request).SerializeToString,
                                              response_deserializer=getattr(self.pb, response).FromString)
            self._methods[rpc] = method
        try:
            return method(request, timeout=self.timeout)
        except self._grpc.RpcError as exc:
            code = exc.code().name if callable(getattr(exc, "code", None)) else "UNKNOWN"
            details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
            message = "rpc error: code = %s desc = %s" % (_GO_CODES.get(code, code), details)
            if code == "UNAVAILABLE":
                message += " (endpoint %s)" % self.endpoint
            raise classify(operation or rpc, target, message) from None

    def close(self) -> None:
        self.channel.close()

    # --- what the CPU manager uses ---------------------------------------------------------------------------
    def version(self) -> Dict[str, str]:
        reply = self._call("Version", self.pb.VersionRequest(version="v1"), "VersionResponse", operation="version")
        return {"RuntimeName": reply.runtime_name, "RuntimeVersion": reply.runtime_version,
                "RuntimeApiVersion": reply.runtime_api_version}

    def list_containers(self) -> List[ListedContainer]:
        reply = self._call("ListContainers", self.pb.ListContainersRequest(), "ListContainersResponse",
                           operation="list")
        result = []
        for item in reply.containers:
            doc = {"id": item.id, "podSandboxId": item.pod_sandbox_id, "labels": dict(item.labels),
                   "metadata": {"name": item.metadata.name, "attempt": item.metadata.attempt}}
            result.append(listed_container(doc, self.pb.ContainerState.Name(item.state), item.created_at))
        return result

    def inspect(self, container_id: str) -> ContainerInfo:
        check_container_id(container_id)
        reply = self._call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id, verbose=True),
                           "ContainerStatusResponse", container_id, "inspect")
        status = reply.status
        linux = status.resources.linux
        doc = {"id": status.id, "labels": dict(status.labels), "exitCode": status.exit_code, "reason": status.reason,
               "metadata": {"name": status.metadata.name, "attempt": status.metadata.attempt},
               "resources": {"linux": {"cpuShares": linux.cpu_shares, "cpuQuota": linux.cpu_quota,
                                       "cpuPeriod": linux.cpu_period,
                                       "memoryLimitInBytes": linux.memory_limit_in_bytes}}}
        info = parse_info_json(dict(reply.info), "container %s" % container_id)
        return container_info(doc, info, pid_cgroup=pid_cgroup(info))._replace(finished_at=status.finished_at)

    def list_pods(self) -> List[ListedPod]:
        reply = self._call("ListPodSandbox", self.pb.ListPodSandboxRequest(), "ListPodSandboxResponse",
                           operation="list_pods")
        return [listed_pod({"id": item.id, "state": self.pb.PodSandboxState.Name(item.state),
                            "metadata": {"uid": item.metadata.uid, "name": item.metadata.name,
                                         "namespace": item.metadata.namespace}}) for item in reply.items]

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        check_container_id(sandbox_id)
        reply = self._call("PodSandboxStatus", self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
                           "PodSandboxStatusResponse", sandbox_id, "inspect_pod")
        what = "pod sandbox " + sandbox_id
        return sandbox_cgroup_parent(parse_info_json(dict(reply.info), what), what)

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        check_container_id(container_id)
        linux = self.pb.LinuxContainerResources(
            cpuset_cpus=str(cpuset_cpus) if cpuset_cpus is not None else "",
            cpuset_mems=str(cpuset_mems) if cpuset_mems is not None else "",
            cpu_quota=cpu_quota or 0, cpu_period=cpu_period or 0)
        self._call("UpdateContainerResources",
                   self.pb.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
                   "UpdateContainerResourcesResponse", container_id, "update")

    # --- the kubelet's side, for the tests and the demo (creating kubelet-like pods) --------------------------
    def _message(self, name: str, doc: Mapping[str, Any]) -> Any:
        from google.protobuf import json_format  # noqa: PLC0415  # only the pod-creating helpers need it

        try:
            return json_format.ParseDict(dict(doc), getattr(self.pb, name)(), ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ContainerRuntimeError("bad %s: %s" % (name, exc)) from None

    def run_pod_sandbox(self, config: Mapping[str, Any]) -> str:
        request = self.pb.RunPodSandboxRequest(config=self._message("PodSandboxConfig", config))
        return str(self._call("RunPodSandbox", request, "RunPodSandboxResponse").pod_sandbox_id)

    def create_container(self, sandbox_id: str, config: Mapping[str, Any], sandbox_config: Mapping[str, Any]) -> str:
        request = self.pb.CreateContainerRequest(pod_sandbox_id=sandbox_id,
                                                 config=self._message("ContainerConfig", config),
                                                 sandbox_config=self._message("PodSandboxConfig", sandbox_config))
        return str(self._call("CreateContainer", request, "CreateContainerResponse").container_id)

    def start_container(self, container_id: str) -> None:
        self._call("StartContainer", self.pb.StartContainerRequest(container_id=container_id),
                   "StartContainerResponse", container_id)

    def stop_container(self, container_id: str, timeout: int = 0) -> None:
        self._call("StopContainer", self.pb.StopContainerRequest(container_id=container_id, timeout=timeout),
                   "StopContainerResponse", container_id)

    def remove_container(self, container_id: str) -> None:
        self._call("RemoveContainer", self.pb.RemoveContainerRequest(container_id=container_id),
                   "RemoveContainerResponse", container_id)

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        with contextlib.suppress(ContainerRuntimeError):
            self._call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
                       "StopPodSandboxResponse", sandbox_id)
        self._call("RemovePodSandbox", self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id),
                   "RemovePodSandboxResponse", sandbox_id)
