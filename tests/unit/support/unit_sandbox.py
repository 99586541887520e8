"""systemd's ``ProtectSystem=strict`` with ``ReadWritePaths=``, as the kernel enforces it, over a tree below a
temporary directory: the tree read-only, each writable path bound onto itself read-write (a ``-`` prefix: skipped
when the path is not there, as systemd skips it), in a mount namespace of its own (``unshare -m``, root only), and
Python code run there. systemd sets up a service's namespace the same way (a read-only bind of the tree, then a
read-write bind per path), so a write that fails here fails in the agent's unit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, Sequence

import pytest

_MOUNT = """
import subprocess, sys
root, code, writable = sys.argv[1], sys.argv[2], sys.argv[3:]
def mount(*argv):
    subprocess.run(("mount",) + argv, check=True)
mount("--bind", root, root)
mount("-o", "remount,bind,ro", root)
for path in writable:
    optional = path.startswith("-")
    path = root + path.lstrip("-")
    if optional and not __import__("os").path.exists(path):
        continue
    mount("--bind", path, path)
    mount("-o", "remount,bind,rw", path)
exec(compile(code, "<sandboxed>", "exec"))
"""


def run_sandboxed(root: str, writable: Sequence[str], code: str) -> Dict[str, Any]:
    """What ``code`` prints (one JSON document), run with ``root`` read-only but for ``writable`` (absolute paths as
    in a unit, taken below ``root``). ``code`` sees ``root`` as a variable."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        pytest.skip("a mount namespace needs root, unshare and mount")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", _MOUNT, root, code,
                           *writable], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
