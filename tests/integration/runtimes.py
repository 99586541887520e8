"""The runtimes the integration tests run beside Debian 12's containerd 1.6, from scripts/runtimes.sh."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNTIMES = {"containerd 1.7.24": "containerd-1.7", "containerd 2.1.9": "containerd-2.1",
            "containerd 2.4.2": "containerd-2.4", "crictl 1.37.0": "crictl", "cri-o 1.36.3": "cri-o"}
_BINARIES: dict = {}  # name -> its directory, once per session


def runtime_binaries(name):
    """The directory with the binaries of ``name`` (a key of RUNTIMES): scripts/runtimes.sh gets or builds them
    (Go builds cached outside the clone by version); "containerd 1.6" is Debian 12's, on the PATH ("")."""
    if name == "containerd 1.6":
        return ""
    if name not in _BINARIES:
        done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "runtimes.sh"), RUNTIMES[name]],
                              capture_output=True, text=True, check=False, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        _BINARIES[name] = done.stdout.strip().splitlines()[-1]
    return _BINARIES[name]


def runtime_lab(name, directory=None, **options):
    """A lab (scripts/lab.py) on the runtime ``name``: CRI-O's own lab for "cri-o ...", else containerd's."""
    import lab as lab_module  # conftest put scripts/ on the path

    kind = lab_module.CrioLab if name.startswith("cri-o") else lab_module.Lab
    return kind(directory, binaries=runtime_binaries(name) or None, **options)
