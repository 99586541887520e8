"""Kubelet cgroup paths: systemd slices to cgroupfs paths, the QoS class from a pod's cgroup parent (RUNTIME.md 3)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroup_paths import (cgroupfs_path,
                                                                                               expand_systemd_slice,
                                                                                               parent_path,
                                                                                               qos_from_cgroup)


@pytest.mark.parametrize("name, path", [
    ("kubepods.slice", "kubepods.slice"),
    ("kubepods-besteffort-pod1.slice", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"),
    ("-.slice", "-.slice"), ("docker-1.scope", "docker-1.scope"),
])
def test_slices_expand_to_their_parents(name, path):
    assert expand_systemd_slice(name) == path


@pytest.mark.parametrize("spec, path", [
    ("/kubepods/pod1/abc", "/kubepods/pod1/abc"),
    ("kubepods-burstable-pod1_2.slice:cri-containerd:abc",
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope"),
    ("kubepods-pod9.slice:crio:abc", "/kubepods.slice/kubepods-pod9.slice/crio-abc.scope"),
])
def test_systemd_cgroup_paths_are_expanded(spec, path):
    assert cgroupfs_path(spec) == path


@pytest.mark.parametrize("path, qos", [
    ("/kubepods/pod1", "Guaranteed"), ("/kubepods/burstable/pod1", "Burstable"),
    ("/kubepods/besteffort/pod1", "BestEffort"), ("/kubepods.slice/kubepods-pod1.slice", "Guaranteed"),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", "Burstable"),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice", "BestEffort"),
    ("/system.slice/docker-1.scope", ""), ("/", ""), ("/kubepods", ""),
])
def test_qos_class_from_the_pod_cgroup(path, qos):
    assert qos_from_cgroup(path) == qos


@pytest.mark.parametrize("parent, path", [
    ("/kubepods/burstable/pod1", "/kubepods/burstable/pod1"),
    ("kubepods-burstable-pod1.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"),
    ("kubepods-pod1.slice:cri-containerd:abc", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"),
    ("", ""),
])
def test_a_pods_cgroup_parent_in_cgroupfs_form(parent, path):
    assert parent_path(parent) == path
