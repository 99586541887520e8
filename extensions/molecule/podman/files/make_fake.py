"""Builds the agent node's stand-in runtime (crictl answering with the recorded crictl 1.32 output, a fake cgroupfs)
and a 4-CPU machine in DIR (its sysfs tree, and systemd as PID 1 in proc/1/comm: the nodes' init is systemd, and the
roles' preflight reads it below the sysfs root), with the paths they will have on the node (/var/lib/kubecpu/fake)."""

from __future__ import annotations

import importlib
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))

importlib.import_module("conftest")  # ansible_collections.kubecpu.cpu_manager importable
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs  # noqa: E402

NODE_DIR = "/var/lib/kubecpu/fake"


def main(directory: str) -> None:
    runtime = os.path.join(directory, "runtime")
    fake_crictl.make_node(runtime)
    script = os.path.join(runtime, "crictl")
    with open(script, encoding="utf-8") as handle:
        text = handle.read()
    text = re.sub(r"\A#!.*", "#!/usr/bin/python3", text)
    text = re.sub(r"^HERE = .*$", "HERE = %r" % (NODE_DIR + "/runtime"), text, flags=re.M)
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(text)
    fake_sysfs.build(os.path.join(directory, "root"), fake_sysfs.machine(1, 4, 1))
    os.makedirs(os.path.join(directory, "root", "proc", "1"), exist_ok=True)
    with open(os.path.join(directory, "root", "proc", "1", "comm"), "w", encoding="utf-8") as handle:
        handle.write("systemd\n")


if __name__ == "__main__":
    main(sys.argv[1])
