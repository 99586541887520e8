"""The kubelet role on a real server beside the real kubelet: kubelet 1.37.2 (built from its module, scripts/kubelet.sh)
as a systemd service, standalone (static pods from a manifest directory), on containerd 2.1.9 with the systemd cgroup
driver, the node's own configuration in /var/lib/kubelet/config.yaml, Guaranteed static pods of 1 and 2 CPUs running.
The rollout playbook changes it without a drain, as a fleet is changed:

1. none -> static (reserved CPU 0, reconcile period 5 s, the daemons confined);
2. the reservation 0 -> 0-1, which collides with the 1-CPU pod: that container moved live; then a reservation
   that needs a drain (0-5: the pods no longer fit) reported and not made;
3. the agent role's housekeeper keeps interrupts off the kubelet's exclusive CPUs as its pods come and go; then
   static -> none with housekeeping off gives the daemons and the pods every CPU back.

After each change the kubelet restarts on the checkpoint the role rewrote, and every pod runs the same container on
the CPUs the plan said, read after two of the kubelet's reconcile periods. Five rollouts in all: each costs a minute or
two on an idle guest, four to five in the suite."""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time

import pytest
import yaml

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import waits
from roles_support import AGENT_VARS, ALL, REMOTE, ROLLOUT, ROOT, cpus, lab, playbook

sys.path.insert(0, os.path.join(ROOT, "tests", "guest"))
from kubelet_files import BASE, RELEASES, static_pod  # shared with the tests inside the guest

MINOR = "1.37"
LAB21 = "/run/kubecpu-lab21"  # containerd 2.1.9, systemd driver
ENDPOINT = "unix://%s/containerd.sock" % LAB21
CONFIG = "/var/lib/kubelet/config.yaml"
STATE = "/var/lib/kubelet/cpu_manager_state"
MANIFESTS = "/etc/kubernetes/manifests"
BUSYBOX = importlib.import_module("lab").BUSYBOX_IMAGE  # scripts/lab.py's, imported into every lab
RECONCILE = 5  # seconds: the role's kubelet_cpu_manager_reconcile_period below
UNIT = """[Unit]
Description=kubelet %s, standalone (static pods from %s)

[Service]
ExecStart=/usr/local/bin/kubelet --config=%s --root-dir=/var/lib/kubelet --cert-dir=/var/lib/kubelet/pki --v=2
Restart=always
RestartSec=2
""" % (RELEASES[MINOR], MANIFESTS, CONFIG)
KUBELET_VARS = {"kubecpu_manager": "kubelet", "kubelet_cpu_manager_policy": "static",
                "kubelet_cpu_manager_reserved_cpus": "0", "kubelet_cpu_manager_reconcile_period": "%ds" % RECONCILE,
                "kubelet_cpu_manager_runtime": "cri", "kubelet_cpu_manager_runtime_endpoint": ENDPOINT,
                "kubelet_cpu_manager_runtime_timeout": 30,  # a guest vCPU is 25-30x slower
                "kubelet_cpu_manager_health_timeout": 300, "kubelet_cpu_manager_health_settle": 10,
                "kubelet_cpu_manager_housekeeping": True, "kubecpu_serial": [1, "100%"]}
PODS = {"one-uid": 1, "two-uid": 2}  # the static pods: UID -> CPUs
BUILD_WAIT = 3600  # the kubelet's build on the host, when its cache is cold (scripts/guest.py starts it)
DROPIN = "50-kubecpu-housekeeping.conf"
IRQS = ("import json, os; print(json.dumps({n: open('/proc/irq/%s/smp_affinity_list' % n).read().strip() "
        "for n in os.listdir('/proc/irq') if n.isdigit()}))")
SEEN = {}  # what the tests hand on: the daemons' CPUs before the role, the containers' IDs


@pytest.fixture(scope="module")
def node(guest):
    """The kubelet running (policy none: the node's own settings) with the static pods of PODS."""
    binary = os.path.join(ROOT, ".cache", "kubelet", "kubelet-%s" % MINOR)
    waits.until(lambda: os.path.exists(binary) or os.path.exists(binary + ".failed"),
                "%s (scripts/guest.py's stage builds it)" % binary, BUILD_WAIT, step=2)
    if not os.path.exists(binary):
        with open(binary + ".failed", encoding="utf-8") as handle:
            pytest.fail(handle.read())
    binaries = "/var/tmp/kubecpu-lab21-binaries"  # from the guest's disk (the share has no cache)
    guest.ssh(["sh", "-c", "rm -rf %s && cp -a %s/.cache/containerd-2.1/usr/bin %s" % (binaries, REMOTE, binaries)])
    lab(guest, "start", LAB21, "--systemd", "--slow", "--binaries", binaries)
    guest.ssh(["install", "-m", "755", "%s/.cache/kubelet/kubelet-%s" % (REMOTE, MINOR), "/usr/local/bin/kubelet"])
    guest.ssh(["rm", "-rf", MANIFESTS, "/var/lib/kubelet"])  # a node the kubelet has not run on
    guest.ssh(["mkdir", "-p", MANIFESTS, "/var/lib/kubelet"])
    config = dict(BASE, staticPodPath=MANIFESTS, containerRuntimeEndpoint=ENDPOINT)
    guest.ssh(["sh", "-c", "cat > %s" % CONFIG], stdin=yaml.safe_dump(config, indent=2, sort_keys=False))
    for uid, count in PODS.items():
        name = uid[:-len("-uid")]
        guest.ssh(["sh", "-c", "cat > %s/%s.yaml" % (MANIFESTS, name)],
                  stdin=yaml.safe_dump(static_pod(name, count, BUSYBOX)))
    guest.ssh(["sh", "-c", "cat > /etc/systemd/system/kubelet.service"], stdin=UNIT)
    SEEN["daemons"] = daemons(guest)  # before the kubelet and the role
    guest.ssh(["systemctl", "daemon-reload"])
    guest.ssh(["systemctl", "start", "kubelet.service"])
    SEEN["containers"] = running(guest, PODS)
    yield guest
    guest.ssh(["systemctl", "stop", "kubelet.service"], check=False)
    guest.ssh(["rm", "-rf", MANIFESTS], check=False)
    guest.ssh(["python3", "%s/scripts/lab.py" % REMOTE, "stop", LAB21], check=False, timeout=900)


def running(guest, uids, timeout=600):
    """Pod UID -> its running container's ID, once each of ``uids`` has one."""
    def ps():
        got = lab(guest, "ps", LAB21)
        return got if all(uid in got for uid in uids) else None
    got = waits.until(ps, "the kubelet running pods %s" % sorted(uids), timeout, step=2)
    return {uid: got[uid]["id"] for uid in uids}


def placed(guest):
    """Each pod of PODS: its container's cpuset and its first process's allowed CPUs (it is the same container)."""
    got = lab(guest, "ps", LAB21)
    assert {uid: got[uid]["id"] for uid in PODS if uid in got} == SEEN["containers"], got  # none restarted
    return {uid: (cpus(got[uid]["cgroup"]), cpus(got[uid]["proc"])) for uid in PODS}


def checkpoint(guest):
    return json.loads(guest.ssh(["cat", STATE]).stdout)


def files(guest):
    return guest.ssh(["cat", CONFIG]).stdout, guest.ssh(["cat", STATE]).stdout


def active(guest):
    return guest.ssh(["systemctl", "is-active", "kubelet.service"], check=False).stdout.strip() == "active"


def kept_through_two_reconcile_periods(guest, want):
    """The kubelet running, its checkpoint's entries ``want`` (UID -> CPUs, or None for the shared pool under
    policy none) and every pod the same container on them, read again after two of its reconcile periods."""
    began = time.monotonic()
    where = {uid: (cpu_set or ALL, cpu_set or ALL) for uid, cpu_set in want.items()}
    for reading in ("now", "after two reconcile periods"):
        # each look is an SSH round trip and a Python start in the guest: not more than every 3 s
        waits.until(lambda: placed(guest) == where, "the pods on %s %s" % (want, reading), 240, step=3)
        entries = checkpoint(guest).get("entries", {})
        assert {uid: cpus(entries[uid]["app"]) if uid in entries else None for uid in want} == want, entries
        assert active(guest)
        time.sleep(max(0.0, began + 2 * RECONCILE - time.monotonic()))


def test_none_to_static_without_a_drain(node, tmp_path):
    """The rollout turns the static policy on (reserved CPU 0, the daemons confined to it): the kubelet restarts on
    the rewritten checkpoint (policy static), each pod keeps its container on exclusive CPUs off CPU 0, the daemons
    run on CPU 0 only. (The same change with the configuration write failing, everything put back byte for byte,
    is failed on the systemd nodes of Molecule: extensions/molecule/podman/side_effect.yml; beside the real kubelet
    each rollout costs the guest four to five minutes in the suite.)"""
    guest = node
    waits.until(lambda: checkpoint_policy(guest) == "none", "the kubelet's checkpoint (policy none)", 300, step=2)
    done = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes", extra=KUBELET_VARS)
    assert "Write the rewritten checkpoint and push the moved containers' cpusets" in done.stdout
    state = checkpoint(guest)
    assert state["policyName"] == "static"
    placed = {uid: cpus(state["entries"][uid]["app"]) for uid in PODS}
    print("none -> static: kubelet %s holds %s" % (RELEASES[MINOR], {uid: sorted(c) for uid, c in placed.items()}))
    assert {uid: len(c) for uid, c in placed.items()} == PODS and not set().union(*placed.values()) & {0}
    kept_through_two_reconcile_periods(guest, placed)
    show, allowed, pods = daemons(guest)
    assert show == "AllowedCPUs=0" and all(cpu_set == {0} for cpu_set in allowed.values())
    assert pods == ALL  # the pods keep every CPU


def checkpoint_policy(guest):
    found = guest.ssh(["cat", STATE], check=False)
    return json.loads(found.stdout).get("policyName") if found.returncode == 0 else None


def test_the_reservation_changed_live_and_a_change_that_needs_a_drain_refused(node, tmp_path):
    """Reserved 0 -> 0-1: the 1-CPU pod's CPU is taken, so the rollout rewrites the checkpoint (that container moved
    live, the other kept) and restarts the kubelet, which keeps both. Then reserved 0-5 with the migration limited to
    a rewrite: 3 exclusive CPUs no longer fit beside six reserved, so the rollout fails naming the pods that do not
    fit, and nothing changes (both files byte for byte, the kubelet and its pods as they were). (full-pcpus-only
    switched on beside a 1-CPU pod, a restart with no migration that the kubelet takes keeping the pod, is proved
    beside kubelet 1.37.2's start on the role's plan: tests/guest/test_kubelet.py.)"""
    guest = node
    before = {uid: cpus(entry["app"]) for uid, entry in checkpoint(guest)["entries"].items()}
    done = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes",
                    extra=dict(KUBELET_VARS, kubelet_cpu_manager_reserved_cpus="0-1"))
    assert "Write the rewritten checkpoint and push the moved containers' cpusets" in done.stdout
    after = {uid: cpus(entry["app"]) for uid, entry in checkpoint(guest)["entries"].items()}
    print("reserved 0 -> 0-1: %s -> %s" % ({u: sorted(c) for u, c in before.items()},
                                           {u: sorted(c) for u, c in after.items()}))
    assert 1 in set().union(*before.values())  # the collision the test is about
    assert [uid for uid in PODS if after[uid] != before[uid]] == ["one-uid"]
    assert not set().union(*after.values()) & {0, 1}
    kept_through_two_reconcile_periods(guest, after)
    show, _allowed, _pods = daemons(guest)
    assert show == "AllowedCPUs=0-1"

    unchanged = files(guest)
    refused = playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes", check=False,
                       extra=dict(KUBELET_VARS, kubelet_cpu_manager_reserved_cpus="0-5",
                                  kubelet_cpu_manager_migration="rewrite"))
    said = [line for line in refused.stdout.splitlines() if "no rewrite is possible" in line]
    print("reserved 0-5: %s" % said[:1])
    assert refused.returncode != 0 and said, refused.stdout[-6000:]
    assert re.search(r"\((one|two)-uid/app\)", said[0]), said  # the pod and container that do not fit
    assert files(guest) == unchanged
    kept_through_two_reconcile_periods(guest, after)


def test_interrupts_follow_the_kubelets_pods_then_static_to_none_gives_every_cpu_back(node, tmp_path):
    """The agent role's housekeeper beside the kubelet keeps interrupts off its exclusive CPUs (its checkpoint); a
    third static pod comes (its CPUs kept free of interrupts too) and goes (they are given back). Then the rollout
    turns the policy to none with housekeeping off: the kubelet restarts on a checkpoint of policy none, every pod
    keeps its container and runs on every CPU, the drop-ins are gone and the daemons have every CPU again."""
    guest = node
    playbook(guest, tmp_path, ROLLOUT, extra=dict(AGENT_VARS, cpu_manager_agent_runtime_endpoint=ENDPOINT,
                                                  cpu_manager_irq_isolation="exclusive"))
    assert "housekeeping --loop" in guest.ssh(["systemctl", "cat", "kubecpu-agent.service"]).stdout
    held = interrupts_kept_off(guest)
    assert held == set().union(*(cpus(e["app"]) for e in checkpoint(guest)["entries"].values()))

    guest.ssh(["sh", "-c", "cat > %s/three.yaml" % MANIFESTS], stdin=yaml.safe_dump(static_pod("three", 2, BUSYBOX)))
    running(guest, ["three-uid"])
    with_three = interrupts_kept_off(guest, bigger_than=held)
    assert len(with_three - held) == 2
    guest.ssh(["rm", "%s/three.yaml" % MANIFESTS])
    assert interrupts_kept_off(guest, smaller_than=with_three) == held

    playbook(guest, tmp_path, ROLLOUT, group="kubelet_nodes",
             extra=dict(KUBELET_VARS, kubelet_cpu_manager_policy="none", kubelet_cpu_manager_reserved_cpus="",
                        kubelet_cpu_manager_housekeeping=False))
    assert checkpoint(guest)["policyName"] == "none"
    kept_through_two_reconcile_periods(guest, dict.fromkeys(PODS))
    assert guest.ssh(["test", "-e", "/etc/systemd/system/system.slice.d/%s" % DROPIN], check=False).returncode == 1
    show, allowed, _pods = daemons(guest)
    print("static -> none, housekeeping off: %s, %s" % (show, allowed))
    assert (show, allowed) == SEEN["daemons"][:2]


def interrupts_kept_off(guest, bigger_than=None, smaller_than=None, timeout=240):
    """The CPUs the housekeeper keeps interrupts off (its record), once it is the kubelet's exclusive CPUs (its
    checkpoint), bigger or smaller than before as asked, and no interrupt it manages is on them."""
    deadline = time.monotonic() + timeout
    while True:
        held = set().union(*(cpus(c) for entry in checkpoint(guest).get("entries", {}).values()
                             for c in entry.values()))
        irqs = {int(n): cpus(c) for n, c in json.loads(guest.ssh(["python3", "-c", IRQS]).stdout).items()}
        record = json.loads(guest.ssh(["cat", "/var/lib/kubecpu/cpu_manager_state.irq.json"], check=False).stdout
                            or '{"refused": []}')
        kept = cpus(record.get("kept_off") or "")
        still = {n: sorted(c) for n, c in irqs.items() if c & held and n not in record["refused"]}
        if (held and kept == held and not still and (bigger_than is None or held > bigger_than)
                and (smaller_than is None or held < smaller_than)):
            print("kubelet holds %s; interrupts %s; refused (managed) %s" % (
                sorted(held), {n: sorted(c) for n, c in sorted(irqs.items())}, record["refused"]))
            return held
        assert time.monotonic() < deadline, "interrupts on the kubelet's CPUs %s (kept off: %s): %s" % (
            sorted(held), sorted(kept), still)
        time.sleep(2)


def daemons(guest):
    """What systemd and the kernel say of the daemons: system.slice's AllowedCPUs, journald's and sshd's allowed CPUs,
    kubepods.slice's effective cpuset (every CPU when there is none yet)."""
    show = guest.ssh(["systemctl", "show", "-p", "AllowedCPUs", "system.slice"]).stdout.strip()
    allowed = {}
    for unit in ("systemd-journald", "ssh"):
        pid = guest.ssh(["systemctl", "show", "-p", "MainPID", "--value", unit]).stdout.strip()
        status = guest.ssh(["grep", "Cpus_allowed_list", "/proc/%s/status" % pid]).stdout
        allowed[unit] = cpus(status.split(":", 1)[1].strip())
    pods = guest.ssh(["cat", "/sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective"], check=False).stdout.strip()
    return show, allowed, cpus(pods) if pods else ALL
