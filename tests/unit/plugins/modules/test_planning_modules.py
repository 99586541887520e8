"""cpu_manager_reservation, cpu_manager_kubelet_config, cpu_manager_kubelet_health and cpu_manager_agent_health
in-process: results, check mode, clear failures."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import fingerprint
from ansible_collections.kubecpu.cpu_manager.plugins.modules import (
    cpu_manager_agent_health, cpu_manager_checkpoint, cpu_manager_info, cpu_manager_kubelet_config, cpu_manager_kubelet_health,
    cpu_manager_reservation)

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs, health_url
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_crictl import calls, make_node
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file

WEB_UID = "a06b0ffe-e387-47dc-90e2-339fa3fc242a"

KUBEADM = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd"}


def run(module, args, capsys, check_mode=False):
    with patch_module_args(dict(args, _ansible_check_mode=check_mode)), pytest.raises(SystemExit) as exit_info:
        module.main()
    result = json.loads(capsys.readouterr().out)
    result["rc"] = exit_info.value.code
    return result


@pytest.fixture
def root(tmp_path):
    return fake_sysfs.build(str(tmp_path / "root"), fake_sysfs.machine(2, 2, 2))  # 8 CPUs, core n = {n, n+4}


@pytest.mark.parametrize("args,reserved", [
    ({"count": 2}, "0,4"), ({"count": 1}, "0,4"), ({"count": 1, "whole_cores": False}, "0"),
    ({"per_numa": 1}, "0,2,4,6"), ({"count": 2, "kubelet_version": "1.38"}, "0,4"),
])
def test_reservation(root, capsys, args, reserved):
    result = run(cpu_manager_reservation, dict(args, sysfs_root=root), capsys, check_mode=True)
    assert result["rc"] == 0 and not result["changed"]
    assert result["reserved_cpus"] == reserved


@pytest.mark.parametrize("args,message", [
    ({}, "exactly one of count, per_numa and isolcpus_complement"),
    ({"count": 1, "per_numa": 1}, "mutually exclusive"),
    ({"count": 64}, "cannot reserve 64 CPUs on this node: only 8 CPUs there"),
    ({"count": 1, "policy_options": {"bogus": "true"}}, 'policy_options: unknown CPU Manager Policy option: "bogus"'),
    ({"count": 1, "policy_options": {"full-pcpus-only": ["x"]}}, "must be a string or a boolean"),
    ({"count": 1, "kubelet_version": "1.20"}, "is not one kubecpu knows: 1.35, 1.36, 1.37, 1.38"),
])
def test_reservation_refuses(root, capsys, args, message):
    result = run(cpu_manager_reservation, dict(args, sysfs_root=root), capsys)
    assert result["rc"] == 1 and result["failed"]
    assert message in result["msg"] and "Traceback" not in result["msg"]


def test_kubelet_config_plans_a_migration(root, tmp_path, capsys):
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(encode(CPUState("none")))
    before = state.read_bytes()
    result = run(cpu_manager_kubelet_config, {
        "config": KUBEADM, "kubelet_version": "Kubernetes v1.33.2", "num_reserved": 2,
        "policy_options": {"full-pcpus-only": True, "align-by-socket": "true"},
        "state_path": str(state), "sysfs_root": root}, capsys, check_mode=True)
    assert result["rc"] == 0 and not result["changed"]
    assert result["config"] == dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,4",
                                    cpuManagerPolicyOptions={"full-pcpus-only": "true", "align-by-socket": "true"},
                                    featureGates={"CPUManagerPolicyAlphaOptions": True})
    assert result["migration"]["required"] and not result["migration"]["rejected_now"]
    assert 'configured policy "static" differs from state checkpoint policy "none"' in result["migration"]["reason"]
    assert result["current"] == {"policy": "none", "reserved_cpus": "", "policy_options": {}}
    assert state.read_bytes() == before


def test_kubelet_config_says_the_configuration_a_rollback_goes_back_to(root, tmp_path, capsys):
    """RV(current): the policy, reservation and policy options of the configuration as it is now (what the role's
    rollback writes the previous checkpoint back under), whatever the new one sets."""
    now = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,4",
               cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    result = run(cpu_manager_kubelet_config, {
        "config": now, "kubelet_version": "1.35", "reserved_cpus": "0-1,4-5", "policy_options": {}, "sysfs_root": root,
        "state_path": str(tmp_path / "none")}, capsys, check_mode=True)
    assert result["rc"] == 0, result
    assert result["current"] == {"policy": "static", "reserved_cpus": "0,4",
                                 "policy_options": {"full-pcpus-only": "true"}}
    assert result["config"]["reservedSystemCPUs"] == "0-1,4-5"


@pytest.mark.parametrize("args,message", [
    ({"kubelet_version": "latest"}, 'cannot read a kubelet version from "latest"'),
    ({"num_reserved": -1}, "num_reserved must not be negative"),
    ({"reserved_cpus": "0-"}, 'reserved_cpus: invalid CPU list "0-"'),
    ({"reserved_cpus": "0,99"}, "reserved-cpus: 0,99 is not a subset of online-cpus: 0-7"),
    ({"num_reserved": 0}, "the static policy requires systemreserved.cpu + kubereserved.cpu"),
    ({"config": {"kind": "Pod"}}, 'has kind "Pod", expected KubeletConfiguration'),
])
def test_kubelet_config_refuses(root, tmp_path, capsys, args, message):
    base = {"config": KUBEADM, "kubelet_version": "1.33", "num_reserved": 2, "state_path": str(tmp_path / "absent"),
            "sysfs_root": root}
    result = run(cpu_manager_kubelet_config, dict(base, **args), capsys)
    assert result["rc"] == 1 and message in result["msg"]


def test_kubelet_config_asks_the_kubelet_binary_for_its_version(root, tmp_path, capsys):
    """Without kubelet_version the module runs kubelet_binary --version itself (one module run, not two) and says
    which version it planned for; a binary that is not there fails the node naming it, before anything is read."""
    binary = tmp_path / "kubelet"
    binary.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Kubernetes v1.37.2'\n")
    binary.chmod(0o755)
    base = {"config": KUBEADM, "num_reserved": 2, "state_path": str(tmp_path / "absent"), "sysfs_root": root}
    result = run(cpu_manager_kubelet_config, dict(base, kubelet_binary=str(binary)), capsys, check_mode=True)
    assert result["rc"] == 0 and result["kubelet_version"] == "Kubernetes v1.37.2"
    given = run(cpu_manager_kubelet_config, dict(base, kubelet_binary=str(binary), kubelet_version="1.35"), capsys)
    assert given["kubelet_version"] == "1.35"  # a version given is not asked for
    missing = run(cpu_manager_kubelet_config, dict(base, kubelet_binary=str(tmp_path / "nowhere")), capsys)
    assert missing["rc"] == 1 and "%s --version failed (exit 127)" % (tmp_path / "nowhere") in missing["msg"]
    neither = run(cpu_manager_kubelet_config, base, capsys)
    assert neither["rc"] == 1 and "one of the following is required: kubelet_version, kubelet_binary" in neither["msg"]
    empty = run(cpu_manager_kubelet_config, dict(base, kubelet_version=""), capsys)
    assert empty["rc"] == 1 and empty["msg"] == "kubelet_version is empty and there is no kubelet_binary to ask for it"


STATIC_NOW = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,4")


def test_kubelet_config_rewrites_the_checkpoint_instead_of_a_drain(root, tmp_path, capsys):
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(checkpoint_file("0,4-7", {"pod-a": {"app": "1-2"}, "pod-b": {"db": "3"}}))
    before = state.read_bytes()
    args = {"config": STATIC_NOW, "kubelet_version": "1.35", "reserved_cpus": "0-1,4-5", "state_path": str(state),
            "sysfs_root": root, "state_rewrite": True}
    result = run(cpu_manager_kubelet_config, args, capsys, check_mode=True)
    assert result["rc"] == 0 and result["migration"]["required"]  # the kubelet would refuse today's file
    assert result["moves"] == [{"pod_uid": "pod-a", "container": "app", "cpus_before": "1-2", "cpus_after": "2,6",
                                "reason": "holds reserved CPU(s) 1"}]
    assert json.loads(result["rewritten_state"]) == {"policyName": "static", "defaultCpuSet": "0-1,4-5,7",
                                                     "entries": {"pod-a": {"app": "2,6"}, "pod-b": {"db": "3"}},
                                                     "checksum": json.loads(result["rewritten_state"])["checksum"]}
    assert result["rewrite"] == {"possible": True, "unchanged": False, "unfit": [], "reason": "",
                                 "policy_before": "static"}
    assert state.read_bytes() == before  # only planned
    unchanged = run(cpu_manager_kubelet_config, dict(args, reserved_cpus="0,4"), capsys)
    assert unchanged["rewritten_state"] == before.decode() and unchanged["moves"] == []
    assert unchanged["rewrite"]["unchanged"]
    too_big = run(cpu_manager_kubelet_config, dict(args, reserved_cpus="0-3,4-5"), capsys)
    assert too_big["rewritten_state"] is None and too_big["moves"] == []
    assert [u["container"] for u in too_big["rewrite"]["unfit"]] == ["db"]  # app took the last two CPUs


def test_a_rewrite_planned_before_the_kubelet_pinned_another_pod_is_refused(root, tmp_path, capsys):
    """(No drain 1.) The plan read the checkpoint while the kubelet ran; the kubelet then pinned pod-new onto 2,6.
    Written as planned, pod-new's entry would be gone and its CPUs given to pod-a's moved app: with planned_from
    the write refuses and the file stays the kubelet's."""
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(checkpoint_file("0,2-7", {"pod-a": {"app": "1"}}))
    args = {"config": STATIC_NOW, "kubelet_version": "1.35", "reserved_cpus": "0-1,4-5", "state_path": str(state),
            "sysfs_root": root, "state_rewrite": True}
    plan = run(cpu_manager_kubelet_config, args, capsys, check_mode=True)
    assert plan["planned_from"] == fingerprint(state.read_bytes()) and plan["moves"]
    since = checkpoint_file("0,3-5,7", {"pod-a": {"app": "1"}, "pod-new": {"app": "2,6"}})
    state.write_bytes(since)
    write = {"action": "write", "content": plan["rewritten_state"], "state_path": str(state), "kubelet_stopped": True,
             "reserved_cpus": "0-1,4-5", "sysfs_root": root, "planned_from": plan["planned_from"]}
    refused = run(cpu_manager_checkpoint, write, capsys)
    assert refused["failed"] and "changed since the plan was made" in refused["msg"] and state.read_bytes() == since
    again = run(cpu_manager_kubelet_config, args, capsys, check_mode=True)  # planned again from the file as it is
    done = run(cpu_manager_checkpoint, dict(write, content=again["rewritten_state"],
                                            planned_from=again["planned_from"]), capsys)
    assert done["rc"] == 0 and done["changed"]
    assert json.loads(state.read_text())["entries"]["pod-new"] == {"app": "2,6"}  # the kubelet's pin kept


def test_kubelet_config_adopts_the_running_pods_on_none_to_static(tmp_path, capsys):
    node = make_node(str(tmp_path / "node"))
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(encode(CPUState("none")))
    result = run(cpu_manager_kubelet_config, {
        "config": KUBEADM, "kubelet_version": "Kubernetes v1.33.2", "num_reserved": 1, "state_path": str(state),
        "topology_path": node["topology"], "runtime": "crictl", "crictl_path": node["crictl"],
        "cgroup_root": node["cgroup"], "state_rewrite": True}, capsys)
    assert result["rc"] == 0, result
    assert [(m["container"], m["cpus_before"], m["cpus_after"]) for m in result["moves"]] == [("main", "0-3", "1-2")]
    assert result["checkpoint"]["kubelet"] == "1.35"  # an older kubelet follows 1.35's checkpoint rules
    assert json.loads(result["rewritten_state"])["entries"] == {WEB_UID: {"main": "1-2"}}
    assert [argv for argv in calls(node["log"]) if "update" in argv] == []  # the runtime is only read
    assert len([argv for argv in calls(node["log"]) if "ps" in argv]) == 1  # listed once: adopted and judged


GATES = {"PodLevelResourceManagers": True, "InPlacePodVerticalScalingExclusiveCPUs": True}
V137 = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,8", featureGates=GATES)


def _v137_file():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import write
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version

    state = CPUState("static", CPUSet.parse("0,4-8,12-15"),
                     {"pod-a": {"app": CPUSet.parse("1,9"), "side": CPUSet.parse("2,10")},
                      "pod-b": {"db": CPUSet.parse("3,11")}},
                     pod_entries={"pod-a": CPUSet.parse("1-2,9-10")}, baselines={"pod-a": {"app": "1,9"}})
    return write(state, kubelet_version("1.37", GATES))


@pytest.fixture
def root16(tmp_path):
    return fake_sysfs.build(str(tmp_path / "root16"), fake_sysfs.machine(2, 4, 2))  # 16 CPUs, core n = {n, n+8}


def test_a_1_37_checkpoint_with_pod_entries_and_baselines_is_rewritten_with_nothing_lost(root16, tmp_path, capsys):
    state = tmp_path / "cpu_manager_state"
    state.write_bytes(_v137_file())
    result = run(cpu_manager_kubelet_config, {
        "config": V137, "kubelet_version": "v1.37.2", "reserved_cpus": "0,3,8,11", "state_path": str(state),
        "sysfs_root": root16, "state_rewrite": True}, capsys)
    assert result["rc"] == 0 and result["checkpoint"] == {"kubelet": "1.37", "format": "v4", "feature_gates": GATES}
    assert [(m["pod_uid"], m["container"], m["cpus_before"]) for m in result["moves"]] == [("pod-b", "db", "3,11")]
    written = json.loads(result["rewritten_state"])
    data = json.loads(written["data"])
    assert data["podEntries"] == {"pod-a": {"cpuSet": "1-2,9-10"}}
    assert data["baselines"] == {"pod-a": {"app": {"baseline": "1,9"}}}
    assert data["entries"]["pod-a"] == {"app": "1,9", "side": "2,10"}  # kept byte for byte
    assert set(written) == {"policyName", "defaultCpuSet", "entries", "checksum", "data", "dataChecksum"}
    state.write_text(result["rewritten_state"])
    info = run(cpu_manager_info, {"state_path": str(state), "kubelet_version": "1.37", "feature_gates": GATES,
                                  "reserved_cpus": "0,3,8,11", "sysfs_root": root16, "query_runtime": False}, capsys)
    assert info["rc"] == 0 and info["pod_entries"] == [{"pod_uid": "pod-a", "cpus": "1-2,9-10"}]
    owners = {row["cpu"]: row["owner"] for row in info["cpus"] if row["kind"] == "exclusive"}
    assert owners[1] == "pod-a/app" and owners[9] == "pod-a/app"
    assert info["headroom"]["free_cpus"] == 16 - 4 - 4 - 2  # reserved, pod-a's pod-level set, db's two


def test_the_verdict_follows_the_kubelet_version(root16, tmp_path, capsys):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import write
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version

    state = tmp_path / "cpu_manager_state"
    v3 = CPUState("static", CPUSet.parse("0,4-8,12-15"), {"pod-b": {"db": CPUSet.parse("3,11")}},
                  pod_entries={"pod-a": CPUSet.parse("1-2,9-10")})
    state.write_bytes(write(v3, kubelet_version("1.36", GATES)))
    base = {"config": V137, "reserved_cpus": "0,8", "state_path": str(state), "sysfs_root": root16}
    down = run(cpu_manager_kubelet_config, dict(base, kubelet_version="1.35"), capsys)
    assert down["migration"]["required"] and "checkpoint is corrupted" in down["migration"]["reason"]
    same = run(cpu_manager_kubelet_config, dict(base, kubelet_version="1.36"), capsys)
    assert not same["migration"]["required"] and same["checkpoint"]["format"] == "v3"
    state.write_bytes(_v137_file())
    older = run(cpu_manager_kubelet_config, dict(base, kubelet_version="1.36",
                                                 config=dict(V137, featureGates={})), capsys)
    assert any("pod-level assignments (podEntries of pod-a) are dropped" in note for note in older["notes"])


def test_kubelet_health_waits_then_checks_again_and_fails_naming_the_cause(tmp_path, capsys, monkeypatch):
    """One module run: a stand-in health URL (tests/unit/support/health_url.py) and systemctl on PATH."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "systemctl").write_text("#!/bin/sh\necho 2\n")
    (tools / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tools, __import__("os").environ["PATH"]))
    with health_url.serve() as base:
        ok = run(cpu_manager_kubelet_health, {"url": base + "/healthz", "settle": 0, "timeout": 5}, capsys,
                 check_mode=True)
        assert ok["rc"] == 0 and not ok["changed"] and ok["restarts"] == 2 and ok["url"] == base + "/healthz"
        down = run(cpu_manager_kubelet_health, {"url": base + "/down", "settle": 0, "timeout": 0}, capsys)
        assert down["rc"] == 1 and "%s/down did not answer 200 within 0 s (last: HTTP 500" % base in down["msg"]
        assert down["error_type"] == "HealthError"
        negative = run(cpu_manager_kubelet_health, {"settle": -1}, capsys)
        assert negative["rc"] == 1 and negative["msg"] == "settle must be 0-600 seconds, got -1"
        assert negative["error_type"] == "ConfigError"


def test_agent_health_reads_the_count_then_gates_on_a_fresh_pass(tmp_path, capsys, monkeypatch):
    """One module run each: before the change (only the count read), after it (systemctl on PATH says active, a pass
    rewrote the metrics file meanwhile); a counter that rose fails the node, naming both counts."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "systemctl").write_text('#!/bin/sh\n[ "$1 $2" = "is-active kubecpu-agent" ] && echo active\n')
    (tools / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tools, __import__("os").environ["PATH"]))
    metrics = tmp_path / "kubecpu.prom"
    never = run(cpu_manager_agent_health, {"metrics_path": str(metrics), "active": False, "fresh": False}, capsys)
    assert never["rc"] == 0 and never["errors"] == 0 and never["active"] is None and not never["changed"]
    metrics.write_text("cpu_manager_pinning_errors_total 1\n")  # a pass just now, as the agent writes it
    after = run(cpu_manager_agent_health, {"metrics_path": str(metrics), "errors_before": 1, "timeout": 5}, capsys,
                check_mode=True)
    assert after["rc"] == 0 and after["active"] is True and after["errors"] == 1 and after["fresh"]
    rose = run(cpu_manager_agent_health, {"metrics_path": str(metrics), "errors_before": 0, "timeout": 5}, capsys)
    assert rose["rc"] == 1 and rose["error_type"] == "HealthError"
    assert rose["msg"] == ("cpu_manager_pinning_errors_total rose from 0 to 1 after the change; see journalctl -u "
                           "kubecpu-agent")
    relative = run(cpu_manager_agent_health, {"metrics_path": "kubecpu.prom"}, capsys)
    assert relative["rc"] == 1 and relative["error_type"] == "ConfigError" and "absolute path" in relative["msg"]


def test_kubelet_config_reads_no_gates_from_a_process_only_named_kubelet(root, tmp_path, capsys):
    """Issue 62, finding 4, through the module on this machine's /proc: a real process named kubelet (a script named
    so, run from tmp_path, outside any kubelet.service cgroup) whose command line turns PodLevelResourceManagers on.
    No kubelet_binary: its cgroup alone (this suite may run as root) keeps it from being read. The module plans for
    1.36 as if no kubelet ran (a V2 checkpoint) and its notes name the process."""
    impostor = tmp_path / "kubelet"
    impostor.write_text("#!/bin/sh\nsleep 60\n")
    impostor.chmod(0o755)
    process = subprocess.Popen([str(impostor), "--feature-gates=PodLevelResourceManagers=true"])
    try:
        for _try in range(100):  # until the shell runs the script under its name
            with open("/proc/%d/comm" % process.pid, "rb") as handle:
                if handle.read().strip() == b"kubelet":
                    break
            time.sleep(0.02)
        result = run(cpu_manager_kubelet_config, {
            "config": KUBEADM, "kubelet_version": "1.36", "num_reserved": 2,
            "state_path": str(tmp_path / "absent"), "sysfs_root": root}, capsys)
    finally:
        process.kill()
        process.wait()
    assert result["rc"] == 0, result.get("msg")
    assert not any("PodLevelResourceManagers" in arg for arg in result["kubelet_args"])
    checkpoint = result["checkpoint"]
    assert checkpoint["format"] == "v2" and "PodLevelResourceManagers" not in checkpoint["feature_gates"]
    assert any(note.startswith("PID %d is named kubelet but is not the kubelet of kubelet.service" % process.pid)
               for note in result["notes"])


def systemd_answering(directory, monkeypatch, main_pid, started):
    """A ``systemctl`` first on PATH that answers ``show`` as systemd 252 does for a unit whose main process is
    ``main_pid``, started at ``started`` (these hosts have no systemd as PID 1)."""
    path = os.path.join(str(directory), "systemctl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\nprintf 'MainPID=%d\\nExecMainStartTimestamp=@%d\\nNeedDaemonReload=no\\n'\n"
                     % (main_pid, started))
    os.chmod(path, 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (directory, os.environ["PATH"]))


@pytest.mark.parametrize("written,running,predates", [
    ("before", True, False),  # the kubelet was (re)started onto its file
    ("after", True, True),  # a run cut off between writing the file and the restart: the role restarts it
    ("stopped", False, False),  # a run cut off with the kubelet stopped: the role starts it
])
def test_kubelet_config_says_whether_the_kubelet_runs_and_on_its_files_configuration(
        root, tmp_path, capsys, monkeypatch, written, running, predates):
    started = int(time.time()) - 100
    config = tmp_path / "config.yaml"
    config.write_text("kind: KubeletConfiguration\n")
    when = started + (50 if written == "after" else -60)
    os.utime(config, (when, when))
    systemd_answering(tmp_path, monkeypatch, 4242 if running else 0, started)
    (tmp_path / "cpu_manager_state.drained").write_text("the kubelet role drained this node\n")
    result = run(cpu_manager_kubelet_config, {
        "config": KUBEADM, "config_path": str(config), "kubelet_version": "1.35", "num_reserved": 1,
        "kubelet_args": [], "state_path": str(tmp_path / "cpu_manager_state"), "sysfs_root": root}, capsys)
    assert result["rc"] == 0, result
    assert (result["kubelet_running"], result["kubelet_predates_config"]) == (running, predates)
    assert result["drained"]  # the role's note of a drain a cut run did not follow with its uncordon
