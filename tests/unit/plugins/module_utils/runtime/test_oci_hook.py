"""What an OCI runtime hands a createRuntime hook, read as the container model: the state on stdin (runtime-spec
runtime.md "State") and the bundle's config.json, as containerd's CRI (1.6 and 1.7, copied from what they wrote) and
CRI-O annotate them. Everything malformed is a HookInputError naming what was wrong; nothing else escapes."""

from __future__ import annotations

import io
import json
import os
import threading
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HookInputError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import BURSTABLE, GUARANTEED
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.oci_hook import (
    CONTAINER, MAX_CONFIG_BYTES, MAX_STATE_BYTES, SANDBOX, HookState, container, read_config, read_state)
from hypothesis import given, settings
from hypothesis import strategies as st

CID = "dfcea0cbe4e2d85dcf677a71e69078316d2a9dcaee2a0a9656f819a9f9ede781"
UID = "29588252-f547-4cc8-86c8-f905f933ae0a"
CONTAINERD = {  # what containerd 1.6.20 and 1.7.24 put in the state (and config.json) of a pod's container
    "io.kubernetes.cri.container-name": "app", "io.kubernetes.cri.container-type": "container",
    "io.kubernetes.cri.image-name": "localhost/busybox:1.35.0", "io.kubernetes.cri.sandbox-id": "e5" * 32,
    "io.kubernetes.cri.sandbox-name": "probe", "io.kubernetes.cri.sandbox-namespace": "lab",
    "io.kubernetes.cri.sandbox-uid": UID}
CRIO = {"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.pod.uid": UID,
        "io.kubernetes.pod.name": "probe", "io.kubernetes.pod.namespace": "lab", "io.kubernetes.container.name": "app"}


def pipe(data: bytes):
    """A real pipe with ``data`` written and the write end closed, as runc hands the hook its stdin."""
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_fd, data) if data else None, os.close(write_fd)))
    writer.start()
    return os.fdopen(read_fd, "rb"), writer


def state_doc(**changes):
    doc = {"ociVersion": "1.0.2-dev", "id": CID, "status": "creating", "pid": 29409, "bundle": "/run/b/" + CID,
           "annotations": CONTAINERD}
    doc.update(changes)
    return doc


def config_doc(path="/kubepods/pod%s/%s" % (UID, CID), cpu=None, memory=None):
    cpu = {"shares": 1024, "quota": 100000, "period": 100000} if cpu is None else cpu
    return {"ociVersion": "1.0.2-dev", "annotations": CONTAINERD,
            "linux": {"cgroupsPath": path, "resources": {"cpu": cpu, "memory": memory or {"limit": 67108864}}}}


def test_the_state_on_stdin_is_read_from_a_pipe():
    stream, writer = pipe(json.dumps(state_doc()).encode())
    state = read_state(stream)
    writer.join()
    assert state == HookState(CID, 29409, "/run/b/" + CID, CONTAINERD)


@pytest.mark.parametrize("data, message", [
    (b"", "is not JSON"),
    (b"{", "is not JSON"),
    (b"[]", "is not a JSON object"),
    (json.dumps(state_doc(id=None)).encode(), "no container id"),
    (json.dumps(state_doc(bundle="relative/dir")).encode(), "no absolute bundle path"),
    (json.dumps(state_doc(bundle="/run/b/\x00x")).encode(), "no absolute bundle path"),  # no system call takes it
    (json.dumps(state_doc(bundle=["/run/b"])).encode(), "no absolute bundle path"),
    (json.dumps(state_doc(pid=-1)).encode(), "bad pid"),
    (json.dumps(state_doc(pid=True)).encode(), "bad pid"),
    (json.dumps(state_doc(annotations={"a": 1})).encode(), "annotations that are not strings"),
    (json.dumps(state_doc(annotations=["a"])).encode(), "annotations that are not strings"),
    (b" " * (MAX_STATE_BYTES + 1), "larger than"),
])
def test_a_bad_state_is_named(data, message):
    stream, writer = pipe(data)
    with pytest.raises(HookInputError, match=message):
        read_state(stream)
    stream.close()
    writer.join()


def test_a_runtime_that_never_closes_stdin_is_given_up_on():
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as stream, pytest.raises(HookInputError, match="no complete OCI state"):
        read_state(stream, timeout=0.05)
    os.close(write_fd)


def test_a_peer_that_dribbles_is_given_up_on_at_the_timeout_not_per_read():
    """A byte every 20 ms never lets a read time out; the whole state still has its deadline."""
    read_fd, write_fd = os.pipe()
    stop = threading.Event()

    def dribble():
        while not stop.wait(0.02):
            os.write(write_fd, b" ")

    writer = threading.Thread(target=dribble)
    writer.start()
    started = time.monotonic()
    try:
        with os.fdopen(read_fd, "rb") as stream, pytest.raises(HookInputError, match="no complete OCI state"):
            read_state(stream, timeout=0.3)
    finally:
        stop.set()
        writer.join()
        os.close(write_fd)
    assert time.monotonic() - started < 2


def test_config_json_is_read_with_a_limit(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(config_doc()))
    assert read_config(str(tmp_path))["linux"]["cgroupsPath"].startswith("/kubepods/")
    (tmp_path / "config.json").write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(HookInputError, match="larger than"):
        read_config(str(tmp_path))
    with pytest.raises(HookInputError, match=r"cannot read .*nowhere/config\.json"):
        read_config(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("annotations, path, qos, kind, name", [
    (CONTAINERD, "/kubepods/pod%s/%s" % (UID, CID), GUARANTEED, CONTAINER, "app"),
    (CRIO, "/kubepods/burstable/pod%s/crio-%s" % (UID, CID), BURSTABLE, CONTAINER, "app"),
    (dict(CONTAINERD, **{"io.kubernetes.cri.container-type": "sandbox"}), "/kubepods/pod%s/%s" % (UID, CID),
     GUARANTEED, SANDBOX, ""),
])
def test_a_kubernetes_container_is_known_by_its_annotations(annotations, path, qos, kind, name):
    found = container(HookState(CID, 1, "/b", annotations), dict(config_doc(path), annotations=annotations))
    assert (found.kind, found.info.qos, found.info.name, found.info.pod_uid) == (kind, qos, name, UID)
    assert found.info.cgroup_path == path and found.info.requested_milli() == 1000
    assert found.ref == "lab/probe/%s (%s)" % (name, CID[:12])


def test_the_systemd_drivers_path_is_expanded_and_its_qos_read():
    spec = "kubepods-burstable-pod%s.slice:cri-containerd:%s" % (UID.replace("-", "_"), CID)
    found = container(HookState(CID, 1, "/b", CONTAINERD), config_doc(spec, cpu={"shares": 256, "cpus": "2-3"}))
    assert found.info.cgroup_path == ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
                                      "cri-containerd-%s.scope" % (UID.replace("-", "_"), CID))
    assert found.info.qos == BURSTABLE and found.info.requested_milli() == 250


@pytest.mark.parametrize("annotations", [
    {},  # podman, ctr, docker: not Kubernetes
    {"io.kubernetes.cri.container-type": "container"},  # no pod
    dict(CONTAINERD, **{"io.kubernetes.cri.container-type": "something"}),
    dict(CONTAINERD, **{"io.kubernetes.cri.container-name": ""}),
])
def test_what_is_not_a_kubernetes_container_passes(annotations):
    assert container(HookState(CID, 1, "/b", annotations), dict(config_doc(), annotations={})) is None


@pytest.mark.parametrize("config, message", [
    (dict(config_doc(), linux=[]), "linux in config.json is not an object"),
    (config_doc(cpu={"quota": "100000"}), "quota is not an integer"),
    (config_doc(cpu={"shares": 1.5}), "shares is not an integer"),
    (config_doc(memory={"limit": True}), "limit is not an integer"),
    ({"linux": {"cgroupsPath": 7}}, "cgroupsPath .* is not a string"),
    ({"linux": {"cgroupsPath": "/kubepods/pod1/\x00"}}, "cgroupsPath of container %s: the cgroup path .* holds a "
     "NUL byte" % CID),
    ({"linux": {"resources": {"cpu": []}}}, "linux.resources.cpu in config.json is not an object"),
])
def test_a_bad_config_is_named(config, message):
    with pytest.raises(HookInputError, match=message):
        container(HookState(CID, 1, "/b", CONTAINERD), config)


def test_a_cgroup_path_is_the_one_runc_made_never_one_above_the_cgroup_mount():
    config = dict(config_doc(), linux=dict(config_doc()["linux"], cgroupsPath="/kubepods/../../../etc//./x/"))
    assert container(HookState(CID, 1, "/b", CONTAINERD), config).cgroup_path == "/etc/x"


def test_a_container_id_that_cannot_be_a_path_is_refused():
    with pytest.raises(HookInputError, match="invalid container ID"):
        container(HookState("../../etc", 1, "/b", CONTAINERD), config_doc())


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(linux=JSON, annotations=st.dictionaries(st.sampled_from(sorted(CONTAINERD) + sorted(CRIO)),
                                               st.text(max_size=10), max_size=8))
def test_any_config_is_a_container_none_or_a_hook_input_error(linux, annotations):
    """Whatever config.json holds: a container, None, or HookInputError, never another exception."""
    try:
        container(HookState(CID, 1, "/b", annotations), {"linux": linux})
    except HookInputError:
        pass


def test_an_in_memory_stdin_is_read_with_the_same_limit():
    assert read_state(io.BytesIO(json.dumps(state_doc()).encode())).id == CID
    with pytest.raises(HookInputError, match="larger than"):
        read_state(io.BytesIO(b" " * (MAX_STATE_BYTES + 1)))


def test_kubernetes_largest_annotations_are_read_as_cri_o_hands_them_to_a_sandbox():
    """Kubernetes allows a pod 256 KiB of annotations; CRI-O copies them into a sandbox's state twice, and Go's JSON
    spells ``<`` in six bytes: the whole of it is read (and the bound on memory stays: MAX_STATE_BYTES)."""
    pod = {"example.com/blob-%d" % n: "<" * (64 * 1024 - 32) for n in range(4)}  # 256 KiB, each "<" as \u003c
    both = dict(CRIO, **pod, **{"io.kubernetes.cri-o.Annotations": json.dumps(pod)})
    data = json.dumps(state_doc(annotations=both)).replace("<", "\\u003c").encode()
    assert 2 * 256 * 1024 * 6 > len(data) > 2 * 256 * 1024 * 5 and len(data) < MAX_STATE_BYTES
    stream, writer = pipe(data)
    state = read_state(stream)
    writer.join()
    assert state.annotations == both


# Who may write which annotation, as each runtime layers them into a spec (the later layer wins). The tenant writes
# its pod's annotations; CRI-O copies them into the spec of the pod's sandbox and of every container of the pod;
# containerd copies those the operator lets through (pod_annotations: here all of them, the worst case).
VICTIM = "0a0a0a0a-1111-4222-8333-444444444444"
SANDBOX_ID = "5b" * 32
KUBELET_POD = {"io.kubernetes.pod.uid": UID, "io.kubernetes.pod.name": "probe",
               "io.kubernetes.pod.namespace": "lab"}  # the kubelet's pod labels (newPodLabels sets them last)
CRIO_OWN = {  # what CRI-O 1.36's SpecAddAnnotations sets on a container, over the pod's annotations
    "io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.cri-o.ContainerID": CID,
    "io.kubernetes.cri-o.SandboxID": SANDBOX_ID, "io.kubernetes.cri-o.SandboxName": "k8s_probe_lab_%s_0" % UID,
    "io.kubernetes.cri-o.Name": "k8s_app_probe_lab_%s_0" % UID, "io.container.manager": "cri-o"}
CRIO_OWN_SANDBOX = {  # setupSandboxAnnotations: written before the pod's annotations and labels
    "io.kubernetes.cri-o.ContainerType": "sandbox", "io.kubernetes.cri-o.ContainerID": SANDBOX_ID,
    "io.kubernetes.cri-o.SandboxID": SANDBOX_ID, "io.kubernetes.cri-o.ContainerName": "k8s_POD_probe_lab_%s_0" % UID,
    "io.container.manager": "cri-o"}
KUBELET_CONTAINER = {"io.kubernetes.container.hash": "4a4e2bd5", "io.kubernetes.container.restartCount": "0",
                     **KUBELET_POD, "io.kubernetes.container.name": "app"}  # annotations, then labels
CONTAINERD_SANDBOX = {key: value for key, value in CONTAINERD.items() if key != "io.kubernetes.cri.container-name"}
CONTAINERD_SANDBOX.update({"io.kubernetes.cri.container-type": "sandbox",
                           "io.kubernetes.cri.sandbox-id": SANDBOX_ID})

OWN_CONTAINER = (CONTAINER, UID, "probe", "lab", "app")
OWN_SANDBOX = (SANDBOX, UID, "probe", "lab", "")


def spec(runtime, kind, pod_annotations, pod_labels=None):
    """The annotations ``runtime`` puts in the spec of a pod's ``kind``, the pod carrying ``pod_annotations`` (and,
    for a CRI-O sandbox, ``pod_labels``) as its tenant wrote them."""
    if runtime == "containerd":  # the pass-through first, containerd's own keys after
        return {**pod_annotations, **(CONTAINERD if kind == CONTAINER else CONTAINERD_SANDBOX)}
    if kind == CONTAINER:  # SpecAddAnnotations: the sandbox's annotations, CRI-O's, the kubelet's
        return {**pod_annotations, **CRIO_OWN, **KUBELET_CONTAINER}
    # sandbox_run_linux.go: CRI-O's keys, then the pod's annotations and labels; its label "POD" and the kubelet's
    return {**CRIO_OWN_SANDBOX, **pod_annotations, **(pod_labels or {}), **KUBELET_POD,
            "io.kubernetes.container.name": "POD"}


def identity(annotations):
    """Who the hook takes the container for: (kind, pod UID, pod name, namespace, name), or None (passed)."""
    found = container(HookState(CID, 1, "/b", annotations), dict(config_doc(), annotations={}))
    return None if found is None else (found.kind, found.pod_uid, found.pod_name, found.pod_namespace, found.name)


IMPERSONATE = {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-uid": VICTIM,
               "io.kubernetes.cri.sandbox-name": "bank", "io.kubernetes.cri.sandbox-namespace": "other",
               "io.kubernetes.cri.container-name": "db"}
IMPERSONATE_CRIO = {"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.pod.uid": VICTIM,
                    "io.kubernetes.pod.name": "bank", "io.kubernetes.pod.namespace": "other",
                    "io.kubernetes.container.name": "db"}
REFUSED = "refused"


@pytest.mark.parametrize("runtime, kind, forged, expected", [
    # CRI-O: containerd's mark on the pod is a forgery; the container is refused, never taken for another
    ("cri-o", CONTAINER, IMPERSONATE, REFUSED),  # another pod's UID, name and container
    ("cri-o", SANDBOX, IMPERSONATE, REFUSED),
    ("cri-o", CONTAINER, {"io.kubernetes.cri.container-type": "sandbox"}, REFUSED),  # a sandbox: the shared pool
    ("cri-o", CONTAINER, {"io.kubernetes.cri.container-type": "none"}, REFUSED),  # not Kubernetes: passed untouched
    ("cri-o", CONTAINER, {"io.kubernetes.cri.container-type": ""}, REFUSED),
    # CRI-O: containerd's keys without its mark are ignored; CRI-O's own keys are written over the pod's
    ("cri-o", CONTAINER, {key: value for key, value in IMPERSONATE.items() if "type" not in key}, OWN_CONTAINER),
    ("cri-o", CONTAINER, IMPERSONATE_CRIO, OWN_CONTAINER),
    ("cri-o", CONTAINER, {"io.kubernetes.cri-o.ContainerType": "sandbox"}, OWN_CONTAINER),
    ("cri-o", CONTAINER, {"io.kubernetes.cri-o.ContainerType": "x", "io.kubernetes.cri-o.ContainerID": "1"},
     OWN_CONTAINER),
    # CRI-O's sandbox: the pod's annotations are written over its type, never over its name "POD" or the pod's keys
    ("cri-o", SANDBOX, IMPERSONATE_CRIO, OWN_SANDBOX),
    ("cri-o", SANDBOX, {"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.container.name": "app"},
     OWN_SANDBOX),
    ("cri-o", SANDBOX, {"io.kubernetes.cri-o.ContainerType": "passed"}, OWN_SANDBOX),
    ("cri-o", SANDBOX, {}, OWN_SANDBOX),
    ("cri-o", CONTAINER, {}, OWN_CONTAINER),
    # containerd, every pod annotation let through: CRI-O's mark is a forgery; containerd's own keys win
    ("containerd", CONTAINER, IMPERSONATE_CRIO, REFUSED),
    ("containerd", SANDBOX, {"io.kubernetes.cri-o.ContainerType": "sandbox"}, REFUSED),
    ("containerd", CONTAINER, {key: value for key, value in IMPERSONATE_CRIO.items() if "Type" not in key},
     OWN_CONTAINER),
    ("containerd", CONTAINER, IMPERSONATE, OWN_CONTAINER),
    ("containerd", SANDBOX, dict(IMPERSONATE, **{"io.kubernetes.cri.container-type": "container"}), OWN_SANDBOX),
    ("containerd", CONTAINER, {}, OWN_CONTAINER),
])
def test_a_tenants_annotations_never_choose_who_its_container_is(runtime, kind, forged, expected):
    """The identity the hook uses is the runtime's own, or the container is refused with a line naming it and the
    cause; never the one the pod's annotations claim."""
    annotations = spec(runtime, kind, forged, pod_labels=forged)
    if expected == REFUSED:
        with pytest.raises(HookInputError, match="container %s carries both containerd's mark .* and CRI-O's .*: a "
                                                 "runtime sets only its own.*; not created" % CID):
            identity(annotations)
    else:
        assert identity(annotations) == expected


MARKS = ("io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType")
TENANT_KEYS = st.sampled_from(sorted(set(CONTAINERD) | set(CRIO) | set(CRIO_OWN) | set(CRIO_OWN_SANDBOX)
                                     | set(KUBELET_CONTAINER))) | st.text(max_size=12)
TENANT_VALUES = st.sampled_from(["container", "sandbox", "POD", "", UID, VICTIM, "app", "db"]) | st.text(max_size=8)


@settings(max_examples=400, deadline=None)
@given(runtime=st.sampled_from(["containerd", "cri-o"]), kind=st.sampled_from([CONTAINER, SANDBOX]),
       forged=st.dictionaries(TENANT_KEYS, TENANT_VALUES, max_size=10),
       labels=st.dictionaries(TENANT_KEYS, TENANT_VALUES, max_size=4))
def test_random_pod_annotations_never_change_the_identity_a_runtimes_own_keys_give(runtime, kind, forged, labels):
    """Whatever a tenant puts on its pod: the runtime's own identity, or refused exactly when the pod carries the
    other runtime's mark."""
    foreign = MARKS[1] if runtime == "containerd" else MARKS[0]
    annotations = spec(runtime, kind, forged, pod_labels=labels)
    if foreign in annotations:
        with pytest.raises(HookInputError, match="carries both"):
            identity(annotations)
    else:
        assert identity(annotations) == (OWN_CONTAINER if kind == CONTAINER else OWN_SANDBOX)


def test_one_runtimes_mark_alone_reads_that_runtimes_keys_only():
    """A spec with containerd's mark takes nothing from CRI-O's keys and the other way round: a key of the other set
    never fills a gap in the runtime's own (no UID of its own: passed, not another pod's)."""
    containerd_without_uid = {key: value for key, value in CONTAINERD.items() if key != "io.kubernetes.cri.sandbox-uid"}
    assert identity(dict(containerd_without_uid, **{"io.kubernetes.pod.uid": VICTIM})) is None
    crio_without_uid = {key: value for key, value in CRIO.items() if key != "io.kubernetes.pod.uid"}
    assert identity(dict(crio_without_uid, **{"io.kubernetes.cri.sandbox-uid": VICTIM})) is None
