"""The cgroup driver each lab asked for, on the real server (cgroup v2): every runtime with the systemd and the cgroupfs
driver (containerd 2.1.9, 1.7.24 and 2.4.2, CRI-O 1.36.3). In the guest stage's roles group; the labs only this
module uses live as long as it runs.

Debian 12's containerd 1.6 (the image's) with the systemd driver is the agent role's, in tests/guest_host."""

from __future__ import annotations

import os

import pytest
from conftest import NRI_BINARIES, containerd_24, crio_lab, guaranteed, kubecpu, make_lab, settle


@pytest.fixture(scope="module")
def lab17_systemd():
    with make_lab("systemd", NRI_BINARIES, nri=True) as lab:
        yield lab


@pytest.fixture(scope="module")
def lab24_cgroupfs():
    with make_lab("cgroupfs", containerd_24()) as lab:
        yield lab


@pytest.fixture(scope="module")
def crio_cgroupfs():
    with crio_lab(systemd=False) as lab:
        yield lab


@pytest.mark.parametrize("lab_name", ["lab21", "lab21_cgroupfs", "lab17_systemd", "lab17", "lab24", "lab24_cgroupfs",
                                      "crio", "crio_cgroupfs"])
def test_the_cgroup_driver_is_the_one_asked_for(request, lab_name, tmp_path):
    """systemd: pods under kubepods.slice (kubepods-pod<uid>.slice, the container a scope); cgroupfs: /kubepods. One
    reconcile pass over CRI pins the Guaranteed container there."""
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
