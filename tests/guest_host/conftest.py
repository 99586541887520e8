"""Fixtures of the tests against the guest as a managed node (roles_support has the rest)."""

from __future__ import annotations

import json
import os

import pytest
from roles_support import LAB, REMOTE, guest_module, lab


@pytest.fixture(scope="module")
def guest():
    info = os.environ.get("KUBECPU_GUEST")
    if not info:
        pytest.fail("run by scripts/guest.py test (KUBECPU_GUEST names the booted guest)")
    return guest_module.Guest.attach(json.loads(info))


@pytest.fixture(scope="module")
def lab16(guest):
    lab(guest, "start", LAB, "--systemd", "--slow")
    yield LAB
    guest.ssh(["python3", "%s/scripts/lab.py" % REMOTE, "stop", LAB], check=False, timeout=900)
