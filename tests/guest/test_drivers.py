"""The cgroup driver each lab asked for, on the real server (cgroup v2): containerd 2.1.9 with the systemd and the
cgroupfs driver, 1.7.24 with cgroupfs. In the guest stage's roles group, beside tests/guest/test_housekeeping.py
(the node group is the longer one)."""

from __future__ import annotations

import os

import pytest
from conftest import guaranteed, kubecpu, settle


@pytest.mark.parametrize("lab_name", ["lab21", "lab17", "lab21_cgroupfs"])
def test_the_cgroup_driver_is_the_one_asked_for(request, lab_name, tmp_path):
    """systemd: pods under kubepods.slice (kubepods-pod<uid>.slice, the container a scope); cgroupfs: /kubepods. One
    reconcile pass over CRI pins the Guaranteed container there (containerd 2.1.9 with cgroupfs: only here)."""
    lab = request.getfixturevalue(lab_name)
    pod = lab.run_pod("where", "Guaranteed", guaranteed(1))
    try:
        path = lab.cri.inspect(pod["containers"]["app"]).cgroup_path
        if lab.driver == "systemd":
            assert path.startswith("/kubepods.slice/kubepods-pod") and path.endswith(".scope")
        else:
            assert path.startswith("/kubepods/pod")
        assert os.path.isdir("/sys/fs/cgroup" + path)
        state = str(tmp_path / "state")
        kubecpu("reconcile", "--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state", state,
                "--kubelet-state", state + ".kubelet", "--reserved-cpus", "0", "--runtime-timeout", "30")
        settle(lab, pod, {1})  # the first free CPU after the reserved 0
    finally:
        lab.remove_pod(pod)
