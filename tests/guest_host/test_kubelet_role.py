"""The kubelet role on a real server: a stand-in kubelet (it validates its checkpoint as the kubelet does and
crash-loops on one it would reject) with two pinned containers; a reservation change that collides with one of them,
rewritten without a drain through the rollout playbook, the moved container's cpuset changed live, the kubelet
healthy."""

from __future__ import annotations

import json

from roles_support import (LAB, REMOTE, ROLLOUT, cpus, lab, playbook, settle,
                           state_entries)


STANDIN = "%s/extensions/molecule/podman/files" % REMOTE


def test_the_kubelet_role_rewrites_the_checkpoint_of_pinned_pods_without_a_drain(guest, lab16, tmp_path):
    """A kubelet (stand-in: it restores its checkpoint as the kubelet does) with policy static, reserved CPU 0 and two
    pinned containers; the new reservation 0-1 collides with the one on CPU 1: the role rewrites the checkpoint (that
    container moved, the other kept), pushes the move live and restarts the kubelet, which starts; no drain."""
    for step in (["mkdir", "-p", "/opt/kubelet-standin", "/var/lib/kubelet", "/etc/kubelet-standin"],
                 ["cp", "-r", "%s/plugins/module_utils" % REMOTE, "/opt/kubelet-standin/kubecpu_core"],
                 ["cp", "%s/kubelet-standin.py" % STANDIN, "/usr/local/lib/kubelet-standin.py"],
                 ["cp", "%s/kubelet.service" % STANDIN, "/etc/systemd/system/kubelet.service"]):
        guest.ssh(step)
    guest.ssh(["sh", "-c", "printf '#!/bin/sh\\nexec /usr/bin/python3 /usr/local/lib/kubelet-standin.py \"$@\"\\n' "
               "> /usr/local/bin/kubelet && chmod 755 /usr/local/bin/kubelet"])
    one = lab(guest, "pod", lab16, "one", "Guaranteed", "1000")
    two = lab(guest, "pod", lab16, "two", "Guaranteed", "2000")
    pinned = guest.ssh(["python3", "%s/bin/kubecpu" % REMOTE, "reconcile", "--runtime", "cri", "--runtime-endpoint",
                        "unix://%s/containerd.sock" % LAB, "--state", "/var/lib/kubelet/kubecpu-made-state",
                        "--reserved-cpus", "0", "--runtime-timeout", "30", "--kubelet-state", "/nonexistent",
                        "--force"], timeout=900)
    assert json.loads(pinned.stdout)["errors"] == []
    guest.ssh(["cp", "/var/lib/kubelet/kubecpu-made-state", "/var/lib/kubelet/cpu_manager_state"])
    before = state_entries(guest, "/var/lib/kubelet/cpu_manager_state")
    assert {one["uid"], two["uid"]} <= set(before)
    config = ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
              "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
    guest.ssh(["sh", "-c", "cat > /var/lib/kubelet/config.yaml"], stdin=config)
    guest.ssh(["systemctl", "daemon-reload"])
    guest.ssh(["systemctl", "start", "kubelet.service"])
    kubelet_vars = {"kubecpu_manager": "kubelet", "kubelet_cpu_manager_policy": "static",
                    "kubelet_cpu_manager_reserved_cpus": "0-1", "kubelet_cpu_manager_runtime": "cri",
                    "kubelet_cpu_manager_runtime_endpoint": "unix://%s/containerd.sock" % LAB,
                    "kubelet_cpu_manager_runtime_timeout": 30,  # a guest vCPU is 25-30x slower
                    "kubelet_cpu_manager_health_timeout": 300, "kubelet_cpu_manager_health_settle": 10,
                    "kubecpu_serial": [1, "100%"]}
    done = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes", extra=kubelet_vars)
    assert "drain" not in [line.strip() for line in done.stdout.splitlines() if "TASK [" in line and "Drain" in line]
    after = state_entries(guest, "/var/lib/kubelet/cpu_manager_state")
    moved = [uid for uid in (one["uid"], two["uid"]) if after[uid] != before[uid]]
    assert len(moved) >= 1 and all(not cpus(entry["c0"]) & {0, 1} for entry in after.values())
    for pod in (one, two):
        settle(guest, lab16, pod["containers"]["c0"], cpus(after[pod["uid"]]["c0"]))
    assert guest.ssh(["systemctl", "is-active", "kubelet.service"]).stdout.strip() == "active"
    health = guest.ssh(["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                        "'http://127.0.0.1:10248/healthz').read().decode())"]).stdout.strip()
    assert health == "ok"
