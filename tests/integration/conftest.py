"""A real containerd for the integration tests (scripts/lab.py), started once per session."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
importlib.import_module("conftest")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

lab_module = importlib.import_module("lab")
runtime_binaries = importlib.import_module("runtimes").runtime_binaries


@pytest.fixture(scope="session")
def lab():
    problems = lab_module.missing_requirements()
    if problems:
        if os.environ.get("CI"):
            pytest.fail("the integration tests need a real containerd: " + "; ".join(problems))
        pytest.skip("no real containerd here: " + "; ".join(problems))
    with lab_module.Lab() as running:
        yield running


@pytest.fixture(scope="session")
def crictl():
    """A real crictl (sigs.k8s.io/cri-tools 1.37.0, built from the Go module proxy)."""
    return os.path.join(runtime_binaries("crictl 1.37.0"), "crictl")


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory):
    """A virtualenv with no package at all, as a node's python3 has."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    for module in ("grpc", "google.protobuf"):
        assert subprocess.run([python, "-c", "import " + module], capture_output=True, check=False).returncode != 0
    return python
