"""The options and feature gates each kubelet version knows (KUBELET_CONFIG.md section 2): versions read, the
maturity table row by row."""

from __future__ import annotations

import re

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import cpu_option_maturity
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import flag_gates, parse_version
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import topology_gates


@pytest.mark.parametrize("text,expected", [
    ("Kubernetes v1.33.2", (1, 33)), ("v1.29.0", (1, 29)), ("1.35", (1, 35)), ("Kubernetes v1.31.4-eks-1", (1, 31)),
])
def test_versions(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "kubelet", "Kubernetes", "1", "v1.x"])
def test_bad_versions(text):
    with pytest.raises(ConfigError, match="cannot read a kubelet version"):
        parse_version(text)


MATURITY = {
    "full-pcpus-only": {22: "alpha-gate", 23: "beta", 30: "beta", 32: "beta", 33: "GA", 36: "GA"},
    "distribute-cpus-across-numa": {22: None, 23: "alpha", 32: "alpha", 33: "beta", 36: "beta"},
    "align-by-socket": {24: None, 25: "alpha", 36: "alpha"},
    "distribute-cpus-across-cores": {30: None, 31: "alpha", 36: "alpha"},
    "strict-cpu-reservation": {31: None, 32: "alpha", 33: "beta", 34: "beta", 35: "GA"},
    "prefer-align-cpus-by-uncorecache": {31: None, 32: "alpha", 33: "alpha", 34: "beta", 35: "beta", 36: "GA"},
}


@pytest.mark.parametrize("option,minor,level", [(o, m, lv) for o, row in MATURITY.items() for m, lv in row.items()])
def test_option_maturity(option, minor, level):
    assert cpu_option_maturity(option, minor) == level


@pytest.mark.parametrize("args, want", [
    ([], {}),
    (["--config=/var/lib/kubelet/config.yaml", "--feature-gates=PodLevelResourceManagers=true,Foo=false"],
     {"PodLevelResourceManagers": True, "Foo": False}),
    (["--feature-gates", "A=T, B=0"], {"A": True, "B": False}),
    (["--feature-gates=A=true", "--feature-gates=A=false,B=1"], {"A": False, "B": True}),  # a later value wins
    (["--feature-gates="], {}),
])
def test_the_gates_of_a_kubelets_command_line(args, want):
    assert flag_gates(args) == want


@pytest.mark.parametrize("args, says", [
    (["--feature-gates=A"], 'invalid argument "A" for "--feature-gates" flag: missing bool value for A'),
    (["--feature-gates=A=yes"], 'invalid argument "A=yes" for "--feature-gates" flag: invalid value of A: yes'),
])
def test_a_command_line_gate_that_is_not_a_go_bool_is_refused(args, says):
    with pytest.raises(ConfigError, match="^" + re.escape(says) + "$"):
        flag_gates(args)


@pytest.mark.parametrize("policy,scope,text", [  # the kubelet's configuration validation (validation.go), 1.35-1.37
    ("bogus", "container", 'invalid configuration: topologyManagerPolicy (--topology-manager-policy) "bogus" must be '
                           'one of: ["none" "best-effort" "restricted" "single-numa-node"]'),
    ("none", "node", 'invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: '
                     '"container", or "pod"'),
])
def test_a_topology_manager_policy_or_scope_it_does_not_know_is_refused_in_its_words(policy, scope, text):
    with pytest.raises(ConfigError) as refused:
        topology_gates(policy, scope, {}, minor=37, num_numa=2, gates={})
    assert str(refused.value) == text
