"""NRI's pods and containers as the container model: QoS from the container's cgroup (cgroupfs or systemd driver)
or the pod's parent, the request from its CPU resources, the restart count from the kubelet's annotation, and the
subscription mask."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import (container_model, event_mask,
                                                                                          schema)

PB = schema()


def nri(cgroups_path="", parent="", shares=2048, quota=200000, period=100000, state=3, annotations=None):
    pod = PB.PodSandbox(id="sb", name="web", uid="u-1", namespace="prod")
    pod.linux.cgroup_parent = parent
    container = PB.Container(id="c1", pod_sandbox_id="sb", name="main", state=state, annotations=annotations or {})
    container.linux.cgroups_path = cgroups_path
    cpu = container.linux.resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value = shares, quota, period
    return pod, container


@pytest.mark.parametrize("path, parent, qos, cgroup", [
    ("/kubepods/podu-1/c1", "", "Guaranteed", "/kubepods/podu-1/c1"),
    ("kubepods-burstable-podu_1.slice:cri-containerd:c1", "", "Burstable",
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice/cri-containerd-c1.scope"),
    ("", "/kubepods/besteffort/podu-1", "BestEffort", ""),
    ("", "kubepods-podu_1.slice", "Guaranteed", ""),
])
def test_qos_and_cgroup(path, parent, qos, cgroup):
    listed, info = container_model(*nri(path, parent), 5)
    want = (qos, cgroup, "prod/web", "main", 5)
    assert (info.qos, info.cgroup_path, listed.pod_ref, listed.name, listed.created_at) == want


def test_request_state_attempt_and_a_resize():
    pod, container = nri("/kubepods/podu-1/c1", state=1, annotations={"io.kubernetes.container.restartCount": "2"})
    listed, info = container_model(pod, container, 1)
    assert info.requested_milli() == 2000 and listed.state == "CONTAINER_RUNNING" and listed.attempt == 2
    resized = PB.LinuxResources()
    resized.cpu.shares.value, resized.cpu.quota.value, resized.cpu.period.value = 3072, 300000, 100000
    assert container_model(pod, container, 1, resources=resized)[1].requested_milli() == 3000
    stopped = container_model(*nri("/kubepods/podu-1/c1", state=4), 1, finished_at=9)
    assert stopped[0].state == "CONTAINER_EXITED" and stopped[1].finished_at == 9


def test_the_subscription_mask_is_a_bit_per_event_below_its_number():
    assert event_mask() == 0 and event_mask(1) == 1 and event_mask(4, 11) == 0b10000001000


def test_the_pods_annotations_come_with_every_container_kubecpus_only():
    pod, container = nri("/kubepods/burstable/podu-1/c1")
    pod.annotations.update({"cpu-burst.kubecpu.io": "20ms", "kubernetes.io/config.source": "api"})
    assert container_model(pod, container, 1)[1].annotations == {"cpu-burst.kubecpu.io": "20ms"}
