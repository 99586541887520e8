"""The kubelet configuration planner: validation per kubelet version (KUBELET_CONFIG.md sections 1-3), the new
configuration (only the managed keys change), and the state-file verdict that drives the safe migration (section 4).
"""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubecpuError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import CPU_OPTION_HISTORY
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import (
    ConfigError, Desired, ask_kubelet_version, plan_change, running_kubelet_args)
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


def test_the_running_kubelets_command_line_is_found_by_its_process_name(tmp_path):
    for pid, comm, cmdline in ((7, b"systemd\n", b"/sbin/init\0"),
                               (1234, b"kubelet\n", b"/usr/bin/kubelet\0--config=/c.yaml\0--feature-gates=A=true\0"),
                               (99, b"containerd\n", b"containerd\0")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_bytes(comm)
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
    (tmp_path / "self").mkdir()
    assert running_kubelet_args(str(tmp_path)) == ["--config=/c.yaml", "--feature-gates=A=true"]
    assert running_kubelet_args(str(tmp_path / "nonexistent")) == []


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
