"""Building a node's CPU manager from its settings: the kubelet's reservation rules, the refusals beside a kubelet
that pins CPUs itself, the runtime backend the settings name."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubeletPinsError, PolicyError, SafetyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import TopologyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import (build_manager, build_policy,
                                                                                       build_runtime,
                                                                                       check_kubelet_policy,
                                                                                       recorded_policy)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.crictl import CrictlRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

TOPO = Topology(generated_cpus(2, 2, 2))


@pytest.mark.parametrize("reserved, count, want", [
    ("0,4", None, "0,4"),  # a list alone implies the count
    (None, 2, "0,4"),  # a count alone: chosen by topology (a whole core)
    ("1", 1, "1"),
])
def test_the_kubelets_reservation_rules(reserved, count, want):
    policy = build_policy(TOPO, "static", reserved and CPUSet.parse(reserved), count, {})
    assert str(policy.reserved) == want


@pytest.mark.parametrize("reserved, count, error, text", [
    ("0,4", 1, PolicyError, "size of 0,4 did not equal 1"),
    ("8", None, TopologyError, "reserved CPUs lists CPU(s) 8 that are not in the topology"),
])
def test_reservation_refusals(reserved, count, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        build_policy(TOPO, "static", CPUSet.parse(reserved), count, {})


@pytest.mark.parametrize("text, policy", [
    ('{"policyName":"static","defaultCpuSet":"0-7","checksum":0}', "static"),
    ('{"POLICYNAME":"none"}', "none"), ('{"policyName":7}', None), ("[]", None), ("{", None), (None, None),
])
def test_recorded_policy(tmp_path, text, policy):
    path = tmp_path / "state"
    if text is not None:
        path.write_text(text)
    assert recorded_policy(str(path)) == policy


def test_refusals(tmp_path):
    kubelet = tmp_path / "kubelet_state"
    kubelet.write_text('{"policyName":"static","defaultCpuSet":"0-7","checksum":0}')
    with pytest.raises(SafetyError, match="pins CPUs on this node itself"):
        check_kubelet_policy(str(kubelet))
    assert check_kubelet_policy(str(kubelet), force=True) == "static"
    kubelet.write_text('{"policyName":"none","defaultCpuSet":"","checksum":0}')
    assert check_kubelet_policy(str(kubelet)) == "none"


def test_the_static_policy_without_a_reservation_is_refused_with_the_kubelets_words():
    for reserved, count in ((None, None), (None, 0), (CPUSet(), 0)):
        with pytest.raises(PolicyError, match=r"^\[cpumanager\] the static policy requires systemreserved.cpu \+ "
                                              r"kubereserved.cpu to be greater than zero \(set reserved_cpus or "
                                              r"num_reserved\)$"):
            build_policy(TOPO, "static", reserved, count, None)
    assert build_policy(TOPO, "static", None, 1, None).reserved
    assert not build_policy(TOPO, "static", None, None, None, unreserved=True).reserved  # a reader (the report)
    assert build_policy(TOPO, "none", None, None, None).name == "none"


def test_the_settings_name_the_backend():
    assert isinstance(build_runtime(NodeConfig(crictl_path="/x/crictl", runtime_endpoint="unix:///x.sock")),
                      CrictlRuntime)
    runtime = build_runtime(NodeConfig(runtime_timeout=5.0, runtime_endpoint="unix:///x.sock"))
    assert runtime.argv("ps") == ["crictl", "--runtime-endpoint=unix:///x.sock", "--timeout=5s", "ps"]


def test_a_manager_that_acts_is_built_only_where_it_may(tmp_path):
    kubelet = tmp_path / "kubelet_state"
    kubelet.write_text('{"policyName":"static","defaultCpuSet":"0-7","checksum":0}')
    config = NodeConfig(state_path=str(tmp_path / "state"), num_reserved=1, kubelet_state_path=str(kubelet))
    with pytest.raises(SafetyError, match="pins CPUs on this node itself"):
        build_manager(config, with_runtime=True, topology=TOPO)
    with build_manager(config, topology=TOPO) as reader:  # reading needs no permission
        assert reader.runtime is None and reader.cache.path == str(tmp_path / "state") + ".containers.json"
    with build_manager(config.replace(force=True), with_runtime=True, topology=TOPO) as manager:
        assert isinstance(manager.runtime, CrictlRuntime) and manager.policy.reserved == CPUSet.parse("0")
        assert manager.steps_aside() == ""
    with build_manager(config, with_runtime=True, topology=TOPO, service=True) as service:  # the agent, the plugin
        assert "pins CPUs on this node itself (%s says policy static)" % kubelet in service.steps_aside()
        with pytest.raises(KubeletPinsError, match="kubecpu steps aside"):
            service.reconcile()
        kubelet.write_text('{"policyName":"none","defaultCpuSet":"","checksum":0}')
        assert service.steps_aside() == ""
