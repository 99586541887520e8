"""CRI documents to the container model: the real verbose statuses crictl 1.32 printed (shared/crictl-samples),
the systemd driver's and CRI-O's shapes, and every field of the wrong shape refused with its name."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RuntimeOutputError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cri_decode import (as_int, container_info,
                                                                                             listed_container,
                                                                                             parse_info_json,
                                                                                             sandbox_cgroup_parent)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import SHARED

SAMPLES = os.path.join(SHARED, "crictl-samples")


def sample(name):
    with open(os.path.join(SAMPLES, name), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_real_guaranteed_status():
    doc = sample("inspect-running-guaranteed.stdout.json")
    info = container_info(doc["status"], doc["info"])
    assert info.qos == "Guaranteed" and info.requested_milli() == 2000 and info.cgroup_path.startswith("/kubepods/pod")
    assert info.id == doc["status"]["id"] and info.name == "main" and info.cpu_period == 100000


def test_the_systemd_driver_and_a_status_without_an_oci_spec():
    status = {"id": "abc", "labels": {"io.kubernetes.pod.uid": "u", "io.kubernetes.container.name": "app"},
              "metadata": {"name": "app", "attempt": 2},
              "resources": {"linux": {"cpuShares": "512", "cpuQuota": "0", "cpuPeriod": "100000"}}}
    spec = {"runtimeSpec": {"linux": {"cgroupsPath": "kubepods-burstable-podu.slice:cri-containerd:abc"}}}
    info = container_info(status, spec)
    assert info.cgroup_path == ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice/"
                                "cri-containerd-abc.scope")
    assert info.qos == "Burstable" and info.requested_milli() == 500 and info.attempt == 2
    bare = container_info(status, {}, pid_cgroup="/kubepods/besteffort/podu/crio-abc")
    assert bare.qos == "BestEffort" and bare.cgroup_path == "/kubepods/besteffort/podu/crio-abc"
    assert container_info(status, {}).qos == ""  # unknown: describe asks the sandbox


@pytest.mark.parametrize("spec, error", [
    ({"runtimeSpec": {"linux": {"cgroupsPath": "/kubepods/../../../etc/abc/"}}}, None),  # runc made /etc/abc
    ({"runtimeSpec": {"linux": {"cgroupsPath": "/kubepods/podu/a\x00bc"}}}, "holds a NUL byte"),
])
def test_a_runtimes_cgroup_path_is_the_cleaned_one_and_a_nul_byte_the_containers_error(spec, error):
    status = {"id": "abc", "labels": {"io.kubernetes.pod.uid": "u", "io.kubernetes.container.name": "app"}}
    if error is None:
        assert container_info(status, spec).cgroup_path == "/etc/abc"
    else:
        with pytest.raises(RuntimeOutputError, match=error):
            container_info(status, spec)


def test_the_create_time_config_wins_over_the_status_resources():
    status = {"id": "abc", "resources": {"linux": {"cpuShares": "2", "cpuQuota": "-1"}}}
    info = {"config": {"linux": {"resources": {"cpu_shares": 2048, "cpu_quota": 200000, "cpu_period": 100000}}}}
    decoded = container_info(status, info)
    assert (decoded.cpu_shares, decoded.cpu_quota, decoded.cpu_period) == (2048, 200000, 100000)


@pytest.mark.parametrize("doc, text", [
    ({"id": "a b"}, "invalid container ID"),
    ({"id": "abc", "labels": []}, "container abc labels: expected an object, got list"),
    ({"id": "abc", "metadata": {"attempt": "x"}}, "attempt: expected a number, got 'x'"),
    ({"id": "abc", "metadata": {"attempt": True}}, "attempt: expected a number, got True"),
    ({"id": "abc", "labels": {"io.kubernetes.pod.uid": 7}}, "pod uid label: expected a string, got 7"),
    ([], "container: expected an object, got list"),
])
def test_wrong_shapes_are_refused_by_name(doc, text):
    with pytest.raises(RuntimeOutputError, match=text.replace("(", r"\(").replace(")", r"\)")):
        listed_container(doc, "CONTAINER_RUNNING", 0)


def test_list_rows_take_the_kubelet_labels_first():
    row = listed_container({"id": "abc", "podSandboxId": "sb", "metadata": {"name": "meta", "attempt": "3"},
                            "labels": {"io.kubernetes.container.name": "app", "io.kubernetes.pod.name": "web",
                                       "io.kubernetes.pod.namespace": "prod", "io.kubernetes.pod.uid": "u"}},
                           "CONTAINER_EXITED", 5)
    want = ("app", "prod/web", 3, "CONTAINER_EXITED", True)
    assert (row.name, row.pod_ref, row.attempt, row.state, row.is_kubernetes) == want


@pytest.mark.parametrize("info, parent", [
    ({"config": {"linux": {"cgroup_parent": "/kubepods/burstable/podu"}}}, "/kubepods/burstable/podu"),
    ({"config": {"linux": {"cgroup_parent": "kubepods-podu.slice:cri-containerd:sb"}}},
     "/kubepods.slice/kubepods-podu.slice/cri-containerd-sb.scope"),
    ({"runtimeSpec": {"linux": {"cgroupsPath": "/kubepods/podu/sb"}}}, "/kubepods/podu"),
    ({}, ""),
])
def test_the_sandbox_cgroup_parent(info, parent):
    assert sandbox_cgroup_parent(info, "pod sandbox sb") == parent


def test_verbose_info_is_json_text():
    assert parse_info_json({"info": '{"pid": 7}'}, "c") == {"pid": 7}
    assert parse_info_json({}, "c") == {}
    with pytest.raises(RuntimeOutputError, match="c: the runtime's verbose info is not JSON"):
        parse_info_json({"info": "{"}, "c")
    assert as_int("", "x") == 0 and as_int("12", "x") == 12
