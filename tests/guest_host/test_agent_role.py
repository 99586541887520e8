"""The agent role on a real server: through the rollout playbook with a canary batch in mode hook (the agent's loop
and the fail-closed OCI hook; containerd 1.6 with the systemd driver); ``cpu_manager_defrag`` moving pinned containers
live; then mode nri (containerd 1.7.24) on the installed agent. Two role runs in all: each costs minutes under
emulation. Mode loop is mode hook's agent without the hook, and the removal (state absent: the service stopped, its
files gone, the state backed up, a second removal a no-op) needs nothing of this server: both are Molecule's, on its
systemd nodes (extensions/molecule/podman)."""

from __future__ import annotations

import json
import re
import time

from roles_support import (AGENT_VARS, ALL, NRI_LAB, REMOTE, ROLLOUT, cpus, lab, playbook, recap, settle,
                           state_entries)

STATE = "/var/lib/kubecpu/cpu_manager_state"
ROLE = ("---\n- name: The agent\n  hosts: all\n  gather_facts: false\n  roles:\n"
        "    - role: kubecpu.cpu_manager.cpu_manager_agent\n")
CONFIG_BEFORE = {}  # lab16's config.toml before the hook went in: the nri step checks it is put back


def hook_vars(lab16):
    """Mode hook on the lab's containerd 1.6 (its config.toml; containerd is the lab's, not a unit: restarted here).
    The runtime gives the hook 60 s, not the default 10: in the emulated guest beside a loaded host one hook run took
    longer than 10 s and runc refused the container (a real node's figures: benchmarks/hook.py)."""
    return dict(AGENT_VARS, cpu_manager_agent_mode="hook", cpu_manager_agent_containerd_config="%s/config.toml" % lab16,
                cpu_manager_agent_containerd_service="", cpu_manager_agent_hook_timeout=60)


def test_the_agent_role_through_a_canary_rollout_in_mode_hook_pins_real_pods(guest, lab16, tmp_path):
    """The rollout (canary batch, health gates) installs the agent hardened under the real systemd; its loop pins a
    Guaranteed pod that ran before and leaves a Burstable one the rest. The role installs the OCI hook into the lab's
    config.toml and runs it once; once containerd restarts, a new Guaranteed container's first process runs on its
    exclusive CPU from its creation."""
    config = "%s/config.toml" % lab16
    CONFIG_BEFORE["text"] = guest.ssh(["cat", config]).stdout
    pod = lab(guest, "pod", lab16, "pinned", "Guaranteed", "2000")
    web = lab(guest, "pod", lab16, "web", "Burstable", "250")
    first = playbook(guest, tmp_path, ROLLOUT, extra=hook_vars(lab16))
    assert "PLAY RECAP" in first.stdout and recap(first)["failed"] == 0
    assert "Run the hook's command line from the runtime's spec" in first.stdout
    assert guest.ssh(["systemctl", "is-active", "kubecpu-agent.service"]).stdout.strip() == "active"
    security = guest.ssh(["systemd-analyze", "security", "--no-pager", "kubecpu-agent.service"]).stdout
    exposure = float(re.search(r"exposure level for \S+: ([0-9.]+)", security).group(1))
    assert exposure <= 2.0, security.splitlines()[-1]  # hardened under the real systemd
    assert guest.ssh(["test", "-d", "/sys/fs/cgroup/system.slice/kubecpu-agent.service"], check=False).returncode == 0
    deadline = time.monotonic() + 240
    while pod["uid"] not in state_entries(guest, STATE):
        assert time.monotonic() < deadline, "the agent did not pin the pod"
        time.sleep(2)
    held = cpus(state_entries(guest, STATE)[pod["uid"]]["c0"])
    settle(guest, lab16, pod["containers"]["c0"], held)
    settle(guest, lab16, web["containers"]["c0"], ALL - held)

    assert 'base_runtime_spec = "/etc/kubecpu/base-runtime-spec.json"' in guest.ssh(["cat", config]).stdout
    lab(guest, "restart", lab16)
    hooked = lab(guest, "pod", lab16, "hooked", "Guaranteed", "1000")
    held = cpus(state_entries(guest, STATE)[hooked["uid"]]["c0"])  # in the state when the container was created
    assert len(held) == 1
    line = first_line(guest, hooked["logs"]["c0"])
    assert cpus(line) == held, line  # its first instruction on its exclusive CPU: the hook placed it at creation
    print("mode hook on the guest: %s's first line %s" % (hooked["containers"]["c0"][:12], line))
    lab(guest, "rmpod", lab16, hooked["uid"])  # its CPU back for the next test's pods
    deadline = time.monotonic() + 240
    while hooked["uid"] in state_entries(guest, STATE):
        assert time.monotonic() < deadline, "the agent did not release the removed pod"
        time.sleep(2)


def test_cpu_manager_defrag_moves_pinned_containers_live(guest, lab16, tmp_path):
    """Four 1-CPU pods beside the 2-CPU one; the two on the even CPUs of two cores removed: neither core is whole
    until the module moves a container (live: its cpuset in cgroupfs and /proc as the state says)."""
    made = [lab(guest, "pod", lab16, "frag-%d" % n, "Guaranteed", "1000") for n in range(4)]
    deadline = time.monotonic() + 300
    while not all(p["uid"] in state_entries(guest, STATE) for p in made):
        assert time.monotonic() < deadline, "the agent did not pin the pods"
        time.sleep(2)
    held = {p["uid"]: cpus(state_entries(guest, STATE)[p["uid"]]["c0"]) for p in made}
    gone = [p for p in made if min(held[p["uid"]]) % 2 == 0][:2]  # one CPU of two cores: neither core whole
    for pod in gone:
        lab(guest, "rmpod", lab16, pod["uid"])
        made.remove(pod)
    while any(p["uid"] in state_entries(guest, STATE) for p in gone):
        assert time.monotonic() < deadline, "the agent did not release the removed pods"
        time.sleep(2)
    module = ("      kubecpu.cpu_manager.cpu_manager_defrag:\n"
              "        state_path: %s\n        reserved_cpus: 0-1\n        runtime: cri\n"
              "        runtime_endpoint: unix://%s/containerd.sock\n        runtime_timeout: 30\n"
              "        time_budget: 60\n" % (STATE, lab16))  # proven best on the slow guest too: check mode plans
    defrag = ("---\n- name: Defragment\n  hosts: all\n  gather_facts: false\n  tasks:\n"
              "    - name: Plan the moves (check mode)\n%s      check_mode: true\n      register: planned\n"
              "    - name: Move pinned containers so that whole cores are free\n%s      register: moved\n"
              "    - name: Keep both results on the controller\n"
              "      ansible.builtin.copy:\n        content: \"{{ {'planned': planned, 'done': moved} | to_json }}\"\n"
              "        dest: \"{{ result_file }}\"\n        mode: \"0644\"\n      delegate_to: localhost\n"
              % (module, module))  # one playbook: what check mode plans, then what happens
    done = playbook(guest, tmp_path, defrag, extra={"result_file": str(tmp_path / "results.json")})
    planned = json.loads((tmp_path / "results.json").read_text())["planned"]
    result = json.loads((tmp_path / "results.json").read_text())["done"]
    moves = [a for a in result.get("actions", []) if a.get("action") == "move"]
    assert moves and planned["changed"] and result["changed"] and recap(done)["failed"] == 0
    assert [(a["pod_uid"], a["cpus"]) for a in planned["actions"] if a["action"] == "move"] == [
        (a["pod_uid"], a["cpus"]) for a in moves]  # check mode showed what then happened
    entries = state_entries(guest, STATE)
    for pod in made:  # whatever moved, cgroupfs and /proc agree with the state
        if pod["uid"] in entries:
            settle(guest, lab16, pod["containers"]["c0"], cpus(entries[pod["uid"]]["c0"]))
    print("cpu_manager_defrag on the guest: %d moves" % len(moves))


def test_the_agent_role_then_in_mode_nri(guest, lab16, tmp_path):
    """The mode changes on the installed agent to nri (containerd 1.7.24): config.toml is as it was, containers on
    containerd 1.6 start unhooked, and a Guaranteed container on containerd 1.7 has its CPUs in the state at its
    creation."""
    config = "%s/config.toml" % lab16
    binaries = "/var/tmp/containerd-nri"  # on the guest's disk: the share is read again at each run of the shim
    guest.ssh(["cp", "-a", "%s/.cache/containerd-nri/usr/bin" % REMOTE, binaries])
    lab(guest, "start", NRI_LAB, "--nri", binaries, "--slow")
    try:
        nri_vars = dict(hook_vars(lab16), cpu_manager_agent_mode="nri",
                        cpu_manager_agent_nri_socket="%s/nri.sock" % NRI_LAB,
                        cpu_manager_agent_runtime_endpoint="unix://%s/containerd.sock" % NRI_LAB)
        playbook(guest, tmp_path, ROLE, extra=nri_vars)  # the mode changed on the installed agent
        assert guest.ssh(["systemctl", "is-active", "kubecpu-agent.service"]).stdout.strip() == "active"
        assert guest.ssh(["cat", config]).stdout == CONFIG_BEFORE["text"]  # the hook taken out again
        assert guest.ssh(["test", "-e", "/etc/kubecpu/base-runtime-spec.json"], check=False).returncode != 0
        lab(guest, "restart", lab16)
        unhooked = lab(guest, "pod", lab16, "unhooked", "Guaranteed", "1000")
        assert cpus(first_line(guest, unhooked["logs"]["c0"])) == ALL  # no hook placed it: every CPU
        pod = lab(guest, "pod", NRI_LAB, "at-creation", "Guaranteed", "2000")
        held = cpus(state_entries(guest, STATE)[pod["uid"]]["c0"])  # at creation
        assert len(held) == 2
        settle(guest, NRI_LAB, pod["containers"]["c0"], held)
    finally:
        guest.ssh(["python3", "%s/scripts/lab.py" % REMOTE, "stop", NRI_LAB], check=False, timeout=900)


def first_line(guest, log, timeout=120):
    """The CPU list a container printed first (lab.py's containers print their Cpus_allowed_list, then sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        text = guest.ssh(["head", "-n", "1", log], check=False).stdout
        if text.endswith("\n"):
            return text.split("Cpus_allowed_list:", 1)[1].strip()
        assert time.monotonic() < deadline, "nothing in %s after %.0f s" % (log, timeout)
        time.sleep(1)
