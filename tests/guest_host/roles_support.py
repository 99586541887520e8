"""The roles and the modules against a real server: the QEMU guest (2 sockets x 2 cores x 2 threads, 2 NUMA nodes,
cgroup v2, systemd) as a managed node, reached by ansible-playbook over SSH on a loopback-forwarded port. Real
containerd in it (1.6 with the systemd driver; 1.7.24 with NRI), real pods, read back from cgroupfs and /proc.

Run on the host by ``scripts/guest.py test`` against the guest a group booted (KUBECPU_GUEST names it). A module
run costs about 9 s in the guest (ansible-core compiles its module_utils from the AnsiballZ zip on every run, 25x
slower under emulation): each test runs a role once; a second run's idempotence is Molecule's (podman scenario)."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
guest_module = importlib.import_module("guest")
REMOTE = guest_module.GUEST_ROOT
LAB = "/run/kubecpu-lab"  # containerd 1.6, systemd driver
NRI_LAB = "/run/kubecpu-nri"  # containerd 1.7.24 with NRI, cgroupfs driver
ALL = set(range(8))


def cpus(text):
    """A CPU list as a set of CPU numbers."""
    return set(CPUSet.parse(text))


def collections_path():
    if os.environ.get("KUBECPU_COLLECTIONS_PATH"):
        return os.environ["KUBECPU_COLLECTIONS_PATH"]
    return os.path.join(ROOT, ".cache", "collections")


def playbook(guest, tmp_path, text, group="agent_nodes", extra=None, check=True):
    """``text`` (a playbook) run against the guest; the completed process (output as text)."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(guest.inventory(group))
    path = tmp_path / ("play-%d.yml" % len(list(tmp_path.glob("play-*.yml"))))
    path.write_text(text)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(path)]
    if extra:
        argv += ["-e", json.dumps(extra)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_TIMEOUT="60", ANSIBLE_PIPELINING="True",
               ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
               PROFILE_TASKS_TASK_OUTPUT_LIMIT="12")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    # where the run's minutes went (profile_tasks' slowest tasks; the test's output shows them)
    print("%s: %.0f s; slowest tasks:\n%s" % (path.name, time.monotonic() - started, "\n".join(
        line for line in proc.stdout.splitlines() if re.search(r" -{3,} +[0-9.]+s$", line))))
    if check and proc.returncode != 0:
        raise AssertionError("ansible-playbook failed (%d):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-6000:], proc.stderr[-2000:]))
    return proc


def recap(proc):
    """The PLAY RECAP's counters for the guest."""
    line = [row for row in proc.stdout.splitlines() if row.startswith("kubecpu-guest") and "ok=" in row][-1]
    return {key: int(value) for key, value in (part.split("=") for part in line.split(":", 1)[1].split())}


def lab(guest, *argv):
    return json.loads(guest.ssh(["python3", "%s/scripts/lab.py" % REMOTE, *argv], timeout=900).stdout)


def placed(guest, directory, cid):
    """{"cgroup", "proc"}: the container's cpuset in cgroupfs and its process's Cpus_allowed_list."""
    return lab(guest, "cpus", directory, cid)


def settle(guest, directory, cid, want, timeout=240):
    deadline = time.monotonic() + timeout
    while True:
        seen = placed(guest, directory, cid)
        if cpus(seen["cgroup"]) == want and cpus(seen["proc"]) == want:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError("container %s: %s, not %s, after %.0f s" % (cid[:12], seen, sorted(want), timeout))
        time.sleep(1)


def state_entries(guest, path):
    return json.loads(guest.ssh(["cat", path]).stdout).get("entries", {})


AGENT_VARS = {"kubecpu_manager": "agent", "cpu_manager_agent_runtime": "cri",
              "cpu_manager_agent_runtime_endpoint": "unix://%s/containerd.sock" % LAB,
              "cpu_manager_agent_reserved_cpus": "0-1", "cpu_manager_agent_runtime_timeout": 30,
              "cpu_manager_agent_period": "5s", "kubecpu_serial": [1, "100%"], "kubecpu_agent_gate_timeout": 600}
ROLLOUT = "---\n- name: The fleet rollout\n  ansible.builtin.import_playbook: kubecpu.cpu_manager.rollout\n"
