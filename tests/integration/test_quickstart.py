"""The README's install and quick start, run as written on a systemd node: the collection built and installed, the
shipped example inventory copied, then the plan, the rollout and the report playbooks against this one "local" node.

The node is a podman container of the Molecule image (Debian 12, systemd as PID 1; scripts/molecule-image.sh),
privileged as a node's root is, with the clone and the controller's Python (the clone's .venv: ansible-core) mounted
read-only at the same paths, and the lab's real containerd socket mounted where containerd's is. What the README
block prints is compared line for line; its transcript is kept in tests/output/quickstart.txt."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from test_modules import ROOT
from test_readme import readme_block

IMAGE = os.environ.get("KUBECPU_MOLECULE_IMAGE", "localhost/kubecpu-debian12-systemd:latest")
MARK = "@@kubecpu-quickstart@@"
TRANSCRIPT = os.path.join(ROOT, "tests", "output", "quickstart.txt")


@pytest.fixture(scope="module")
def systemd_node(lab):
    """A systemd node whose containerd socket is a real containerd's (a lab of its own: no other test's pods)."""
    import lab as lab_module  # conftest put scripts/ on the path

    del lab  # only its requirements
    if shutil.which("podman") is None:
        pytest.fail("the quick start runs on a systemd node in podman: podman is missing (scripts/test.sh installs it)")
    built = subprocess.run(["bash", os.path.join(ROOT, "scripts", "molecule-image.sh")], capture_output=True,
                           text=True, timeout=1200, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    with lab_module.Lab() as runtime:
        yield from _node(runtime)


def _node(runtime):
    name = "kubecpu-quickstart-%s" % uuid.uuid4().hex[:8]
    base, venv = os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)
    argv = ["podman", "run", "-d", "--name", name, "--privileged", "--systemd=always",
            "-v", "%s:%s:ro" % (ROOT, ROOT), "-v", "%s:%s:ro" % (base, base), "-v", "%s:%s:ro" % (venv, venv),
            "-v", "%s:/run/containerd/containerd.sock" % runtime.socket, IMAGE, "/sbin/init"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    try:
        deadline = time.monotonic() + 120
        while True:  # systemd up: "running" or "degraded" (a unit the container cannot start is no concern here)
            state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], capture_output=True,
                                   text=True, timeout=60, check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            assert time.monotonic() < deadline, "the node's systemd did not come up within 120 s: %s" % state
            time.sleep(0.5)
        yield name
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=120, check=False)


def node_shell(node, script, timeout=900):
    env = ["--env", "PATH=%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" % os.path.join(
        os.path.realpath(sys.prefix), "bin"), "--env", "ANSIBLE_NOCOLOR=1", "--env", "ANSIBLE_FORCE_COLOR=0"]
    return subprocess.run(["podman", "exec", "-w", ROOT] + env + [node, "bash", "-c", script], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_the_readme_quick_start_as_written_ends_with_a_rollout_and_a_report(systemd_node):
    steps = readme_block("Install") + readme_block("Quick start: the collection on this machine")
    commands = [command for command, _shown in steps]
    script = "".join("echo %s %d\n%s 2>&1 || { echo %s failed $?; exit 1; }\n" % (MARK, number, command, MARK)
                     for number, command in enumerate(commands))
    proc = node_shell(systemd_node, script)
    parts = re.split(r"^%s (\d+)\n" % MARK, proc.stdout, flags=re.M)[1:]
    outputs = {int(number): text for number, text in zip(parts[::2], parts[1::2])}
    transcript = "".join("$ %s\n%s" % (command, outputs.get(number, "(not run)\n").replace(MARK + " failed", "FAILED"))
                         for number, command in enumerate(commands))
    os.makedirs(os.path.dirname(TRANSCRIPT), exist_ok=True)
    with open(TRANSCRIPT, "w", encoding="utf-8") as handle:
        handle.write(transcript)
    assert proc.returncode == 0, transcript[-8000:] + proc.stderr
    for number, (command, shown) in enumerate(steps):
        if shown:
            assert outputs[number].splitlines() == shown, "README: %s printed %r" % (command, outputs[number])
        if "ansible-playbook" in command:
            recap = re.search(r"^localhost\s*: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", outputs[number], re.M)
            assert recap, "%s: %s" % (command, outputs[number][-3000:])

    # what the report says about the node: kubecpu's state, CPU 0 reserved (the example's one CPU)
    fleet = json.loads(node_shell(systemd_node, "cat ~/kubecpu-quickstart/kubecpu-report/fleet.json").stdout)
    (node,) = fleet["nodes"]
    assert (node["node"], node["manager"], node["error"], node["policy"], node["reserved_cpus"]) == (
        "localhost", "agent", None, "static", "0"), node

    # the README's removal removes the agent (the rollout playbook's idempotence on a systemd node is Molecule's:
    # its podman scenario converges through kubecpu.cpu_manager.rollout and runs it again)
    removal = re.search(r"`(ansible-playbook -i inventory.yml kubecpu.cpu_manager.rollout -e "
                        r"cpu_manager_agent_state=absent)`", open(os.path.join(ROOT, "README.md"),
                                                                  encoding="utf-8").read()).group(1)
    removed = node_shell(systemd_node, "cd ~/kubecpu-quickstart && " + removal)
    assert removed.returncode == 0, removed.stdout[-3000:]
    gone = node_shell(systemd_node, "systemctl is-active kubecpu-agent; test ! -e /etc/systemd/system/kubecpu-agent.service")
    assert gone.stdout.strip() == "inactive" and gone.returncode == 0, gone.stdout + gone.stderr
