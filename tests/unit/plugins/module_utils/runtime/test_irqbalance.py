"""irqbalance told its banned CPUs over its socket (with root's credentials), and its environment file kept."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import (ENV_NAME, MARK, MASK_NAME,
                                                                                             MAX_REPLY_BYTES,
                                                                                             IrqBalance, _operator_lines,
                                                                                             env_files, in_place_steps,
                                                                                             with_block)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import FakeIrqBalance
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.unit_sandbox import run_sandboxed
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize("layout, expected", [
    (("etc/debian_version", "etc/default/irqbalance"), "etc/default/irqbalance"),  # Debian, Ubuntu
    (("etc/debian_version", "etc/default/irqbalance", "etc/sysconfig/irqbalance"), "etc/default/irqbalance"),
    (("etc/debian_version", "etc/sysconfig/irqbalance"), None),  # Debian's irqbalance never reads sysconfig
    (("etc/sysconfig/irqbalance",), "etc/sysconfig/irqbalance"),  # RHEL, SUSE
    (("etc/sysconfig/irqbalance", "etc/default/irqbalance"), "etc/sysconfig/irqbalance"),
    (("etc/default/irqbalance",), "etc/default/irqbalance"),  # another family: whichever exists
    ((), None),  # irqbalance not installed
])
def test_the_file_is_the_one_the_distributions_irqbalance_reads(tmp_path, layout, expected):
    """issue 62: on RHEL the file is /etc/sysconfig/irqbalance, even where an /etc/default/irqbalance exists too."""
    for path in layout:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("IRQBALANCE_ARGS=\n")
    balance = IrqBalance(str(tmp_path / "run"), env_files=env_files(str(tmp_path)))
    assert balance.persist(CPUSet.parse("2")) is (expected is not None)
    if expected is not None:
        assert balance.env_file == str(tmp_path / expected)
        assert (tmp_path / expected).read_text() == "IRQBALANCE_ARGS=\n%s\n%s=2\n" % (MARK, ENV_NAME)
    for path in set(layout) - {expected, "etc/debian_version"}:
        assert (tmp_path / path).read_text() == "IRQBALANCE_ARGS=\n"  # the other file untouched


def test_the_file_is_rewritten_in_its_own_inode_with_its_owner_mode_and_links(tmp_path):
    """No rename: the agent's unit lets it write this one file, not its directory; the file stays the operator's."""
    env = tmp_path / "irqbalance"
    env.write_text(ENV)
    os.chmod(env, 0o640)
    if os.geteuid() == 0:
        os.chown(env, 1234, 5678)
    os.link(env, tmp_path / "link")
    before = os.stat(env)
    balance = IrqBalance(str(tmp_path), str(env))
    for cpus in ("4-7", "4-12", "4", ""):
        balance.persist(CPUSet.parse(cpus))
        after = os.stat(env)
        assert (after.st_ino, after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
            before.st_ino, before.st_uid, before.st_gid, 0o640)
        assert (tmp_path / "link").read_bytes() == env.read_bytes() == with_block(ENV.encode(), CPUSet.parse(cpus))[0]
    assert sorted(os.listdir(tmp_path)) == ["irqbalance", "link"]  # no temporary file


def test_a_file_changed_while_kubecpu_rewrites_it_is_left_alone(tmp_path, monkeypatch):
    """Read, then changed by someone else before kubecpu writes: the offsets kubecpu worked out are not that file's."""
    env = tmp_path / "irqbalance"
    env.write_text(ENV)
    balance = IrqBalance(str(tmp_path), str(env))
    read = balance._env_bytes

    def read_then_edited():
        data = read()
        env.write_text("IRQBALANCE_ARGS=--edited\n")
        return data

    monkeypatch.setattr(balance, "_env_bytes", read_then_edited)
    with pytest.raises(HousekeepingError, match="irqbalance changed while kubecpu was rewriting it: left alone"):
        balance.persist(CPUSet.parse("4"))
    assert env.read_text() == "IRQBALANCE_ARGS=--edited\n"


LINE = st.sampled_from([b"IRQBALANCE_ARGS=--hintpolicy=ignore", b"# r\xe9glages", b"IRQBALANCE_BANNED_CPULIST=0",
                        b"IRQBALANCE_BANNED_CPUS=00000008", b"#IRQBALANCE_ONESHOT=", b"", b"x"])
CPUS = st.sets(st.integers(0, 40), max_size=6).map(CPUSet)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=4), crlf=st.booleans(), final=st.booleans(),
       events=st.lists(st.one_of(CPUS, st.tuples(st.sampled_from(["above", "below"]), LINE)), min_size=1,
                       max_size=8))
def test_a_rewrite_stopped_after_any_step_keeps_the_operators_lines_whole(lines, crlf, final, events):
    """issue 62: the file is rewritten in place, in steps; whichever step the writer is stopped after (killed, the
    machine down), the operator's lines are all there, whole and first, and the last step leaves exactly the file
    kubecpu meant. Between kubecpu's rewrites the operator adds lines above or below its block."""
    ending = b"\r\n" if crlf else b"\n"
    data = ending.join(lines) + (ending if final and lines else b"")
    for event in events:
        if isinstance(event, tuple):  # the operator edits the file
            where, line = event
            data = line + ending + data if where == "above" else data + (b"" if data.endswith(b"\n") or not data
                                                                         else ending) + line + ending
            continue
        new, kept = with_block(data, event)
        operators = b"".join(_operator_lines(data))
        assert new[:kept] == operators
        state = bytearray(data)
        for offset, written in in_place_steps(data, new, kept):
            if written is None:
                del state[offset:]
            else:
                state[offset:offset + len(written)] = written
            assert b"".join(_operator_lines(bytes(state))).startswith(operators) or bytes(state) == data
        assert bytes(state) == new
        data = new


def test_the_agents_sandbox_lets_it_write_irqbalances_file_and_nothing_beside_it(tmp_path):
    """issue 62: the agent's unit makes only the file writable (ReadWritePaths=-/etc/default/irqbalance, bound onto
    itself). A rename over it, the way files are replaced elsewhere, cannot work there (no temporary file in the
    directory, EROFS); the rewrite in place does, and the file beside it stays read-only."""
    (tmp_path / "etc" / "default").mkdir(parents=True)
    (tmp_path / "etc" / "debian_version").write_text("12.11\n")
    (tmp_path / "etc" / "default" / "irqbalance").write_text(ENV)
    (tmp_path / "etc" / "default" / "grub").write_text("GRUB_TIMEOUT=5\n")
    found = run_sandboxed(str(tmp_path), ["-/etc/default/irqbalance", "-/etc/sysconfig/irqbalance"], SANDBOXED)
    assert found == {"file": "/etc/default/irqbalance", "writes": [True, True, True], "errors": [],
                     "rename": "Read-only file system", "beside": "Read-only file system"}
    assert (tmp_path / "etc" / "default" / "irqbalance").read_text() == ENV  # 4-7, then 4, then none


def test_a_file_the_sandbox_does_not_let_it_write_is_an_error_that_says_to_restart_the_agent(tmp_path):
    """irqbalance installed (or its file replaced by a rename: the kernel then takes the unit's bind away) after the
    agent started: the file is read-only in the agent's namespace until it restarts. One error per pass, naming it."""
    (tmp_path / "etc" / "sysconfig").mkdir(parents=True)
    (tmp_path / "etc" / "sysconfig" / "irqbalance").write_text(ENV)
    found = run_sandboxed(str(tmp_path), ["-/etc/default/irqbalance"], SANDBOXED)
    assert found["file"] == "/etc/sysconfig/irqbalance" and found["writes"] == []
    assert found["errors"] == ["cannot write %s/etc/sysconfig/irqbalance: Read-only file system (the agent's unit lets "
                               "it write the file that was there when it started: restart the agent once irqbalance's "
                               "file is installed or replaced)" % tmp_path]
    assert (tmp_path / "etc" / "sysconfig" / "irqbalance").read_text() == ENV


# Run in the sandbox: the node's file as the agent finds it (machine_files), kubecpu's block written, changed and
# removed, then what a rename over it and a file beside it meet.
SANDBOXED = """
import json, os
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.atomic import atomic_write
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import machine_files
balance = machine_files(root)[1]
found = {"file": balance.env_file[len(root):], "writes": [], "errors": []}
for cpus in ("4-7", "4", ""):
    try:
        found["writes"].append(balance.persist(CPUSet.parse(cpus)))
    except HousekeepingError as exc:
        found["errors"].append(str(exc))
        break
if not found["errors"]:
    for key, write in (("rename", lambda: atomic_write(balance.env_file, b"", durable=True)),
                       ("beside", lambda: open(os.path.join(root, "etc", "default", "grub"), "w"))):
        try:
            write()
            found[key] = "written"
        except OSError as exc:
            found[key] = exc.strerror
print(json.dumps(found))
"""
