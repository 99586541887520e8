"""The README's first command, as a new user runs it: ``bash scripts/demo.sh`` on a real node, with a python3 that
has no package at all (the demo needs none), finishes within 30 s, prints the embedded demo's table layout, and
nothing a user must ignore."""

from __future__ import annotations

import os
import re
import subprocess
import time

from test_modules import ROOT


def columns(line):
    return re.split(r"\s{2,}", line.strip())


def test_the_readme_demo_shows_the_pinned_node_in_seconds(lab, bare_python, tmp_path):
    del lab  # only its requirements: the demo starts a containerd of its own
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(bare_python)
    env = {"PATH": "%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" % bindir, "HOME": str(tmp_path),
           "LANG": "C.UTF-8"}
    started = time.monotonic()
    proc = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    assert took < 30, "the demo took %.1f s" % took
    for noise in ("Traceback", "WARNING", "pip", "Error"):
        assert noise not in proc.stdout
    embedded = subprocess.run([os.path.join(ROOT, "bin", "kubecpu"), "demo"], env=env, capture_output=True, text=True,
                              check=True).stdout
    real_header = next(line for line in proc.stdout.splitlines() if line.startswith("POD/CONTAINER"))
    embedded_header = next(line for line in embedded.splitlines() if line.startswith("POD/CONTAINER"))
    assert columns(real_header) == columns(embedded_header) == ["POD/CONTAINER", "QOS", "CPU REQUEST", "STATE",
                                                                "PINNED", "CPUS"]
    assert proc.stdout.splitlines()[0].startswith("Node (") and embedded.splitlines()[0].startswith("Node (")
    rows = {columns(line)[0]: columns(line) for line in proc.stdout.splitlines() if line.startswith("net/")}
    assert rows["net/dpdk-forwarder/fwd"][4:] == ["yes", "1"]  # its own CPU, in cgroupfs and in /proc
    assert proc.stdout.rstrip().endswith("Torn down: containerd stopped, pods and state removed.")
