"""The modules through ansible-playbook on localhost, against the real containerd (CRI over gRPC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modules.yml")


def collections_path():
    """KUBECPU_COLLECTIONS_PATH (the test script installs the built tarball there), else the checkout."""
    if os.environ.get("KUBECPU_COLLECTIONS_PATH"):
        return os.environ["KUBECPU_COLLECTIONS_PATH"]
    parts = ROOT.split(os.sep)
    if parts[-3:-2] == ["ansible_collections"]:
        return os.sep.join(parts[:-3])
    return os.path.join(ROOT, ".cache", "collections")


def playbook(extra, *args, path=PLAYBOOK):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_STDOUT_CALLBACK="default")
    bindir = os.path.dirname(sys.executable)
    argv = [os.path.join(bindir, "ansible-playbook"), "-i", "localhost,", "-c", "local", path,
            "-e", json.dumps(extra), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_modules_pin_report_release_and_are_idempotent(lab, tmp_path):
    pod = lab.run_pod("ansible", "Guaranteed", [{"name": "main", "cpu": 1000}, {"name": "side", "cpu": 250}])
    other = lab.run_pod("plain", "Burstable", [{"name": "app", "cpu": 100}])
    try:
        extra = {"endpoint": lab.endpoint, "state_path": str(tmp_path / "state"), "pod_uid": pod["uid"],
                 "main_id": pod["containers"]["main"], "kubelet_state": str(tmp_path / "kubelet"),
                 "ncpus": os.cpu_count()}
        proc = playbook(extra)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stdout
        # what the kernel applies after the playbook (it ends with main pinned again)
        assert lab.cgroup_cpus(pod, pod["containers"]["main"]) == "1" == lab.allowed_cpus(pod["containers"]["main"])
        assert lab.cgroup_cpus(pod, pod["containers"]["side"]) == "0"
        assert lab.cgroup_cpus(other, other["containers"]["app"]) == "0"
        recap = [line for line in proc.stdout.splitlines() if line.startswith("localhost")][-1]
        assert "failed=0" in recap
    finally:
        lab.remove_pod(pod)
        lab.remove_pod(other)
