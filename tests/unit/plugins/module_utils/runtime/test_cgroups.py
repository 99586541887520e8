"""What the kernel applies, read from cgroupfs: cgroup v1 (one hierarchy per controller, cpu as cpu,cpuacct) and v2
(unified), each with the cgroupfs and the systemd driver's paths (RUNTIME.md section 3), on fake trees laid out as
real nodes lay them out."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroup_paths import cgroupfs_path
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS

UID = "5f1c2d3e-4a01-4c53-9a0e-0b9e6a7c5d1f"
CID = "7d3b2c1a" * 8
DRIVERS = {  # the container's cgroup as the runtime's spec names it, per kubelet cgroup driver
    "cgroupfs": "/kubepods/burstable/pod%s/%s" % (UID, CID),
    "systemd": "kubepods-burstable-pod%s.slice:cri-containerd:%s" % (UID.replace("-", "_"), CID),
}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def tree(root, version, container, cpus="1-2", mems="0", quota=-1, throttled=0):
    """A node's cgroup mount with one container: v1 per controller (cpu and cpuacct joined), v2 unified."""
    pod = container.rsplit("/", 1)[0]
    if version == 2:
        write(os.path.join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
        base = os.path.join(root, container.lstrip("/"))
        write(os.path.join(base, "cpuset.cpus"), "")  # empty: inherit; the effective set is what applies
        write(os.path.join(base, "cpuset.cpus.effective"), cpus + "\n")
        write(os.path.join(base, "cpuset.mems.effective"), mems + "\n")
        write(os.path.join(base, "cpu.max"), "%s 100000\n" % ("max" if quota < 0 else quota))
        write(os.path.join(root, pod.lstrip("/"), "cpu.max"), "max 100000\n")
        write(os.path.join(base, "cpu.stat"), "usage_usec 100\nnr_periods 10\nnr_throttled 2\nthrottled_usec %d\n"
              % throttled)
        return base
    os.makedirs(os.path.join(root, "cpu,cpuacct"), exist_ok=True)
    os.symlink("cpu,cpuacct", os.path.join(root, "cpu"))  # as on a real v1 node
    cpuset = os.path.join(root, "cpuset", container.lstrip("/"))
    cpu = os.path.join(root, "cpu,cpuacct", container.lstrip("/"))
    write(os.path.join(cpuset, "cpuset.cpus"), cpus + "\n")
    write(os.path.join(cpuset, "cpuset.mems"), mems + "\n")
    write(os.path.join(cpu, "cpu.cfs_quota_us"), "%d\n" % quota)
    write(os.path.join(cpu, "cpu.cfs_period_us"), "100000\n")
    write(os.path.join(root, "cpu,cpuacct", pod.lstrip("/"), "cpu.cfs_quota_us"), "-1\n")
    write(os.path.join(root, "cpu,cpuacct", pod.lstrip("/"), "cpu.cfs_period_us"), "100000\n")
    write(os.path.join(cpu, "cpu.stat"), "nr_periods 10\nnr_throttled 2\nthrottled_time %d\n" % (throttled * 1000))
    return cpuset


@pytest.fixture(params=[(v, d) for v in (1, 2) for d in DRIVERS], ids=lambda p: "v%d-%s" % p)
def node(request, tmp_path):
    version, driver = request.param
    root = str(tmp_path / "sys-fs-cgroup")
    os.makedirs(root)
    container = cgroupfs_path(DRIVERS[driver])
    tree(root, version, container, quota=50000, throttled=1500)
    return CgroupFS(root), container, version


def test_the_layout_is_recognised(node):
    fs, _container, version = node
    assert fs.v2 is (version == 2)


def test_cpus_mems_quota_and_throttling(node):
    fs, container, _version = node
    assert fs.cpus(container) == CPUSet.parse("1-2") and fs.mems(container) == CPUSet.parse("0")
    assert fs.quota(container) == (50000, 100000)
    assert fs.cpu_stat(container) == dict(fs.cpu_stat(container), nr_periods=10, nr_throttled=2, throttled_usec=1500)


def test_the_pod_quota_is_written_where_the_kubelet_keeps_it(node):
    fs, container, version = node
    pod = container.rsplit("/", 1)[0]
    assert fs.quota(pod) == (-1, 100000)
    fs.set_quota(pod, 250000, 100000)
    assert fs.quota(pod) == (250000, 100000)
    fs.set_quota(pod, -1, 100000)
    assert fs.quota(pod) == (-1, 100000)
    name = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    with open(os.path.join(fs.directory("cpu", pod), name), encoding="utf-8") as handle:
        assert handle.read() == ("max 100000" if version == 2 else "-1")


def test_a_systemd_container_path_is_the_expanded_slice_chain():
    assert cgroupfs_path(DRIVERS["systemd"]) == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope"
        % (UID.replace("-", "_"), CID))


@pytest.mark.parametrize("version", [1, 2])
def test_what_cannot_be_read_is_none_and_a_failed_write_names_the_file(tmp_path, version):
    root = str(tmp_path / "cg")
    os.makedirs(root)
    container = tree(root, version, "/kubepods/pod1/abc", cpus="not-a-set")
    fs = CgroupFS(root)
    assert fs.cpus("/kubepods/pod1/abc") is None and fs.cpus("/kubepods/pod1/gone") is None and fs.cpus("") is None
    assert fs.quota("/kubepods/pod1/gone") is None and fs.cpu_stat("/kubepods/pod1/gone") == {}
    with pytest.raises(StoreError, match=r"cannot write 1000( 100000)? to .*/gone/cpu.(max|cfs_quota_us): No such file"):
        fs.set_quota("/kubepods/pod1/gone", 1000, 100000)
    assert os.path.isdir(container)


def test_the_hook_writes_a_cpuset_and_reads_back_what_was_written(node):
    """``set_cpus`` writes ``cpuset.cpus``; ``cpus(configured=True)`` reads it back (v2: empty until written, the
    effective set is the kernel's answer)."""
    fs, container, version = node
    assert fs.cpus(container, configured=True) == (CPUSet() if version == 2 else CPUSet.parse("1-2"))
    fs.set_cpus(container, CPUSet.parse("3,7"))
    assert fs.cpus(container, configured=True) == CPUSet.parse("3,7")


def test_the_container_cgroups_below_kubepods_are_the_children_of_pod_cgroups(node):
    """Containers and sandboxes, for both drivers and any runtime's names, however deep their own cgroups go; an empty
    QoS or pod cgroup is not one, nor what lies outside the kubelet's top cgroup."""
    fs, container, _version = node
    top = fs.directory("cpuset", "/")
    os.makedirs(os.path.join(top, "kubepods", "besteffort"), exist_ok=True)  # no pods in it
    os.makedirs(os.path.join(top, "kubepods", "pod0c3d4e5f-0000-4000-8000-000000000001"), exist_ok=True)  # a pod without containers yet
    os.makedirs(os.path.join(top, "system.slice", "containerd.service"), exist_ok=True)  # not the kubelet's
    nested = "/kubepods/burstable/pod2/" + "b" * 64
    os.makedirs(os.path.join(top, nested.lstrip("/"), "init.scope"))  # systemd in a container
    found = list(fs.container_cgroups("/kubepods")) + list(fs.container_cgroups("/kubepods.slice"))  # both drivers
    assert sorted(found) == sorted([container, nested])
    scope = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod3.slice/crio-%s.scope" % ("c" * 64)
    conmon = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod3.slice/crio-conmon-%s.scope" % ("c" * 64)
    for path in (scope, conmon):
        os.makedirs(os.path.join(top, path.lstrip("/")))
    assert sorted(fs.container_cgroups("/kubelet.slice/kubelet-kubepods.slice")) == sorted([conmon, scope])
    assert list(fs.container_cgroups("/no-such-root")) == []


def test_a_container_with_cgroups_of_its_own_moves_with_them(node):
    """v1: a child's cpuset must stay within its parent's, so the children that would stop the write go first; v2:
    only the container's own cgroup is written (the kernel narrows its children's effective sets)."""
    fs, container, version = node
    top = fs.directory("cpuset", "/")
    for child, cpus in (("init.scope", "1-2"), ("system.slice", "1"), ("system.slice/docker.service", "1")):
        os.makedirs(os.path.join(top, container.lstrip("/"), child))
        with open(os.path.join(top, container.lstrip("/"), child, "cpuset.cpus"), "w", encoding="utf-8") as handle:
            handle.write(cpus + "\n")
    fs.move_cpus(container, CPUSet.parse("2"))
    assert fs.cpus(container, configured=True) == CPUSet.parse("2")
    children = {child: str(fs.cpus(container + "/" + child, configured=True))
                for child in ("init.scope", "system.slice", "system.slice/docker.service")}
    assert children == ({"init.scope": "1-2", "system.slice": "1", "system.slice/docker.service": "1"} if version == 2
                        else {"init.scope": "2", "system.slice": "2", "system.slice/docker.service": "2"})
