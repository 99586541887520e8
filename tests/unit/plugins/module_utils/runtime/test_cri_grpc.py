"""The CRI backend against an in-process gRPC server on a Unix socket that answers the CRI paths with the table's
messages: the decoding of the list and the status, the update sent, gRPC statuses mapped to the core's errors with
Go's texts, and the call counting. (The real containerd is the integration tests'.)"""

from __future__ import annotations

import json
import struct
import time
from concurrent import futures

import grpc
import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (ContainerNotFoundError,
                                                                                 ContainerRuntimeError,
                                                                                 RuntimeTimeoutError,
                                                                                 RuntimeUnavailableError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime import cri_grpc
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import grpc_h2
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import h2_peer

PB = cri_grpc.schema()
CID = "c0ffee" * 4
LABELS = {"io.kubernetes.pod.uid": "uid-1", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "prod",
          "io.kubernetes.container.name": "main"}
INFO = {"runtimeSpec": {"linux": {"cgroupsPath": "kubepods-poduid_1.slice:cri-containerd:" + CID}},
        "config": {"linux": {"resources": {"cpu_shares": 2048, "cpu_quota": 200000, "cpu_period": 100000}}}}


class CRI:
    """What the server answers; ``fail`` maps an RPC name to a gRPC status code."""

    def __init__(self):
        self.updates = []
        self.fail = {}

    def handle(self, rpc, request, context):
        if rpc in self.fail:
            context.abort(self.fail[rpc], "oops " + rpc)
        if rpc == "ListContainers":
            item = PB.Container(id=CID, pod_sandbox_id="sb", state=1, created_at=7, labels=LABELS)
            item.metadata.name, item.metadata.attempt = "main", 1
            return PB.ListContainersResponse(containers=[item])
        if rpc == "ContainerStatus":
            reply = PB.ContainerStatusResponse(info={"info": json.dumps(INFO)})
            reply.status.id, reply.status.exit_code, reply.status.finished_at = request.container_id, 0, 0
            reply.status.labels.update(LABELS)
            reply.status.metadata.name = "main"
            return reply
        if rpc == "UpdateContainerResources":
            self.updates.append(request)
            return PB.UpdateContainerResourcesResponse()
        if rpc == "Version":
            return PB.VersionResponse(runtime_name="containerd", runtime_version="v1.7.24", runtime_api_version="v1")
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown service")
        return None


REQUESTS = {"ListContainers": PB.ListContainersRequest, "ContainerStatus": PB.ContainerStatusRequest,
            "UpdateContainerResources": PB.UpdateContainerResourcesRequest, "Version": PB.VersionRequest}


@pytest.fixture
def server(tmp_path):
    cri = CRI()

    def method(rpc):
        return grpc.unary_unary_rpc_method_handler(lambda request, context: cri.handle(rpc, request, context),
                                                   request_deserializer=REQUESTS[rpc].FromString,
                                                   response_serializer=lambda m: m.SerializeToString())

    def events(request, context):
        if cri.fail.get("GetContainerEvents"):
            context.abort(cri.fail["GetContainerEvents"], "no events here")
        for n in range(3):
            yield PB.ContainerEventResponse(container_id="c%d" % n, container_event_type=n)

    methods = {rpc: method(rpc) for rpc in REQUESTS}
    methods["GetContainerEvents"] = grpc.unary_stream_rpc_method_handler(
        events, request_deserializer=PB.GetEventsRequest.FromString, response_serializer=lambda m: m.SerializeToString())
    handler = grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", methods)
    running = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    socket = str(tmp_path / "cri.sock")
    running.add_insecure_port("unix://" + socket)
    running.start()
    yield cri, socket
    running.stop(0)


def test_list_status_and_update_over_the_wire(server):
    cri, socket = server
    runtime = cri_grpc.CRIRuntime(socket, timeout=2.0)  # a bare socket path is a unix:// endpoint
    try:
        (listed,) = runtime.list_containers()
        assert (listed.id, listed.pod_ref, listed.name, listed.attempt, listed.state, listed.sandbox_id) == (
            CID, "prod/web", "main", 1, "CONTAINER_RUNNING", "sb")
        info = runtime.describe(listed)
        assert info.qos == "Guaranteed" and info.requested_milli() == 2000
        assert info.cgroup_path == "/kubepods.slice/kubepods-poduid_1.slice/cri-containerd-%s.scope" % CID
        runtime.update(CID, cpuset_cpus=CPUSet.parse("2-3"), cpu_quota=-1)
        (sent,) = cri.updates
        assert (sent.container_id, sent.linux.cpuset_cpus, sent.linux.cpuset_mems, sent.linux.cpu_quota,
                sent.linux.cpu_period) == (CID, "2-3", "", -1, 0)  # zero fields are left alone by runtimes
        assert runtime.version()["RuntimeVersion"] == "v1.7.24"
        assert runtime.calls == {"list": 1, "inspect": 1, "update": 1, "version": 1}
    finally:
        runtime.close()


@pytest.mark.parametrize("code, error, text", [
    (grpc.StatusCode.NOT_FOUND, ContainerNotFoundError, "container %s not found by the runtime "
                                                        "(rpc error: code = NotFound desc = oops UpdateContainerResources)"),
    (grpc.StatusCode.UNAVAILABLE, RuntimeUnavailableError, "container runtime unavailable: rpc error: code = "
                                                           "Unavailable desc = oops UpdateContainerResources"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, RuntimeTimeoutError, "update %s failed: rpc error: code = DeadlineExceeded"),
    (grpc.StatusCode.INTERNAL, ContainerRuntimeError, "update %s failed: rpc error: code = Internal desc = oops"),
])
def test_statuses_become_the_cores_errors_with_gos_texts(server, code, error, text):
    cri, socket = server
    cri.fail["UpdateContainerResources"] = code
    with _open(socket) as runtime:
        with pytest.raises(error) as raised:
            runtime.update(CID, cpuset_cpus=CPUSet.parse("1"))
    assert isinstance(raised.value, error) and str(raised.value).startswith(text.replace("%s", CID))
    assert raised.value.operation == "update" and raised.value.target == CID


def test_a_missing_socket_is_unavailable_within_the_timeout(tmp_path):
    with _open(str(tmp_path / "none.sock"), timeout=0.5) as runtime:
        with pytest.raises(RuntimeUnavailableError, match=r"none\.sock"):
            runtime.list_containers()


def test_status_codes_outside_the_table_keep_their_name():
    error = cri_grpc.status_error("RESOURCE_EXHAUSTED", "full", "list", "", "unix:///x")
    assert isinstance(error, ContainerRuntimeError) and str(error) == "list failed: rpc error: code = RESOURCE_EXHAUSTED desc = full"
    assert "not online on this node" in str(cri_grpc.status_error("UNKNOWN", "write: numerical result out of range",
                                                                  "update", "c", "unix:///x"))


class _open:  # a context manager that closes the channel
    def __init__(self, socket, timeout=2.0):
        self.runtime = cri_grpc.CRIRuntime("unix://" + socket, timeout=timeout)

    def __enter__(self):
        return self.runtime

    def __exit__(self, *_exc):
        self.runtime.close()


def _until(condition, timeout=5):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_container_events_wake_the_agent_and_a_runtime_without_them_is_said(server, monkeypatch):
    cri, socket = server
    monkeypatch.setattr(cri_grpc.EventStream, "RETRY", 0.05)
    with _open(socket) as runtime:
        stream = runtime.event_stream()
        assert _until(lambda: stream.interruptions >= 2)  # an ended stream is opened again, and again
        assert stream.interrupted == "the runtime ended its event stream" and stream.events >= 6 and not stream.ended
        assert stream.changed()  # each event makes the descriptor readable
        stream.close()
        assert stream.ended == "closed"
        cri.fail["GetContainerEvents"] = grpc.StatusCode.UNIMPLEMENTED
        stream = runtime.event_stream()
        assert _until(lambda: stream.ended) and stream.ended == \
            "the runtime does not stream container events (UNIMPLEMENTED)"
        assert stream.events == 0 and stream.interruptions == 0 and not stream.changed()
        stream.close()


def test_what_a_hostile_runtime_sends_is_a_runtime_error_of_the_call(tmp_path):
    """Issue 23: a grpc-status of "²" was a ValueError out of the backend (and out of the agent's pass); a length
    prefix of 4 GiB grew the process without bound. Each is now the call's runtime error, and the next call works."""
    def behave(link):
        if len(server.links) == 1:
            sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
            link.send(h2_peer.headers(sid, h2_peer.OK_HEADERS), h2_peer.headers(
                sid, [("grpc-status", "²")], grpc_h2.END_HEADERS | grpc_h2.END_STREAM))
            sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
            link.send(h2_peer.headers(sid, h2_peer.OK_HEADERS),
                      grpc_h2.frame(grpc_h2.DATA, 0, sid, struct.pack(">BI", 0, 0xFFFFFFFF)))
            link.flood(lambda: grpc_h2.frame(grpc_h2.DATA, 0, sid, bytes(16384)))
        sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
        h2_peer.answer(link, sid, PB.ListContainersResponse().SerializeToString())
        link.until(255)

    server = h2_peer.Server(str(tmp_path / "cri.sock"), behave)
    runtime = cri_grpc.CRIRuntime("unix://" + str(tmp_path / "cri.sock"), timeout=2.0)
    try:
        with pytest.raises(ContainerRuntimeError, match="code = Unknown"):
            runtime.list_containers()
        with pytest.raises(ContainerRuntimeError, match="code = RESOURCE_EXHAUSTED desc = grpc: received message larger"):
            runtime.inspect("a" * 64)
        assert runtime.list_containers() == []
    finally:
        runtime.close()
        server.close()


def test_a_container_list_the_kubelet_reads_is_read_whatever_a_tenant_puts_in_its_containers(tmp_path):
    """The kubelet reads CRI replies up to 16 MiB (remote_runtime.go maxMsgSize; containerd sends as much). A tenant's
    containers carry what it writes in its pod spec into ListContainers (the kubelet's container annotations
    io.kubernetes.container.preStopHandler and .ports hold the spec's JSON), about 1 MiB a pod. When kubecpu read 4 MiB
    (issue 62 review), five such pods made every list fail: every pass of the agent, and the OCI hook refused every
    other tenant's container whose pod held exclusive CPUs already ("the runtime could not show the pod")."""
    big = "x" * (1 << 20)  # a tenant's preStop command, as the kubelet copies it into the container's annotations

    def varint(n):
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out

    def field(number, data):  # a length-delimited field
        return varint(number << 3 | 2) + varint(len(data)) + data

    def handle(_request, _context):
        reply = b""
        for n in range(6):
            item = PB.Container(id=("%02d" % n) * 32, pod_sandbox_id="sb%d" % n, state=1, created_at=7,
                                labels={"io.kubernetes.pod.uid": "uid-%d" % n, "io.kubernetes.pod.name": "p%d" % n,
                                        "io.kubernetes.pod.namespace": "tenant",
                                        "io.kubernetes.container.name": "main"})
            item.metadata.name = "main"
            # annotations (Container field 9, a map entry: key 1, value 2), which kubecpu's schema skips
            entry = field(1, b"io.kubernetes.container.preStopHandler") + field(2, big.encode())
            reply += field(1, item.SerializeToString() + field(9, entry))
        return reply

    method = grpc.unary_unary_rpc_method_handler(handle, request_deserializer=PB.ListContainersRequest.FromString,
                                                 response_serializer=lambda m: m)
    handler = grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {"ListContainers": method})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), handlers=[handler])
    socket = str(tmp_path / "cri.sock")
    server.add_insecure_port("unix://" + socket)
    server.start()
    runtime = cri_grpc.CRIRuntime(socket, timeout=5.0)
    try:
        assert len(runtime.list_containers()) == 6
    finally:
        runtime.close()
        server.stop(0)
