"""The crictl backend on real crictl 1.32 output (shared/crictl-samples), replayed through a fake runner."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (ContainerNotFoundError,
                                                                                 ContainerRuntimeError,
                                                                                 RuntimeOutputError,
                                                                                 RuntimeTimeoutError,
                                                                                 RuntimeUnavailableError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroup_paths import qos_from_cgroup
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.crictl import CrictlRuntime, fatal_message
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import CONTAINER_STATES, EXITED, RUNNING
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import SHARED

SAMPLES = os.path.join(SHARED, "crictl-samples")
WEB_UID = "a06b0ffe-e387-47dc-90e2-339fa3fc242a"


def _captures():
    with open(os.path.join(SAMPLES, "captures.json"), encoding="utf-8") as handle:
        return {c["name"]: c for c in json.load(handle)["captures"]}


CAPTURES = _captures()


def _normalize(argv):
    """crictl (urfave/cli) reads --flag=value and --flag value alike; compare in the second form."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            out.extend(arg.split("=", 1))
        else:
            out.append(arg)
    return tuple(out)


class Replay:
    """A command runner answering with the recorded output of the capture whose argv matches."""

    def __init__(self, *names, any_args=False):
        self.any_args = any_args
        self.by_argv = {}
        for name in names or CAPTURES:
            capture = CAPTURES[name]
            self.by_argv[_normalize(capture["command"])] = capture
        self.seen = []

    def __call__(self, argv, timeout):
        self.seen.append(list(argv))
        capture = self.by_argv.get(_normalize(argv))
        if capture is None and self.any_args:  # a dial failure happens before crictl looks at the sub-command
            capture = next(iter(self.by_argv.values()))
        if capture is None:
            raise AssertionError("no recorded output for %r" % (argv,))

        def read(name):
            with open(os.path.join(SAMPLES, capture[name]), encoding="utf-8") as handle:
                return handle.read()
        return capture["exit_code"], read("stdout"), read("stderr")


def _runtime(*names, any_args=False):
    return CrictlRuntime(runner=Replay(*names, any_args=any_args))


def test_list_parses_all_eight_containers_of_ps_all():
    rows = _runtime("ps-all").list_containers()
    assert len(rows) == 8
    assert all(r.state in CONTAINER_STATES for r in rows)
    assert {(r.pod_namespace, r.pod_name, r.name) for r in rows} == {
        ("prod", "web", "main"), ("prod", "web", "sidecar"), ("prod", "api", "app"), ("batch", "report", "app"),
        ("prod", "db-migrate", "init-schema"), ("prod", "db-migrate", "app"), ("prod", "worker", "app")}
    worker = sorted((r.attempt, r.state) for r in rows if r.pod_name == "worker")
    assert worker == [(0, EXITED), (1, RUNNING)]
    assert all(r.created_at > 1_700_000_000 * 10**9 for r in rows)  # createdAt is an ns string in list output


@pytest.mark.parametrize("name, qos, milli, pod, container, attempt", [
    ("inspect-running-guaranteed", "Guaranteed", 2000, "web", "main", 0),
    ("inspect-running-guaranteed-500m", "Guaranteed", 500, "web", "sidecar", 0),
    ("inspect-running-burstable", "Burstable", 250, "api", "app", 0),
    ("inspect-running-besteffort", "BestEffort", 0, "report", "app", 0),
    ("inspect-exited-init", "Burstable", 100, "db-migrate", "init-schema", 0),
    ("inspect-running-attempt1", "Burstable", 200, "worker", "app", 1),
])
def test_inspect_learns_pod_qos_and_request(name, qos, milli, pod, container, attempt):
    cid = CAPTURES[name]["command"][-1]
    info = _runtime(name).inspect(cid)
    assert (info.qos, info.pod_name, info.name, info.attempt) == (qos, pod, container, attempt)
    assert info.requested_milli() == milli
    assert info.cgroup_path.endswith("/" + cid) and info.cgroup_path.startswith("/kubepods/")


def test_inspect_of_the_guaranteed_container_gives_its_cgroup_and_exact_limit():
    info = _runtime("inspect-running-guaranteed").inspect(CAPTURES["inspect-running-guaranteed"]["command"][-1])
    assert info.cgroup_path == "/kubepods/pod%s/%s" % (WEB_UID, info.id)
    assert (info.cpu_shares, info.cpu_quota, info.cpu_period, info.memory_limit) == (2048, 200000, 100000, 268435456)


def test_exited_init_container_has_exit_status_and_finish_time():
    info = _runtime("inspect-exited-init").inspect(CAPTURES["inspect-exited-init"]["command"][-1])
    assert (info.exit_code, info.reason) == (0, "Completed")
    assert info.finished_at > 0
    running = _runtime("inspect-running-guaranteed").inspect(CAPTURES["inspect-running-guaranteed"]["command"][-1])
    assert running.finished_at == 0  # "0001-01-01T00:00:00Z" means not finished


def test_update_sends_an_argument_list_with_global_flags_first():
    runner = Replay("update-cpuset-1")
    cid = CAPTURES["update-cpuset-1"]["command"][-1]
    CrictlRuntime(runner=runner).update(cid, cpuset_cpus=CPUSet.parse("1"))
    assert runner.seen == [["crictl", "update", "--cpuset-cpus=1", cid]]
    seen = []
    CrictlRuntime("/usr/bin/crictl", "unix:///run/x.sock", 5, runner=lambda a, t: seen.append((a, t)) or (0, "", "")
                  ).update(cid, cpuset_cpus=CPUSet.parse("2-3"), cpuset_mems=CPUSet.parse("0"), cpu_quota=-1)
    assert seen[0][0] == ["/usr/bin/crictl", "--runtime-endpoint=unix:///run/x.sock", "--timeout=5s", "update",
                          "--cpuset-cpus=2-3", "--cpuset-mems=0", "--cpu-quota=-1", cid]
    assert seen[0][1] == 21  # crictl retries a refused dial: four timeouts plus a second


@pytest.mark.parametrize("name, error, text", [
    ("error-update-nonexistent-id", ContainerNotFoundError, "not found"),
    ("error-inspect-nonexistent-id", ContainerNotFoundError, "not found"),
    ("error-update-cpuset-out-of-range", ContainerRuntimeError, "not online on this node"),
    ("error-containerd-killed-ps", RuntimeUnavailableError, "connection refused"),
    ("error-containerd-killed-update", RuntimeUnavailableError, "connection refused"),
    ("error-containerd-stopped-ps", RuntimeUnavailableError, "no such file or directory"),
])
def test_errors_map_to_clear_exceptions(name, error, text):
    capture = CAPTURES[name]
    runtime = _runtime(name, any_args="containerd" in name)
    argv = capture["command"][1:]
    with pytest.raises(error, match=text) as info:
        if argv[0] == "update":
            runtime.update(argv[-1], cpuset_cpus=CPUSet.parse(argv[2]))
        elif argv[0] == "inspect":
            runtime.inspect(argv[-1])
        else:
            runtime.list_containers()
    assert "level=fatal" not in str(info.value)
    if error is ContainerNotFoundError:
        assert not isinstance(info.value, RuntimeUnavailableError)


def test_fatal_message_unescapes_go_quoting_and_keeps_the_last_line():
    with open(os.path.join(SAMPLES, "error-update-cpuset-out-of-range.stderr.txt"), encoding="utf-8") as handle:
        text = fatal_message(handle.read())
    assert text.startswith('updating container resources for "e56bd07d')
    assert 'failed to write "7"' in text


@pytest.mark.parametrize("stdout", ["", "not json", "[1, 2]", '{"containers": 3}',
                                    '{"containers": [{"id": "; rm -rf /", "state": "CONTAINER_RUNNING"}]}',
                                    '{"containers": [{"id": "abc", "state": "RUNNING?"}]}'])
def test_garbage_output_is_a_clear_error(stdout):
    runtime = CrictlRuntime(runner=lambda argv, timeout: (0, stdout, ""))
    with pytest.raises(RuntimeOutputError):
        runtime.list_containers()


@pytest.mark.parametrize("bad", ["; rm -rf /", "$(reboot)", "", "-rf", "a b", "x" * 200, "../etc"])
def test_container_ids_are_validated_before_any_command(bad):
    runtime = CrictlRuntime(runner=lambda argv, timeout: pytest.fail("must not run %r" % argv))
    with pytest.raises(RuntimeOutputError, match="invalid container ID"):
        runtime.update(bad, cpuset_cpus=CPUSet.parse("1"))
    with pytest.raises(RuntimeOutputError):
        runtime.inspect(bad)


def test_a_hanging_crictl_is_killed_at_the_timeout(tmp_path):
    script = tmp_path / "crictl"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    runtime = CrictlRuntime(str(script), timeout=0.1)
    started = time.monotonic()
    with pytest.raises(RuntimeTimeoutError, match="did not answer"):
        runtime.list_containers()
    assert time.monotonic() - started < 5


def test_a_missing_crictl_says_so(tmp_path):
    with pytest.raises(RuntimeUnavailableError, match="crictl not found"):
        CrictlRuntime(str(tmp_path / "nope")).list_containers()


def test_version_parses_the_runtime_name():
    assert _runtime("version").version()["RuntimeName"] == "containerd"


@pytest.mark.parametrize("name, parent, qos", [
    ("inspectp-guaranteed", "/kubepods/pod" + WEB_UID, "Guaranteed"),
    ("inspectp-burstable", "/kubepods/burstable/pod", "Burstable"),
    ("inspectp-besteffort", "/kubepods/besteffort/pod", "BestEffort"),
])
def test_inspectp_gives_the_pod_cgroup_parent(name, parent, qos):
    sandbox = CAPTURES[name]["command"][-1]
    found = _runtime(name).pod_cgroup_parent(sandbox)
    assert found.startswith(parent)
    assert qos_from_cgroup(found) == qos


def test_inspectp_gives_the_pods_annotations():
    sandbox = CAPTURES["inspectp-guaranteed"]["command"][-1]
    assert _runtime("inspectp-guaranteed").pod_annotations(sandbox)["kubernetes.io/config.source"] == "api"


def test_qos_falls_back_to_the_pod_sandbox_when_the_status_has_no_spec():
    """A runtime whose verbose info has no OCI spec (CRI-O's layout): one inspectp, then the QoS is known."""
    capture = CAPTURES["inspect-running-guaranteed"]
    doc = json.loads(open(os.path.join(SAMPLES, capture["stdout"]), encoding="utf-8").read())
    del doc["info"]["runtimeSpec"]
    sandbox = CAPTURES["inspectp-guaranteed"]
    replay = Replay("inspectp-guaranteed")

    def runner(argv, timeout):
        if argv[1] == "inspect":
            return 0, json.dumps(doc), ""
        return replay(argv, timeout)
    listed = _runtime("ps-all").list_containers()
    main = next(c for c in listed if c.id == capture["command"][-1])
    assert main.sandbox_id == sandbox["command"][-1]
    info = CrictlRuntime(runner=runner).describe(main)
    assert info.qos == "Guaranteed" and info.requested_milli() == 2000


def crictl_update(gone=(), down=False):
    """A runner that answers ``crictl update`` with many IDs as crictl 1.37 does (cmd/crictl/container.go): each ID
    in turn, stopping at the first it cannot update with ``updating container resources for "ID": <error>``."""
    calls = []

    def runner(argv, timeout):
        ids = [arg for arg in argv if len(arg) == 64]
        calls.append(ids)
        if down:
            return 1, "", 'level=fatal msg="validate service connection: connection refused"\n'
        for cid in ids:
            if cid in gone:
                text = 'updating container resources for \\"%s\\": rpc error: code = NotFound desc = not found' % cid
                return 1, "", 'time="x" level=fatal msg="%s"\n' % text
        return 0, "", ""
    return runner, calls


@pytest.mark.parametrize("count, gone, processes", [
    (1, (), 1), (32, (), 1), (33, (), 2), (70, (), 3),  # 32 IDs a process at most
    (5, (2,), 2),  # the one named is skipped, the ones after it go in the next process
    (5, (0, 4), 2),  # 0 fails the first; 1-3 go in the second, which stops at 4 (the last)
])
def test_update_many_sends_one_process_per_32_and_names_each_containers_outcome(count, gone, processes):
    ids = ["%064x" % n for n in range(count)]
    runner, calls = crictl_update(gone={ids[n] for n in gone})
    outcome = CrictlRuntime(runner=runner).update_many(ids, CPUSet.parse("0,2-3"))
    assert [cid for cid, _error in outcome] == ids and len(calls) == processes
    failed = {cid: error for cid, error in outcome if error is not None}
    assert set(failed) == {ids[n] for n in gone}
    assert all(isinstance(error, ContainerNotFoundError) for error in failed.values())


def test_update_many_against_a_runtime_that_is_down_fails_each_at_once():
    runner, calls = crictl_update(down=True)
    ids = ["%064x" % n for n in range(4)]
    outcome = CrictlRuntime(runner=runner).update_many(ids, CPUSet.parse("1"))
    assert len(calls) == 1 and all(isinstance(error, RuntimeUnavailableError) for _cid, error in outcome)
