"""inotify on the kubelet's cgroup levels: a container directory coming or going under a pod is seen, new QoS and pod
directories are watched as they appear, other files are not events; cgroup v1 (cpuset hierarchy) and v2 roots,
cgroupfs and systemd names."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.watch import CgroupWatch, open_watch


@pytest.fixture(params=["v1", "v2"])
def root(request, tmp_path):
    base = tmp_path / "cgroup"
    if request.param == "v2":
        base.mkdir()
        (base / "cgroup.controllers").write_text("cpuset cpu\n")
        return base, base
    (base / "cpuset").mkdir(parents=True)
    return base, base / "cpuset"


@pytest.mark.parametrize("kubepods, qos, pod, container", [
    ("kubepods", "burstable", "pod1", "abc"),
    ("kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod1.slice", "cri-containerd-abc.scope"),
])
def test_container_directories_coming_and_going(root, kubepods, qos, pod, container):
    base, hierarchy = root
    (hierarchy / kubepods).mkdir()
    watch = CgroupWatch(CgroupFS(str(base)))
    try:
        assert not watch.changed()
        (hierarchy / kubepods / qos).mkdir()
        assert watch.changed()  # a new QoS level: watched from now on
        (hierarchy / kubepods / qos / pod).mkdir()
        assert watch.changed()
        (hierarchy / kubepods / qos / pod / "cpu.max").write_text("max")  # a file is no container
        assert not watch.changed()
        (hierarchy / kubepods / qos / pod / container).mkdir()
        assert watch.changed()
        os.rmdir(hierarchy / kubepods / qos / pod / container)
        assert watch.changed()
        assert len(watch.watches) == 4  # the hierarchy, kubepods, the QoS level, the pod
    finally:
        watch.close()


def test_existing_levels_are_watched_from_the_start(root):
    base, hierarchy = root
    (hierarchy / "kubepods" / "pod9").mkdir(parents=True)
    watch = CgroupWatch(CgroupFS(str(base)))
    try:
        (hierarchy / "kubepods" / "pod9" / "abc").mkdir()
        assert watch.changed()
    finally:
        watch.close()


def test_kubepods_made_after_the_agent_and_other_trees_ignored(root):
    base, hierarchy = root
    watch, why = open_watch(CgroupFS(str(base)))
    assert watch is not None and why == ""
    try:
        (hierarchy / "system.slice").mkdir()
        assert not watch.changed()
        (hierarchy / "kubepods").mkdir()
        assert watch.changed()
        (hierarchy / "kubepods" / "pod1").mkdir()
        assert watch.changed()
    finally:
        watch.close()
