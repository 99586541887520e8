"""The kubelet configuration planner: validation per kubelet version (KUBELET_CONFIG.md sections 1-3), the new
configuration (only the managed keys change), and the state-file verdict that drives the safe migration (section 4).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import tempfile

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubecpuError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import (
    CPU_OPTION_HISTORY, flag_gates)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import (
    ConfigError, Desired, ask_kubelet_version, plan_change)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_process import (
    KUBELET_UNIT, MAX_CGROUP_BYTES, MAX_CMDLINE_BYTES, MAX_COMM_BYTES, MAX_STATUS_BYTES, find_kubelet, kubelet_unit,
    running_kubelet_args)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import given, settings
from hypothesis import strategies as st

STATE = "/var/lib/kubelet/cpu_manager_state"
# 2 sockets x 4 cores x 2 threads, one NUMA node per socket; CPU n and n+8 are the two threads of core n
TOPO = generated(2, 4, 2)
SMALL = generated(1, 2, 1)  # 2 single-thread CPUs, like the CI machines
KUBEADM = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
           "cgroupDriver": "systemd", "clusterDNS": ["10.96.0.10"], "authentication": {"anonymous": {"enabled": False}},
           "evictionHard": {"memory.available": "100Mi"}, "rotateCertificates": True}


def plan(desired, current=None, version="1.33", state=None, topo=TOPO):
    return plan_change(KUBEADM if current is None else current, desired, topo, version, state=state, state_path=STATE)


def state_bytes(policy, default, entries=None):
    state = CPUState(policy, CPUSet.parse(default))
    for (pod, name), cpus in (entries or {}).items():
        state.set(pod, name, CPUSet.parse(cpus))
    return encode(state)


# The maturity table of KUBELET_CONFIG.md section 2, row by row (None: the kubelet does not know it).


# Gates the options need, per version: (options, version, expected featureGates additions)
GATES = [
    ({"full-pcpus-only": "true"}, "1.22", {"CPUManagerPolicyOptions": True}),
    ({"full-pcpus-only": "true"}, "1.28", {}),
    ({"full-pcpus-only": "true"}, "1.33", {}),
    ({"distribute-cpus-across-numa": "true"}, "1.30", {"CPUManagerPolicyAlphaOptions": True}),
    ({"distribute-cpus-across-numa": "true"}, "1.33", {}),
    ({"align-by-socket": "true"}, "1.33", {"CPUManagerPolicyAlphaOptions": True}),
    ({"strict-cpu-reservation": "true"}, "1.32", {"CPUManagerPolicyAlphaOptions": True}),
    ({"strict-cpu-reservation": "true"}, "1.35", {}),
    ({"prefer-align-cpus-by-uncorecache": "true"}, "1.33", {"CPUManagerPolicyAlphaOptions": True}),
    ({"prefer-align-cpus-by-uncorecache": "true"}, "1.34", {}),
]


@pytest.mark.parametrize("options,version,gates", GATES)
def test_feature_gates(options, version, gates):
    change = plan(Desired(policy_options=options, num_reserved=2), version=version)
    assert change.feature_gates == gates
    assert change.config.get("featureGates", {}) == gates


def test_beta_gate_turned_off_in_the_file_is_turned_back_on():
    current = dict(KUBEADM, featureGates={"CPUManagerPolicyBetaOptions": False, "SomethingElse": True})
    change = plan(Desired(policy_options={"distribute-cpus-across-numa": "true"}, num_reserved=2), current)
    assert change.config["featureGates"] == {"CPUManagerPolicyBetaOptions": True, "SomethingElse": True}


REFUSED = [
    (Desired(policy_options={"bogus": "true"}, num_reserved=2), "1.33", 'unknown CPU Manager Policy option: "bogus"'),
    (Desired(policy_options={"strict-cpu-reservation": "true"}, num_reserved=2), "1.31",
     'unknown CPU Manager Policy option: "strict-cpu-reservation" (kubelet 1.31 does not know it; it exists from 1.32)'),
    (Desired(policy_options={"full-pcpus-only": "yes"}, num_reserved=2), "1.33",
     'bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid syntax'),
    (Desired(policy_options={"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}, num_reserved=2),
     "1.33", "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"),
    (Desired(policy="none", policy_options={"full-pcpus-only": "true"}), "1.33",
     "None policy: received unsupported options=map[full-pcpus-only:true]"),
    (Desired(), "1.33", "[cpumanager] unable to determine reserved CPU resources for static policy (set "
                        "reserved_cpus or num_reserved)"),  # no reservation named: what the real kubelet 1.35-1.37 says
    (Desired(num_reserved=0), "1.33", "the static policy requires"),
    (Desired(reserved_cpus=CPUSet.parse("0,99")), "1.33", "reserved-cpus: 0,99 is not a subset of online-cpus: 0-15"),
    (Desired(reserved_cpus=CPUSet.parse("0,1"), num_reserved=3), "1.33", "holds 2 CPUs but num_reserved is 3"),
    (Desired(num_reserved=2, policy_options={"align-by-socket": "true"}, topology_manager_policy="single-numa-node"),
     "1.33", "Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option"),
    (Desired(num_reserved=2, reconcile_period="ten seconds"), "1.33", "is not a duration"),
    (Desired(num_reserved=2, topology_manager_policy_options={"prefer-closest-numa-nodes": "true"}), "1.25",
     'unknown Topology Manager Policy option: "prefer-closest-numa-nodes"'),
    (Desired(num_reserved=2, topology_manager_policy_options={"max-allowable-numa-nodes": "4"}), "1.33",
     'the minimum value of "max-allowable-numa-nodes" should not be less than 8'),
    (Desired(num_reserved=2, topology_manager_policy_options={"max-allowable-numa-nodes": "x"}), "1.33",
     'strconv.Atoi: parsing "x": invalid syntax'),
]


@pytest.mark.parametrize("reserved", [{"kubeReserved": {"cpu": "0"}}, {"systemReserved": {"cpu": "0m"}},
                                      {"kubeReserved": {"cpu": "0"}, "systemReserved": {"memory": "1Gi"}}])
def test_a_reservation_named_but_zero_is_the_kubelets_other_refusal(reserved):
    with pytest.raises(ConfigError) as info:
        plan(Desired(), dict(KUBEADM, **reserved))
    assert str(info.value) == ("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be "
                               "greater than zero (set reserved_cpus or num_reserved)")


def test_a_reservation_without_cpu_is_none_to_the_kubelet():
    with pytest.raises(ConfigError, match=r"unable to determine reserved CPU resources for static policy"):
        plan(Desired(), dict(KUBEADM, kubeReserved={"memory": "1Gi"}, systemReserved={"memory": "1Gi"}))


@pytest.mark.parametrize("desired,version,message", REFUSED)
def test_refused(desired, version, message):
    with pytest.raises(ConfigError) as info:
        plan(desired, version=version)
    assert message in str(info.value)


@pytest.mark.parametrize("gates,version,message", [
    ({"CPUManager": True}, "1.33", "unrecognized feature gate: CPUManager"),
    ({"CPUManagerPolicyOptions": False}, "1.33",
     "cannot set feature gate CPUManagerPolicyOptions to false, feature is locked to true"),
    ({"CPUManager": False}, "1.28", "cannot set feature gate CPUManager to false, feature is locked to true"),
    ({"CPUManagerPolicyBetaOptions": "yes"}, "1.33", "featureGates.CPUManagerPolicyBetaOptions must be true or false"),
])
def test_refused_gates_in_the_file(gates, version, message):
    with pytest.raises(ConfigError, match=message):
        plan(Desired(num_reserved=2), dict(KUBEADM, featureGates=gates), version=version)


def test_reserved_cgroups_refuse_a_cpu_list():
    with pytest.raises(ConfigError, match="can't use reservedSystemCPUs"):
        plan(Desired(num_reserved=2), dict(KUBEADM, systemReservedCgroup="/system.slice"))


def test_align_by_socket_on_hardware_with_more_sockets_than_numa_nodes():
    with pytest.raises(ConfigError, match="Align by socket is not compatible"):
        plan(Desired(num_reserved=2, policy_options={"align-by-socket": "true"}), topo=generated(2, 2, 1, 0))


def test_only_managed_keys_change():
    change = plan(Desired(num_reserved=2, policy_options={"full-pcpus-only": True}, reconcile_period="5s",
                          topology_manager_policy="best-effort", topology_manager_scope="pod"))
    for key, value in KUBEADM.items():
        assert change.config[key] == value
    assert change.changed_keys == ["cpuManagerPolicy", "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod",
                                   "reservedSystemCPUs", "topologyManagerPolicy", "topologyManagerScope"]
    assert change.config["cpuManagerPolicyOptions"] == {"full-pcpus-only": "true"}
    assert change.config["reservedSystemCPUs"] == "0,8"  # the kubelet's placement: one whole core
    assert change.reserved_source == "planner"


def test_second_plan_of_the_result_changes_nothing():
    first = plan(Desired(num_reserved=2, policy_options={"full-pcpus-only": "true"}))
    again = plan(Desired(num_reserved=2, policy_options={"full-pcpus-only": "true"}), first.config)
    assert again.changed_keys == []
    assert again.config == first.config


def test_kept_values_when_not_asked():
    current = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,8", cpuManagerReconcilePeriod="10s",
                   cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    change = plan(Desired(), current)
    assert change.changed_keys == []
    assert change.reserved == CPUSet.parse("0,8") and change.reserved_source == "config"


def test_reservation_from_kube_and_system_reserved():
    current = dict(KUBEADM, kubeReserved={"cpu": "100m"}, systemReserved={"cpu": "500m"})
    change = plan(Desired(), current)
    assert change.reserved == CPUSet.parse("0") and change.reserved_source == "kubeReserved+systemReserved"
    assert "reservedSystemCPUs" not in change.config


def test_empty_options_remove_the_key():
    current = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,8",
                   cpuManagerPolicyOptions={"full-pcpus-only": "true"})
    change = plan(Desired(policy_options={}), current)
    assert "cpuManagerPolicyOptions" not in change.config and change.changed_keys == ["cpuManagerPolicyOptions"]


# The migration verdict: does the kubelet reject its state after the change? (KUBELET_CONFIG.md section 4)
STATIC_CFG = dict(KUBEADM, cpuManagerPolicy="static", reservedSystemCPUs="0,8")
VERDICTS = [
    ("no state file", KUBEADM, Desired(num_reserved=2), None, None),
    ("none to static", KUBEADM, Desired(num_reserved=2), state_bytes("none", ""),
     'configured policy "static" differs from state checkpoint policy "none"'),
    ("static to none", STATIC_CFG, Desired(policy="none"), state_bytes("static", "0-15"),
     'configured policy "none" differs from state checkpoint policy "static"'),
    ("option toggle accepted", STATIC_CFG, Desired(policy_options={"full-pcpus-only": "true"}),
     state_bytes("static", "0-3,8-11", {("pod", "c"): "4-7,12-15"}), None),
    ("reserved CPUs now pinned", STATIC_CFG, Desired(reserved_cpus=CPUSet.parse("0,4,8,12")),
     state_bytes("static", "0-3,8-11", {("pod", "c"): "4-7,12-15"}),
     'not all reserved cpus: "0,4,8,12" are present in defaultCpuSet: "0-3,8-11"'),
    ("reservation moved within the shared pool", STATIC_CFG, Desired(reserved_cpus=CPUSet.parse("1,9")),
     state_bytes("static", "0-3,8-11", {("pod", "c"): "4-7,12-15"}), None),
    ("strict turned on", STATIC_CFG, Desired(policy_options={"strict-cpu-reservation": "true"}),
     state_bytes("static", "0-15"), 'some of strictly reserved cpus: "0,8" are present in defaultCpuSet: "0-15"'),
    ("CPU set changed", STATIC_CFG, Desired(), state_bytes("static", "0-31"),
     'current set of available CPUs "0-15" doesn\'t match with CPUs in state "0-31"'),
    ("corrupt file", STATIC_CFG, Desired(), b'{"policyName":"static","checksum":1}', "checkpoint is corrupted"),
    # (No drain 2.) The old checkpoint still restores, but the restarted kubelet admits the running pods again with
    # hints from their CPUs alone: a container across both NUMA nodes is rejected by single-numa-node and restricted
    ("topology manager none to single-numa-node, a container across NUMA nodes", STATIC_CFG,
     Desired(topology_manager_policy="single-numa-node"),
     state_bytes("static", "0,2-4,6-8,10-12,14-15", {("pod-x", "app"): "1,5,9,13"}),
     "pod pod-x container app: Resources cannot be allocated with Topology locality: topology manager policy "
     "single-numa-node, scope container, rejects CPUs 1,5,9,13 on NUMA node(s) [0, 1]"),
    ("topology manager none to restricted, a container across NUMA nodes", STATIC_CFG,
     Desired(topology_manager_policy="restricted"),
     state_bytes("static", "0,2-4,6-8,10-12,14-15", {("pod-x", "app"): "1,5,9,13"}),
     "topology manager policy restricted, scope container, rejects CPUs 1,5,9,13"),
    ("topology manager none to best-effort admits it", STATIC_CFG, Desired(topology_manager_policy="best-effort"),
     state_bytes("static", "0,2-4,6-8,10-12,14-15", {("pod-x", "app"): "1,5,9,13"}), None),
    ("single-numa-node, the container on one NUMA node", STATIC_CFG,
     Desired(topology_manager_policy="single-numa-node"),
     state_bytes("static", "0,3-8,11-15", {("pod-x", "app"): "1-2,9-10"}), None),
    ("the pod scope: two containers on two NUMA nodes", STATIC_CFG,
     Desired(topology_manager_policy="single-numa-node", topology_manager_scope="pod"),
     state_bytes("static", "0,2-4,6-8,10-12,14-15", {("pod-x", "a"): "1,9", ("pod-x", "b"): "5,13"}),
     "pod pod-x container a, b: Resources cannot be allocated with Topology locality: topology manager policy "
     "single-numa-node, scope pod"),
]


@pytest.mark.parametrize("name,current,desired,state,reason", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_migration_verdict(name, current, desired, state, reason):
    change = plan(desired, current, state=state)
    assert change.migration_required == (reason is not None)
    if reason:
        assert reason in change.verdict_after


def test_policy_change_message_is_the_kubelets():
    change = plan(Desired(num_reserved=2), KUBEADM, state=state_bytes("none", ""))
    assert change.verdict_after == (
        'could not restore state from checkpoint: configured policy "static" differs from state checkpoint policy '
        '"none", please drain this node and delete the CPU manager checkpoint file "%s" before restarting Kubelet'
        % STATE)
    assert change.verdict_before is None  # the kubelet is healthy today


def test_a_crash_looping_kubelet_is_seen():
    change = plan(Desired(), STATIC_CFG, state=state_bytes("none", ""))
    assert change.changed_keys == [] and change.verdict_before is not None and change.migration_required


# The reservation planner


@settings(max_examples=80, deadline=None)
@given(options=st.dictionaries(st.sampled_from(sorted(CPU_OPTION_HISTORY) + ["bogus"]), st.sampled_from(["true", "false", "x"]),
                               max_size=3),
       minor=st.integers(20, 37), num=st.integers(0, 20))
def test_planner_never_raises_anything_but_domain_errors(options, minor, num):
    """Any combination either plans or fails with a KubecpuError; a successful plan is idempotent."""
    desired = Desired(policy_options=options, num_reserved=num)
    try:
        change = plan(desired, version="1.%d" % minor)
    except KubecpuError:
        return
    assert plan(desired, change.config, version="1.%d" % minor).changed_keys == []


def test_gates_on_the_kubelets_command_line_count_over_the_files():
    """(No drain: the format.) A 1.36 kubelet started with --feature-gates=PodLevelResourceManagers=true writes V3
    checkpoints although its file says nothing of it; a gate the configuration needs that the command line turns
    off is refused, naming the flag."""
    file_only = plan(Desired(num_reserved=2), version="1.36")
    assert file_only.kubelet.writes == "v2"
    flagged = plan_change(KUBEADM, Desired(num_reserved=2), TOPO, "1.36", state=None, state_path=STATE,
                          flags={"PodLevelResourceManagers": True})
    assert flagged.kubelet.writes == "v3" and "featureGates" not in flagged.config  # the file is left alone
    with pytest.raises(ConfigError, match="the kubelet's command line sets --feature-gates=CPUManagerPolicyAlphaOptions"
                                          "=false, which this configuration needs on"):
        plan_change(KUBEADM, Desired(num_reserved=2, policy_options={"distribute-cpus-across-cores": "true"}), TOPO,
                    "1.36", state=None, state_path=STATE, flags={"CPUManagerPolicyAlphaOptions": False})


@pytest.mark.parametrize("args, named", [
    (["--config=/var/lib/kubelet/config.yaml", "--cpu-manager-policy=none"], "--cpu-manager-policy=none"),
    (["--topology-manager-policy", "single-numa-node"], "--topology-manager-policy=single-numa-node"),
    (["--topology-manager-scope=pod", "--reserved-cpus=0-1"], "--topology-manager-scope=pod, --reserved-cpus=0-1"),
    (["--cpu-manager-policy-options=full-pcpus-only=true"], "--cpu-manager-policy-options=full-pcpus-only=true"),
    (["--kube-reserved=cpu=1"], "--kube-reserved=cpu=1"),
    (["--topology-manager-policy-options=prefer-closest-numa-nodes=true"], "--topology-manager-policy-options"),
])
def test_cpu_and_topology_manager_flags_override_the_file_and_are_refused_not_ignored(args, named):
    """(Issue 63, suspected: confirmed.) On the kubelet's command line a flag overrides its key in the configuration
    file, and the planner read only the file: it planned (and rewrote the checkpoint) for a configuration the kubelet
    does not run. A flag that sets what kubecpu plans is refused, named."""
    with pytest.raises(ConfigError, match="the kubelet's command line sets %s" % re.escape(named)):
        plan_change(STATIC_CFG, Desired(num_reserved=2), TOPO, "1.35", state=None, state_path=STATE, args=args)
    others = ["--config=/var/lib/kubelet/config.yaml", "--feature-gates=CPUManagerPolicyAlphaOptions=true",
              "--node-ip", "10.0.0.1", "--v=2"]
    assert plan_change(STATIC_CFG, Desired(num_reserved=2), TOPO, "1.35", state=None, state_path=STATE,
                       args=others).config["reservedSystemCPUs"] == "0,8"


def test_the_migration_verdict_counts_the_memory_the_memory_manager_pinned(tmp_path):
    """(Issue 63, case 2.) Turning single-numa-node on where pod-m's CPUs are on NUMA 0 and its memory on NUMA 1: the
    restarted kubelet's hints disagree and it rejects pod-m, so the change needs the rewrite."""
    path = tmp_path / "cpu_manager_state"
    (tmp_path / "memory_manager_state").write_text(json.dumps({"policyName": "Static", "entries": {
        "pod-m": {"app": [{"numaAffinity": [1], "type": "memory", "size": 1073741824}]}}}))
    data = state_bytes("static", "0,3-8,11-15", {("pod-m", "app"): "1-2,9-10"})
    change = plan_change(STATIC_CFG, Desired(topology_manager_policy="single-numa-node"), TOPO, "1.35", state=data,
                         state_path=str(path))
    assert change.migration_required and "its memory pinned to NUMA node(s) [1]" in change.verdict_after
    (tmp_path / "memory_manager_state").unlink()
    assert not plan_change(STATIC_CFG, Desired(topology_manager_policy="single-numa-node"), TOPO, "1.35", state=data,
                           state_path=str(path)).migration_required


# The running kubelet, as its unit identifies it (issue 62, finding 4): fake /proc trees in a temporary directory,
# one directory per process with the files the kernel shows.
V2 = "0::/system.slice/kubelet.service\n"
V1 = ("12:pids:/system.slice/kubelet.service\n4:cpu,cpuacct:/system.slice/kubelet.service\n"
      "1:name=systemd:/system.slice/kubelet.service\n")
HYBRID = V1 + V2
USERS = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/kubelet.service\n"  # systemd-run --user --unit
SESSION = "0::/user.slice/user-1000.slice/session-3.scope\n"
V1_USERS = "12:pids:/system.slice/kubelet.service\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n"
HYBRID_SPLIT = V1 + USERS  # every systemd hierarchy must name the unit
REAL_ARGS = ["--config=/var/lib/kubelet/config.yaml", "--container-runtime-endpoint=unix:///run/containerd.sock"]
HOSTILE_GATES = "--feature-gates=CPUManagerPolicyOptions=false,PodLevelResourceManagers=true"


class FakeProc:
    """A /proc tree below ``root`` and a kubelet binary on disk (``binary``; ``link``: a symlink to it, as
    alternatives and /usr/local/bin installs make)."""

    def __init__(self, root):
        self.proc = root / "proc"
        self.proc.mkdir()
        (root / "opt").mkdir()
        self.binary = os.path.realpath(str(root / "opt" / "kubelet"))
        with open(self.binary, "wb") as handle:
            handle.write(b"\x7fELF")
        self.link = str(root / "opt" / "kubelet-link")
        os.symlink(self.binary, self.link)

    def add(self, pid, *, comm=b"kubelet", uid=(0, 0), cgroup=V2, exe=None, args=None, omit=()):
        args = REAL_ARGS if args is None else args
        base = self.proc / str(pid)
        base.mkdir()
        exe = self.binary if exe is None else exe
        files = {"comm": comm + b"\n",
                 "status": ("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t1\n"
                            "Uid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\n"
                            % (comm.decode(), pid, pid, uid[0], uid[1], uid[1], uid[1])).encode(),
                 "cgroup": cgroup.encode() if isinstance(cgroup, str) else cgroup,
                 "cmdline": b"\0".join(arg.encode() for arg in [exe, *args]) + b"\0"}
        for name, data in files.items():
            if name not in omit:
                (base / name).write_bytes(data)
        if "exe" not in omit:
            os.symlink(exe, str(base / "exe"))
        return self

    def search(self, binary="told", unit=KUBELET_UNIT):
        return find_kubelet(str(self.proc), unit=unit, binary=self.binary if binary == "told" else binary)


@pytest.fixture
def node(tmp_path):
    return FakeProc(tmp_path)


# (case, the processes as FakeProc.add keywords by PID, the PID chosen, {PID: words of why it is not the kubelet})
IDENTITY = [
    ("the real kubelet", {1234: {}}, 1234, {}),
    ("cgroup v1 (name=systemd)", {1234: {"cgroup": V1}}, 1234, {}),
    ("cgroup v1 and v2 (hybrid)", {1234: {"cgroup": HYBRID}}, 1234, {}),
    ("a unit in the root slice", {1234: {"cgroup": "0::/kubelet.service\n"}}, 1234, {}),
    ("its binary replaced by an upgrade while it runs", {1234: {"exe": "{binary} (deleted)"}}, 1234, {}),
    ("a lower PID owned by uid 1000", {300: {"uid": (1000, 1000), "args": [HOSTILE_GATES]}, 1234: {}}, 1234,
     {300: "runs as uid 1000 (effective 1000), not root"}),
    ("root only in its effective uid (setuid)", {300: {"uid": (1000, 0), "args": [HOSTILE_GATES]}, 1234: {}}, 1234,
     {300: "runs as uid 1000 (effective 0)"}),
    ("root only in its real uid", {300: {"uid": (0, 1000), "args": [HOSTILE_GATES]}, 1234: {}}, 1234,
     {300: "runs as uid 0 (effective 1000)"}),
    ("a user's own kubelet.service (user.slice, user@1000.service)", {300: {"cgroup": USERS}, 1234: {}}, 1234,
     {300: "its cgroup is /user.slice/user-1000.slice/user@1000.service/app.slice/kubelet.service, not "
           "kubelet.service"}),
    ("a user's login session", {300: {"cgroup": SESSION}, 1234: {}}, 1234, {300: "its cgroup is /user.slice/"}),
    ("v1: a user's session in name=systemd", {300: {"cgroup": V1_USERS}, 1234: {}}, 1234, {300: "session-3.scope"}),
    ("hybrid: the unified hierarchy says a user's", {300: {"cgroup": HYBRID_SPLIT}, 1234: {}}, 1234,
     {300: "user@1000.service"}),
    ("another unit", {300: {"cgroup": "0::/system.slice/cron.service\n"}}, None, {300: "cron.service, not"}),
    ("a unit whose name ends like the kubelet's", {300: {"cgroup": "0::/system.slice/my-kubelet.service\n"}}, None,
     {300: "my-kubelet.service"}),
    ("a cgroup below the unit's", {300: {"cgroup": "0::/system.slice/kubelet.service/x\n"}}, None, {300: "/x,"}),
    ("a slice named like the unit", {300: {"cgroup": "0::/kubelet.service/kubelet.service\n"}}, None,
     {300: "its cgroup"}),
    ("no systemd hierarchy", {300: {"cgroup": "4:cpu:/system.slice/kubelet.service\n"}}, None,
     {300: "names no systemd hierarchy"}),
    ("its exe is /tmp/kubelet", {300: {"exe": "/tmp/kubelet", "args": [HOSTILE_GATES]}, 1234: {}}, 1234,
     {300: "its executable is /tmp/kubelet, not {binary}"}),
    ("another binary named kubelet (deleted)", {300: {"exe": "/tmp/kubelet (deleted)"}}, None,
     {300: "its executable is /tmp/kubelet (deleted)"}),
    ("vanished before its status is read", {300: {"omit": ("status",)}}, None, {}),
    ("vanished: its directory is there, its files are gone", {300: {"omit": ("cgroup", "status", "exe", "cmdline")},
                                                              1234: {}}, 1234, {}),
    ("vanished between the checks and the command line", {300: {"omit": ("cmdline",)}, 1234: {}}, 1234, {}),
    ("vanished before its executable is read", {300: {"omit": ("exe",)}}, None, {}),
    ("oversized cgroup file", {300: {"cgroup": V2 + "#" * MAX_CGROUP_BYTES}, 1234: {}}, 1234,
     {300: "its cgroup is larger than %d bytes" % MAX_CGROUP_BYTES}),
    ("another process's name", {300: {"comm": b"kubelet2"}, 301: {"comm": b"bash"}}, None, {}),
    ("an oversized name is no kubelet's", {300: {"comm": b"kubelet" + b" " * MAX_COMM_BYTES}}, None, {}),
]


@pytest.mark.parametrize("case,processes,chosen,refused", IDENTITY, ids=[case[0] for case in IDENTITY])
def test_the_kubelet_is_the_process_its_unit_runs_as_root_from_its_binary(node, case, processes, chosen, refused):
    for pid, how in processes.items():
        node.add(pid, **{key: value.format(binary=node.binary) if isinstance(value, str) and key == "exe" else value
                         for key, value in how.items()})
    found = node.search()
    assert (found.chosen.pid if found.chosen else None) == chosen
    assert found.chosen is None or found.chosen.args == REAL_ARGS
    assert sorted(pid for pid, _why in found.refused) == sorted(refused)
    for pid, why in found.refused:
        assert refused[pid].format(binary=node.binary) in why
        assert any(("PID %d is named kubelet but is not the kubelet of kubelet.service" % pid) in note
                   and "its command line is not read" in note for note in found.notes())
    assert running_kubelet_args(str(node.proc), binary=node.binary) == (REAL_ARGS if chosen else [])


def test_an_oversized_status_file_is_no_kubelets(node):
    node.add(300)
    (node.proc / "300" / "status").write_bytes(b"Uid:\t0\t0\t0\t0\n" + b"#" * MAX_STATUS_BYTES)
    found = node.search()
    assert found.chosen is None and found.refused == [(300, "its status is larger than %d bytes" % MAX_STATUS_BYTES)]


@pytest.mark.parametrize("line", ["Uid:\t0\n", "Uid:\t0\tx\t0\t0\n", "Uid:\n", "Gid:\t0\t0\t0\t0\n"])
def test_a_status_without_a_readable_uid_line_is_no_kubelets(node, line):
    node.add(300)
    (node.proc / "300" / "status").write_text("Name:\tkubelet\n" + line)
    found = node.search()
    assert found.chosen is None and "Uid line" in found.refused[0][1]


def test_the_kubelets_command_line_beyond_the_limit_is_refused_not_cut(node):
    """A command line cut at the limit could lose a --feature-gates flag: the module asks for kubelet_args."""
    node.add(1234, args=["--x=" + "y" * MAX_CMDLINE_BYTES])
    with pytest.raises(ConfigError, match=r"the kubelet of kubelet.service \(PID 1234\) has a command line of more "
                                          r"than 1048576 bytes: give kubelet_args"):
        node.search()


def test_the_binary_is_compared_with_its_links_resolved(node):
    node.add(1234)
    assert node.search(binary=node.link).chosen.pid == 1234


@pytest.mark.parametrize("binary,chosen", [(None, 1234), ("kubelet", None), ("relative/kubelet", None)])
def test_the_executable_is_checked_only_against_a_binary_the_module_is_told(node, binary, chosen):
    """Not told one (kubelet_version given, no kubelet_binary): the unit and root identify it. Told a name found
    nowhere on the node: no executable can be checked against it, so none is the kubelet (and the note says so)."""
    node.add(1234, exe="/usr/local/bin/kubelet")
    found = node.search(binary=binary)
    assert (found.chosen.pid if found.chosen else None) == chosen
    if chosen is None:
        assert found.refused == [(1234, "kubelet_binary %r is no path found on this node: its executable cannot be "
                                        "checked" % binary)]


def test_the_unit_the_module_is_told_identifies_the_kubelet(node):
    node.add(1234, cgroup="0::/system.slice/snap.kubelite.daemon.service\n")
    assert node.search(unit="snap.kubelite.daemon.service").chosen.pid == 1234
    assert node.search().chosen is None


@pytest.mark.parametrize("service,unit", [("kubelet", "kubelet.service"), ("kubelet.service", "kubelet.service"),
                                          ("k3s-agent", "k3s-agent.service"), ("kubelet.scope", "kubelet.scope")])
def test_the_kubelet_service_is_a_unit_name(service, unit):
    assert kubelet_unit(service) == unit


@pytest.mark.parametrize("service", ["", "-kubelet", "kube let", "kubelet/x", "../kubelet"])
def test_a_kubelet_service_that_is_no_unit_name_is_refused(service):
    with pytest.raises(ConfigError, match=r"kubelet_service .*: not a systemd unit name"):
        kubelet_unit(service)


def test_several_kubelets_that_agree_the_lowest_is_read_and_the_notes_say_why(node):
    node.add(1234).add(2345)
    found = node.search()
    assert found.chosen == (1234, REAL_ARGS) and found.passed == [1234, 2345]
    assert found.notes() == ["PIDs 1234, 2345 all pass as the kubelet of kubelet.service with the same command line: "
                             "PID 1234 (the lowest) is read"]


def test_several_kubelets_that_disagree_are_refused(node):
    node.add(1234).add(2345, args=REAL_ARGS + ["--feature-gates=PodLevelResourceManagers=true"])
    with pytest.raises(ConfigError, match=r"PIDs 1234, 2345 all pass as the kubelet of kubelet.service \(root, in its "
                                          r"cgroup, running .*\) with different command lines: .*give kubelet_args"):
        node.search()


def test_no_proc_is_no_kubelet(tmp_path):
    assert running_kubelet_args(str(tmp_path / "nonexistent")) == []


@pytest.mark.parametrize("real", [True, False], ids=["beside the real kubelet", "alone"])
def test_impostor_named_kubelet_supplies_no_feature_gates(node, real):
    """Issue 62, finding 4: a local user's process named kubelet (lower PID, uid 1000, in its own session) with
    CPUManagerPolicyOptions=false and PodLevelResourceManagers=true. The gates the module lays over the file's
    (flag_gates of the running kubelet's command line, as plan() does) are the real kubelet's, none here: on 1.36 the
    node is neither refused nor given a V3 checkpoint, and the gates are the configuration's."""
    node.add(300, uid=(1000, 1000), cgroup=SESSION, exe="/tmp/kubelet", args=[HOSTILE_GATES])
    if real:
        node.add(1234)
    config = dict(KUBEADM, featureGates={"CPUManagerPolicyAlphaOptions": True})
    search = node.search()
    flags = flag_gates(running_kubelet_args(str(node.proc), binary=node.binary))
    assert flags == {}
    change = plan_change(config, Desired(num_reserved=2, policy_options={"full-pcpus-only": "true"}), TOPO, "1.36",
                         state=None, state_path=STATE, flags=flags)
    assert change.kubelet.writes == "v2" and dict(change.kubelet.gates) == {"CPUManagerPolicyAlphaOptions": True}
    assert change.config["featureGates"] == {"CPUManagerPolicyAlphaOptions": True}
    assert [pid for pid, _why in search.refused] == [300]
    # what the impostor's gates would have done, had they been read: the node refused, or a V3 checkpoint
    with pytest.raises(ConfigError, match="CPUManagerPolicyOptions to false"):
        plan_change(config, Desired(num_reserved=2, policy_options={"full-pcpus-only": "true"}), TOPO, "1.36",
                    state=None, state_path=STATE, flags={"CPUManagerPolicyOptions": False})
    assert plan_change(config, Desired(num_reserved=2), TOPO, "1.36", state=None, state_path=STATE,
                       flags={"PodLevelResourceManagers": True}).kubelet.writes == "v3"


# Any number of processes, each with a random name, owner, cgroup and executable, some gone meanwhile.
_CGROUPS = {"v2": (V2, True), "v1": (V1, True), "hybrid": (HYBRID, True), "root slice": ("0::/kubelet.service\n", True),
            "user's unit": (USERS, False), "session": (SESSION, False), "v1 session": (V1_USERS, False),
            "hybrid split": (HYBRID_SPLIT, False), "other": ("0::/system.slice/cron.service\n", False),
            "lookalike": ("0::/system.slice/my-kubelet.service\n", False),
            "below": ("0::/system.slice/kubelet.service/x\n", False),
            "no systemd": ("4:cpu:/system.slice/kubelet.service\n", False), "empty": ("", False),
            "oversized": (V2 + "#" * MAX_CGROUP_BYTES, False), "binary junk": (b"\xff\xfe0::\x00\n", False)}
_EXES = {"right": True, "right (deleted)": True, "/tmp/kubelet": False, "/usr/bin/kubelet2": False}
_UIDS = {(0, 0): True, (1000, 1000): False, (1000, 0): False, (0, 1000): False, (65534, 65534): False}
_GONE = [(), ("cgroup",), ("cmdline",), ("exe",)]
_ANYONE = st.fixed_dictionaries({
    "comm": st.sampled_from([b"kubelet", b"kubelet2", b"bash", b"kubele"]),
    "uid": st.sampled_from(sorted(_UIDS)), "cgroup": st.sampled_from(sorted(_CGROUPS)),
    "exe": st.sampled_from(sorted(_EXES)), "gone": st.sampled_from(_GONE), "args": st.sampled_from([0, 1])})
_KUBELET_LIKE = st.fixed_dictionaries({  # a kubelet, or one check away from one: the two must never be confused
    "comm": st.just(b"kubelet"), "uid": st.sampled_from([(0, 0), (0, 0), (1000, 1000), (1000, 0)]),
    "cgroup": st.sampled_from(["v2", "v1", "hybrid", "user's unit", "hybrid split"]),
    "exe": st.sampled_from(["right", "right (deleted)", "/tmp/kubelet"]), "gone": st.sampled_from([(), (), *_GONE]),
    "args": st.sampled_from([0, 0, 1])})
_PROCESS = st.one_of(_KUBELET_LIKE, _ANYONE)


@settings(max_examples=100)
@given(processes=st.dictionaries(st.integers(1, 99999), _PROCESS, max_size=8), told=st.booleans())
def test_the_chosen_process_always_passes_every_check(processes, told):
    """Whatever the impostors, the chosen process is one named kubelet, in the unit's cgroup, run by root (real and
    effective) from the binary (when told one); the lowest such PID, or none when none passes; refused, with a
    ConfigError, when those that pass disagree. Every other process named kubelet is in the notes, the gone ones
    nowhere."""
    with tempfile.TemporaryDirectory() as root:
        node = FakeProc(pathlib.Path(root))
        for pid, how in processes.items():
            exe = how["exe"].replace("right", node.binary)
            node.add(pid, comm=how["comm"], uid=how["uid"], cgroup=_CGROUPS[how["cgroup"]][0], exe=exe,
                     args=[REAL_ARGS, REAL_ARGS[:1]][how["args"]], omit=how["gone"])
        outcomes = {pid: _outcome(how, told) for pid, how in processes.items()}
        passing = sorted(pid for pid, outcome in outcomes.items() if outcome == "passes")
        try:
            found = node.search(binary=node.binary if told else None)
        except ConfigError as exc:
            assert len({processes[pid]["args"] for pid in passing}) > 1, str(exc)
            return
    assert len({processes[pid]["args"] for pid in passing}) <= 1
    assert found.passed == passing
    assert (found.chosen.pid if found.chosen else None) == (passing[0] if passing else None)
    assert sorted(pid for pid, _why in found.refused) == sorted(pid for pid, outcome in outcomes.items()
                                                                if outcome == "refused")


def _outcome(how, told):
    """What the checks make of a process, from how it was made: "other" (not named kubelet), "gone" (a file it reads
    has vanished), "refused" (a check fails on what it read) or "passes". The cgroup is read first, then the owner,
    the executable when a binary is told, and the command line of one that passes."""
    if how["comm"] != b"kubelet":
        return "other"
    if how["gone"] == ("cgroup",):
        return "gone"
    if not (_CGROUPS[how["cgroup"]][1] and _UIDS[how["uid"]]):
        return "refused"
    if told and how["gone"] == ("exe",):
        return "gone"
    if told and not _EXES[how["exe"]]:
        return "refused"
    return "gone" if how["gone"] == ("cmdline",) else "passes"


@pytest.mark.parametrize("answer,version", [
    ((0, "Kubernetes v1.37.2\n", ""), "Kubernetes v1.37.2"),
    ((0, "Kubernetes v1.36.3\nsomething after\n", ""), "Kubernetes v1.36.3"),  # the first line only
    ((0, "  v1.35.4  \n", ""), "v1.35.4"),
])
def test_the_kubelet_is_asked_for_its_version(answer, version):
    asked = []
    assert ask_kubelet_version("/usr/bin/kubelet", run=lambda argv: asked.append(argv) or answer) == version
    assert asked == [["/usr/bin/kubelet", "--version"]]


@pytest.mark.parametrize("answer,message", [
    ((127, "", "[Errno 2] No such file or directory: 'kubelet'"),
     "kubelet --version failed (exit 127): [Errno 2] No such file or directory: 'kubelet'"),
    ((1, "", ""), "kubelet --version failed (exit 1): no output"),
    ((2, "unknown flag: --version", ""), "kubelet --version failed (exit 2): unknown flag: --version"),
    ((0, "kubelet is not a version\n", ""), 'cannot read a kubelet version from "kubelet is not a version"'),
    ((0, "", ""), 'cannot read a kubelet version from ""'),
    ((0, "Kubernetes v1.37.2" + "x" * 9000, ""), "cannot read a kubelet version from"),  # read up to a limit
])
def test_a_kubelet_that_gives_no_version_is_named(answer, message):
    with pytest.raises(ConfigError) as raised:
        ask_kubelet_version("kubelet", run=lambda _argv: answer)
    assert message in str(raised.value)
    assert len(str(raised.value)) < 4096 + 200


TOPO_2X4 = generated(2, 4, 2)  # the review's machine: NUMA 0 = CPUs 0-3,8-11; NUMA 1 = 4-7,12-15
STATE = "/var/lib/kubelet/cpu_manager_state"
STATIC_CFG = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
              "cpuManagerPolicy": "static", "reservedSystemCPUs": "0,8"}


@pytest.mark.parametrize("args", [["--config-dir=/etc/kubernetes/kubelet.conf.d"],
                                  ["--config-dir", "/etc/kubernetes/kubelet.conf.d"]])
def test_a_kubelet_config_drop_in_directory_is_refused_not_ignored(args):
    """The kubelet (KubeletConfigDropinDir, beta and on from 1.30) merges every *.conf file of --config-dir over the
    file kubecpu plans: a drop-in with topologyManagerPolicy or cpuManagerPolicy overrides it as a flag does. The
    planner reads the one file and refuses only the flags: it plans (and judges the rewritten checkpoint) for a
    configuration the kubelet does not run (issue 63's review)."""
    with pytest.raises(ConfigError, match="config-dir"):
        plan_change(STATIC_CFG, Desired(num_reserved=2), TOPO_2X4, "1.33", state=None, state_path=STATE, args=args)


def test_a_kubelet_root_dir_other_than_the_checkpoints_is_refused():
    """--root-dir moves the kubelet's checkpoint (<root-dir>/cpu_manager_state): planning from
    /var/lib/kubelet/cpu_manager_state, which is not the kubelet's (absent: a fresh state, no migration), lets the
    role restart the kubelet with a new configuration over a checkpoint it never read (issue 63's review). The same
    directory given as the checkpoint's is fine."""
    with pytest.raises(ConfigError, match="root-dir"):
        plan_change(STATIC_CFG, Desired(num_reserved=2), TOPO_2X4, "1.33", state=None, state_path=STATE,
                    args=["--root-dir=/data/kubelet"])
    plan_change(STATIC_CFG, Desired(num_reserved=2), TOPO_2X4, "1.33", state=None,
                state_path="/data/kubelet/cpu_manager_state", args=["--root-dir", "/data/kubelet"])
