# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""scripts/guest.py's wait for a booting guest, against a real ssh: QEMU's user network accepts the connection before
the guest's sshd listens, so a probe can hang on the banner. That is a guest still booting (the wait goes on until the
boot's deadline), never the stage's failure."""

import importlib.util
import os
import socket
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(name="guest_module", scope="module")
def fixture_guest_module():
    spec = importlib.util.spec_from_file_location("kubecpu_guest_test", os.path.join(ROOT, "scripts", "guest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="silent_port")
def fixture_silent_port():
    """A port that accepts connections and never says a word (a guest whose sshd is not up yet behind slirp)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for connection in held:
        connection.close()


def test_a_probe_that_hangs_on_the_banner_is_a_guest_still_booting(guest_module, silent_port, tmp_path):
    guest = guest_module.Guest.attach({"name": "probe", "port": silent_port, "key": str(tmp_path / "no-key")})
    started = time.monotonic()
    assert guest._up(2.0) is False  # pylint: disable=protected-access
    assert time.monotonic() - started < 30


def test_a_refused_connection_is_a_guest_still_booting(guest_module, tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: refused
        guest = guest_module.Guest.attach({"name": "probe", "port": port, "key": str(tmp_path / "no-key")})
        assert guest._up(5.0) is False  # pylint: disable=protected-access
