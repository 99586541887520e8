"""irqbalance told its banned CPUs over its socket (with root's credentials), and its environment file kept."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import (ENV_NAME, MARK, MASK_NAME,
                                                                                             MAX_REPLY_BYTES,
                                                                                             IrqBalance)
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


def test_an_operators_own_bans_stay_and_are_merged_into_kubecpus(tmp_path):
    """The operator's line is kept as it is; kubecpu's block, after it, sets the variable to both (a later assignment
    wins); the mask, which irqbalance reads first, is set too where the operator uses it."""
    env = tmp_path / "irqbalance"
    env.write_text("IRQBALANCE_BANNED_CPULIST=0\n")
    balance = IrqBalance(str(tmp_path), str(env))
    balance.persist(CPUSet.parse("6-7"))
    assert env.read_text() == "IRQBALANCE_BANNED_CPULIST=0\n" + MARK + "\n%s=0,6-7\n" % ENV_NAME
    assert balance.own_bans() == CPUSet.parse("0")  # kubecpu's block is not the operator's
    env.write_text("IRQBALANCE_BANNED_CPUS=00000008\n")
    balance.persist(CPUSet.parse("6-7"))
    assert env.read_text().endswith("%s=3,6-7\n%s=c8\n" % (ENV_NAME, MASK_NAME))
    balance.persist(CPUSet())
    assert env.read_text() == "IRQBALANCE_BANNED_CPUS=00000008\n"


def test_the_environment_file_is_kept_byte_for_byte(tmp_path):
    """Latin-1 bytes, CRLF line ends and no final newline: kubecpu's block uses the file's line end, and removing
    it gives back the very bytes."""
    env = tmp_path / "irqbalance"
    original = b"# r\xe9glages\r\nIRQBALANCE_ARGS=--hintpolicy=ignore\r\n#end"
    env.write_bytes(original)
    balance = IrqBalance(str(tmp_path), str(env))
    assert balance.persist(CPUSet()) is False and env.read_bytes() == original  # nothing held: untouched
    balance.persist(CPUSet.parse("4-7"))
    block = env.read_bytes()[len(original):]
    assert block.startswith(b"\r\n" + MARK.encode()) and block.endswith(b"\r\n%s=4-7\r\n" % ENV_NAME.encode())
    assert balance.persist(CPUSet.parse("4-7")) is False
    balance.persist(CPUSet.parse("5"))
    assert env.read_bytes().count(MARK.encode()) == 1 and env.read_bytes().startswith(original + b"\r\n")
    balance.persist(CPUSet())
    assert env.read_bytes() == original


def test_the_distributions_file_is_found(tmp_path):
    """Debian's /etc/default/irqbalance, else RHEL's and SUSE's /etc/sysconfig/irqbalance."""
    sysconfig = tmp_path / "sysconfig"
    sysconfig.write_text("IRQBALANCE_ARGS=\n")
    balance = IrqBalance(str(tmp_path), env_files=[str(tmp_path / "default"), str(sysconfig)])
    assert balance.env_file == str(sysconfig) and balance.persist(CPUSet.parse("2")) is True
    assert sysconfig.read_text().endswith("%s=2\n" % ENV_NAME)


def test_a_dead_daemons_socket_whose_pid_was_reused_does_not_hide_the_live_one(tmp_path):
    proc = tmp_path / "proc"
    for pid, comm in ((300, "irqbalance"), (900, "postgres")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / ("irqbalance%d.sock" % pid)).write_text("")
    assert IrqBalance(str(tmp_path), proc=str(proc)).running() == (300, str(tmp_path / "irqbalance300.sock"))


def test_its_own_bans_are_the_kernels_isolated_and_nohz_full_cpus_unless_configured(tmp_path):
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "isolated").write_text("2-3\n")
    (cpu / "nohz_full").write_text("5\n")
    env = tmp_path / "env"
    env.write_text("IRQBALANCE_ARGS=\n")
    balance = IrqBalance(str(tmp_path), str(env), cpu_dir=str(cpu))
    assert balance.own_bans() == CPUSet.parse("2-3,5")
    env.write_text("IRQBALANCE_BANNED_CPULIST=1\n")
    assert balance.own_bans() == CPUSet.parse("1")  # configured: irqbalance does not add the kernel's
