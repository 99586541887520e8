"""The fail-closed hook in a real runtime's base OCI spec, for tests: ``bin/kubecpu hook`` run through a wrapper that
logs, container by container, what it answered and the state file's identity before and after."""

from __future__ import annotations

import json
import os
import subprocess

WRAPPER = r'''import json, os, subprocess, sys
def stamp(path):
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_ino, found.st_mtime_ns]
state = sys.stdin.buffer.read()
before = stamp(%(state)r)
proc = subprocess.run(%(argv)r, input=state, capture_output=True, env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
with open(%(log)r, "a") as log:
    log.write(json.dumps({"rc": proc.returncode, "out": proc.stdout.decode(), "err": proc.stderr.decode(),
                          "before": before, "after": stamp(%(state)r)}) + "\n")
sys.stderr.write(proc.stderr.decode())
sys.exit(proc.returncode)
'''


def base_spec(ctr, python, argv, state, log, directory, timeout=20):
    """The path of a base runtime spec (``ctr oci spec``'s, from the runtime's own ``ctr``) whose createRuntime hook
    runs ``argv`` (``bin/kubecpu hook ...``) through the wrapper; its answers go to ``log``."""
    spec = json.loads(subprocess.run([ctr, "oci", "spec"], capture_output=True, text=True, check=True).stdout)
    wrapper = os.path.join(directory, "hook-wrapper.py")
    with open(wrapper, "w", encoding="utf-8") as handle:
        handle.write(WRAPPER % {"state": state, "argv": argv, "log": log})
    spec["hooks"] = {"createRuntime": [{"path": python, "args": [python, wrapper], "timeout": timeout}]}
    path = os.path.join(directory, "base-spec.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    return path


def answers(log):
    """What the hook answered, container by container (its JSON result, or its error line)."""
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
