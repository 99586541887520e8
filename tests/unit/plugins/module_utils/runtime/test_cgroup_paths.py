"""Kubelet cgroup paths: systemd slices to cgroupfs paths, the QoS class from a pod's cgroup parent (RUNTIME.md 3)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RuntimeOutputError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroup_paths import (cgroupfs_path,
                                                                                               expand_systemd_slice,
                                                                                               is_pod_cgroup,
                                                                                               kubepods_root,
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


@pytest.mark.parametrize("spec, path", [  # runc's utils.CleanPath: what it creates is what kubecpu reads and writes
    ("kubepods/pod1/abc", "/kubepods/pod1/abc"),
    ("/kubepods/pod1/abc/", "/kubepods/pod1/abc"),
    ("//kubepods//pod1/./abc", "/kubepods/pod1/abc"),
    ("/kubepods/../../../etc", "/etc"),
    ("../../..", "/"),
    ("kubepods-pod1.slice:cri-containerd:../../x", "/kubepods.slice/kubepods-pod1.slice/x.scope"),
])
def test_a_cgroup_path_is_cleaned_as_runc_cleans_it_and_never_leaves_the_root(spec, path):
    assert cgroupfs_path(spec) == path


@pytest.mark.parametrize("spec", ["/kubepods/pod1/\x00abc", "kubepods-pod1.slice:crio:a\x00b"])
def test_a_cgroup_path_with_a_nul_byte_is_the_runtimes_error(spec):
    with pytest.raises(RuntimeOutputError, match="holds a NUL byte"):
        cgroupfs_path(spec)


@pytest.mark.parametrize("path, qos", [
    ("/kubepods/pod1", "Guaranteed"), ("/kubepods/burstable/pod1", "Burstable"),
    ("/kubepods/besteffort/pod1", "BestEffort"), ("/kubepods.slice/kubepods-pod1.slice", "Guaranteed"),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", "Burstable"),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice", "BestEffort"),
    ("/system.slice/docker-1.scope", ""), ("/", ""), ("/kubepods", ""),
    # below a kubelet cgroupRoot other than / (cgroupfs: /kubelet; systemd: /kubelet.slice)
    ("/kubelet/kubepods/burstable/pod1", "Burstable"), ("/kubelet/kubepods/pod1", "Guaranteed"),
    ("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1.slice",
     "BestEffort"),
    ("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod1.slice", "Guaranteed"),
])
def test_qos_class_from_the_pod_cgroup(path, qos):
    assert qos_from_cgroup(path) == qos


@pytest.mark.parametrize("path, root", [
    ("/kubepods/burstable/pod1/abc", "/kubepods"), ("/kubelet/kubepods/pod1/abc", "/kubelet/kubepods"),
    ("/kubepods.slice/kubepods-pod1.slice/crio-abc.scope", "/kubepods.slice"),
    ("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod1.slice/crio-abc.scope",
     "/kubelet.slice/kubelet-kubepods.slice"),
    ("/system.slice/containerd.service", ""), ("/kubepodsx/pod1/abc", ""),
])
def test_the_kubelets_top_cgroup_below_any_cgroup_root(path, root):
    assert kubepods_root(path) == root


@pytest.mark.parametrize("name, pod", [
    ("pod0c3d4e5f-0000-4000-8000-000000000001", True), ("kubepods-pod0c3d4e5f_0000.slice", True),
    ("kubepods-burstable-pod1.slice", True), ("kubelet-kubepods-besteffort-pod1.slice", True),
    ("kubelet-kubepods-pod1.slice", True),
    ("pod", False), ("pods", False), ("burstable", False), ("kubepods-burstable.slice", False),
    ("system-pod1.slice", False), ("kubepods-podx.slice", False), ("crio-abc.scope", False),
])
def test_pod_cgroup_names(name, pod):
    assert is_pod_cgroup(name) is pod


@pytest.mark.parametrize("parent, path", [
    ("/kubepods/burstable/pod1", "/kubepods/burstable/pod1"),
    ("kubepods-burstable-pod1.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"),
    ("kubepods-pod1.slice:cri-containerd:abc", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"),
    ("", ""),
])
def test_a_pods_cgroup_parent_in_cgroupfs_form(parent, path):
    assert parent_path(parent) == path
