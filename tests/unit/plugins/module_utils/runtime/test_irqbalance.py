"""irqbalance told its banned CPUs over its socket (with root's credentials), and its environment file kept."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import ENV_NAME, MARK, MAX_REPLY_BYTES, IrqBalance
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import FakeIrqBalance

ENV = "# irqbalance's defaults\n#IRQBALANCE_ONESHOT=\nIRQBALANCE_ARGS=--policyscript=/bin/true\n"


@pytest.fixture(name="daemon")
def fixture_daemon(tmp_path):
    served = FakeIrqBalance(tmp_path)
    yield served
    served.close()


def test_the_running_daemon_is_found_by_its_socket(tmp_path, daemon):
    (tmp_path / "irqbalance999999999.sock").write_text("")  # a daemon that has gone
    (tmp_path / "other.sock").write_text("")
    assert IrqBalance(str(tmp_path)).running() == (daemon.pid, daemon.path)
    assert IrqBalance(str(tmp_path / "missing")).running() is None


@pytest.mark.parametrize(("cpus", "command", "banned"), [
    ("4-7", "settings cpus 4,5,6,7", "4-7"), ("1,3", "settings cpus 1,3", "1,3"), ("", "settings cpus NULL", ""),
])
def test_ban_sends_one_command_as_root_and_setup_reads_it_back(tmp_path, daemon, cpus, command, banned):
    balance = IrqBalance(str(tmp_path))
    balance.ban(daemon.path, CPUSet.parse(cpus))
    assert balance.banned(daemon.path) == CPUSet.parse(banned)  # one connection at a time: the ban came first
    assert daemon.commands == [command, "setup"]
    assert daemon.senders == [os.getuid()] * 2  # the credentials irqbalance checks travelled with each command


def test_a_daemon_that_is_not_there_or_floods_is_an_error_naming_it(tmp_path):
    with pytest.raises(HousekeepingError, match=r"cannot tell irqbalance .*gone\.sock"):
        IrqBalance(str(tmp_path)).ban(str(tmp_path / "gone.sock"), CPUSet.parse("1"))
    path = str(tmp_path / "irqbalance1.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def flood():
        conn, _address = server.accept()
        conn.recv(100)
        try:
            conn.sendall(b"x" * (MAX_REPLY_BYTES + 10))
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=flood)
    thread.start()
    with pytest.raises(HousekeepingError, match="more than %d bytes" % MAX_REPLY_BYTES):
        IrqBalance(str(tmp_path)).banned(path)
    thread.join()
    server.close()


def test_the_environment_file_keeps_the_set_for_the_next_start(tmp_path):
    env = tmp_path / "irqbalance"
    env.write_text(ENV)
    os.chmod(env, 0o644)
    balance = IrqBalance(str(tmp_path), str(env))
    assert balance.persist(CPUSet.parse("4-7"), apply=False) is True
    assert env.read_text() == ENV  # check mode: nothing written
    assert balance.persist(CPUSet.parse("4-7")) is True
    assert env.read_text() == ENV + MARK + "\n%s=4-7\n" % ENV_NAME
    assert oct(os.stat(env).st_mode & 0o777) == "0o644"
    assert balance.persist(CPUSet.parse("4-7")) is False  # once per change
    assert balance.persist(CPUSet.parse("2-3")) is True
    assert env.read_text().count(ENV_NAME) == 1 and env.read_text().endswith("%s=2-3\n" % ENV_NAME)
    assert balance.persist(CPUSet()) is True
    assert env.read_text() == ENV  # none held: the line goes
    assert IrqBalance(str(tmp_path), str(tmp_path / "absent")).persist(CPUSet.parse("1")) is False


def test_an_operators_own_line_is_replaced_not_doubled(tmp_path):
    env = tmp_path / "irqbalance"
    env.write_text("IRQBALANCE_BANNED_CPULIST=0\n")
    IrqBalance(str(tmp_path), str(env)).persist(CPUSet.parse("6-7"))
    assert env.read_text() == MARK + "\n%s=6-7\n" % ENV_NAME
