"""The kubelet role on a real server: a stand-in kubelet (it validates its checkpoint as the kubelet does and
crash-loops on one it would reject) with two pinned containers; a reservation change that collides with one of them,
rewritten without a drain through the rollout playbook, the moved container's cpuset changed live, the kubelet
healthy, the system daemons confined to the reserved CPUs by the same rollout (after the same rollout with its
configuration write failing, rolled back); then the agent role's housekeeper beside that kubelet, and housekeeping
off. Four rollouts in all: each costs a minute or more under emulation."""

from __future__ import annotations

import json
import time

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import waits
from roles_support import (AGENT_VARS, ALL, LAB, REMOTE, ROLLOUT, cpus, lab, playbook, settle,
                           state_entries)


STANDIN = "%s/extensions/molecule/podman/files" % REMOTE
KUBELET_VARS = {"kubecpu_manager": "kubelet", "kubelet_cpu_manager_policy": "static",
                "kubelet_cpu_manager_reserved_cpus": "0-1", "kubelet_cpu_manager_runtime": "cri",
                "kubelet_cpu_manager_runtime_endpoint": "unix://%s/containerd.sock" % LAB,
                "kubelet_cpu_manager_runtime_timeout": 30,  # a guest vCPU is 25-30x slower
                "kubelet_cpu_manager_health_timeout": 300, "kubelet_cpu_manager_health_settle": 10,
                "kubecpu_serial": [1, "100%"]}
DROPIN = "50-kubecpu-housekeeping.conf"
# Each interrupt's affinity, and the kubelet's exclusive CPUs (its checkpoint), as the guest shows them
BEFORE = {}  # what the first test saw before any rollout: the daemons' CPUs, for the second
IRQS = ("import json, os; print(json.dumps({n: open('/proc/irq/%s/smp_affinity_list' % n).read().strip() "
        "for n in os.listdir('/proc/irq') if n.isdigit()}))")


def test_the_kubelet_role_rewrites_the_checkpoint_without_a_drain_and_confines_the_daemons(guest, lab16, tmp_path):
    """A kubelet (stand-in: it restores its checkpoint as the kubelet does) with policy static, reserved CPU 0 and two
    pinned containers; the new reservation 0-1 collides with the one on CPU 1: one rollout rewrites the checkpoint
    (that container moved, the other kept), pushes the move live, restarts the kubelet, which starts (no drain), and
    confines the system daemons to the reserved CPUs (kubelet_cpu_manager_housekeeping; its check mode is
    tests/integration/test_playbooks.py's) while the pods keep every CPU."""
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
    daemons_before = daemons(guest)
    print("daemons before: %s" % (daemons_before,))
    BEFORE["daemons"] = daemons_before  # for the test that turns it off

    # The same rollout with its configuration write failing (the file made immutable) after the checkpoint was
    # rewritten and the move pushed live to a real container: the previous checkpoint and configuration are there
    # again, byte for byte, the container back on its CPUs, the kubelet running, and the rollout fails saying what it
    # put back. (The checkpoint write failing, and a kubelet that does not come back, are failed on the systemd nodes
    # of Molecule: extensions/molecule/podman/side_effect.yml, steps 5 to 6. Each failed rollout costs the guest a
    # few minutes beside the suite.)
    want = ["Operation not permitted", "-- rolled back: the previous checkpoint was put back from",
            "the containers it moved were moved back", "the configuration was not changed"]
    state_before = guest.ssh(["cat", "/var/lib/kubelet/cpu_manager_state"]).stdout
    placed_before = {pod["uid"]: cpus(before[pod["uid"]]["c0"]) for pod in (one, two)}
    guest.ssh(["chattr", "+i", "/var/lib/kubelet/config.yaml"])
    try:
        failed = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes", check=False,
                          extra=dict(KUBELET_VARS, kubelet_cpu_manager_housekeeping=True))
    finally:
        guest.ssh(["chattr", "-i", "/var/lib/kubelet/config.yaml"])
    said = [line for line in failed.stdout.splitlines() if "-- rolled back:" in line]
    print("the failed configuration write: %s" % said[:1])
    assert failed.returncode != 0 and said, failed.stdout[-6000:]
    assert [part for part in want if part not in failed.stdout] == [], failed.stdout[-6000:]
    assert guest.ssh(["cat", "/var/lib/kubelet/cpu_manager_state"]).stdout == state_before
    assert guest.ssh(["cat", "/var/lib/kubelet/config.yaml"]).stdout == config
    for pod in (one, two):
        settle(guest, lab16, pod["containers"]["c0"], placed_before[pod["uid"]])
    waits.until(lambda: guest.ssh(["systemctl", "is-active", "kubelet.service"], check=False).stdout.strip()
                == "active", "the kubelet running on the files put back", 120, step=1)

    done = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes",
                    extra=dict(KUBELET_VARS, kubelet_cpu_manager_housekeeping=True))
    assert "drain" not in [line.strip() for line in done.stdout.splitlines() if "TASK [" in line and "Drain" in line]
    assert "Write the rewritten checkpoint and push the moved containers' cpusets" in done.stdout  # not a restart
    after = state_entries(guest, "/var/lib/kubelet/cpu_manager_state")
    moved = [uid for uid in (one["uid"], two["uid"]) if after[uid] != before[uid]]
    assert len(moved) >= 1 and all(not cpus(entry["c0"]) & {0, 1} for entry in after.values())
    for pod in (one, two):
        settle(guest, lab16, pod["containers"]["c0"], cpus(after[pod["uid"]]["c0"]))
    assert guest.ssh(["systemctl", "is-active", "kubelet.service"]).stdout.strip() == "active"
    health = guest.ssh(["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                        "'http://127.0.0.1:10248/healthz').read().decode())"]).stdout.strip()
    assert health == "ok"
    show, allowed, pods = daemons(guest)
    print("after the role: %s, %s, kubepods.slice %s" % (show, allowed, sorted(pods)))
    assert show == "AllowedCPUs=0-1" and all(cpu_set == {0, 1} for cpu_set in allowed.values())
    assert pods == ALL  # the pods keep every CPU


def daemons(guest):
    """What systemd and the kernel say of the daemons: system.slice's AllowedCPUs, journald's and sshd's allowed CPUs,
    kubepods.slice's effective cpuset."""
    show = guest.ssh(["systemctl", "show", "-p", "AllowedCPUs", "system.slice"]).stdout.strip()
    allowed = {}
    for unit in ("systemd-journald", "ssh"):
        pid = guest.ssh(["systemctl", "show", "-p", "MainPID", "--value", unit]).stdout.strip()
        status = guest.ssh(["grep", "Cpus_allowed_list", "/proc/%s/status" % pid]).stdout
        allowed[unit] = cpus(status.split(":", 1)[1].strip())
    pods = guest.ssh(["cat", "/sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective"]).stdout.strip()
    return show, allowed, cpus(pods)


def test_housekeeping_beside_the_kubelet_interrupts_then_the_daemons_given_back(guest, lab16, tmp_path):
    """On the kubelet node above (static, reserved 0-1, two pinned pods, the daemons confined): the agent role installs
    the housekeeper, which keeps interrupts off the kubelet's exclusive CPUs, and housekeeping off takes the drop-ins
    out and gives the daemons every CPU back."""
    housekeeper = dict(AGENT_VARS, cpu_manager_irq_isolation="exclusive")
    playbook(guest, tmp_path, ROLLOUT, extra=housekeeper)
    assert "housekeeping --loop" in guest.ssh(["systemctl", "cat", "kubecpu-agent.service"]).stdout
    held = set().union(*(cpus(c) for entry in state_entries(guest, "/var/lib/kubelet/cpu_manager_state").values()
                         for c in entry.values()))
    assert held and not held & {0, 1}
    deadline = time.monotonic() + 240
    while True:
        irqs = {int(n): cpus(c) for n, c in json.loads(guest.ssh(["python3", "-c", IRQS]).stdout).items()}
        record = json.loads(guest.ssh(["cat", "/var/lib/kubecpu/cpu_manager_state.irq.json"], check=False).stdout
                            or '{"refused": []}')
        still = {n: sorted(c) for n, c in irqs.items() if c & held and n not in record["refused"]}
        if not still and record.get("kept_off"):
            break
        assert time.monotonic() < deadline, "interrupts still on the kubelet's CPUs %s: %s" % (sorted(held), still)
        time.sleep(2)
    print("kubelet holds %s; interrupts %s; refused (managed) %s" % (
        sorted(held), {n: sorted(c) for n, c in sorted(irqs.items())}, record["refused"]))
    assert cpus(record["kept_off"]) == held

    off = dict(KUBELET_VARS, kubelet_cpu_manager_housekeeping=False)
    playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes", extra=off)
    assert guest.ssh(["test", "-e", "/etc/systemd/system/system.slice.d/%s" % DROPIN], check=False).returncode == 1
    show, allowed, _pods = daemons(guest)
    print("housekeeping off: %s, %s" % (show, allowed))
    assert (show, allowed) == BEFORE["daemons"][:2]
