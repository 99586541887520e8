"""A node's settings, validated once: every bad setting is a ConfigError naming it, from modules and flags alike."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions, NodeConfig


def params(**overrides):
    """Module parameters as AnsibleModule hands them over: every option, defaults filled in."""
    values = {key: spec.get("default") for key, spec in STATE_ARGS.items()}
    values.update(overrides)
    return values


def test_node_config_reads_options_as_the_kubelet_does():
    config = node_config(params(reserved_cpus="0,4", policy_options={"full-pcpus-only": True, "x": "false"}))
    assert str(config.reserved_cpus) == "0,4"
    assert dict(config.policy_options) == {"full-pcpus-only": "true", "x": "false"}


def test_module_defaults_are_the_config_defaults():
    assert node_config(params()) == NodeConfig(sysfs_root="/")


def test_flat_manager_options_and_the_topology_manager_options_map():
    config = NodeConfig.from_mapping(params(isolated_cpus="prefer", align_memory=True, cpu_quota="unlimited",
                                            topology_manager_policy="restricted", topology_manager_scope="pod",
                                            topology_manager_policy_options={"prefer-closest-numa-nodes": True}))
    assert config.options == ManagerOptions("prefer", True, "unlimited", "restricted", "pod",
                                            {"prefer-closest-numa-nodes": "true"})


def test_settings_that_are_not_the_nodes_are_ignored_and_overrides_win():
    config = NodeConfig.from_mapping({"container_id": "abc", "cpus": 2, "read_only": False}, read_only=True)
    assert config.read_only and config.state_path == NodeConfig().state_path


@pytest.mark.parametrize("overrides, text", [
    ({"reserved_cpus": "0-x"}, "reserved_cpus: invalid CPU list"),
    ({"num_reserved": -1}, "num_reserved must not be negative"),
    ({"runtime_timeout": 0.0}, "runtime_timeout must be more than 0"),
    ({"runtime_timeout": 3601.0}, "runtime_timeout must be more than 0 and at most 3600"),
    ({"runtime_timeout": True}, "runtime_timeout must be"),
    ({"policy_options": {"full-pcpus-only": ["a"]}}, "must be a string or a boolean"),
    ({"policy_options": "full-pcpus-only"}, "policy_options must be a mapping"),
    ({"policy": "dynamic"}, "policy must be one of static, none"),
    ({"runtime": "docker"}, "runtime must be one of crictl, cri"),
    ({"isolated_cpus": "always"}, "isolated_cpus must be one of ignore, prefer, only"),
    ({"cpu_quota": "none"}, "cpu_quota must be one of keep, unlimited"),
    ({"topology_manager_policy": "strict"}, "topology_manager_policy must be one of"),
    ({"topology_manager_scope": "node"}, "topology_manager_scope must be one of container, pod"),
    ({"topology_manager_policy_options": ["x"]}, "topology_manager_policy_options must be a mapping"),
    ({"runtime_endpoint": "\x00"}, "runtime_endpoint must not contain a NUL character"),
    ({"state_path": "/var/lib/kubecpu/st\x00ate"}, "state_path must not contain a NUL character"),
])
def test_bad_settings_are_clear_errors(overrides, text):
    with pytest.raises(ConfigError, match=text):
        node_config(params(**overrides))


@pytest.mark.parametrize("value, want", [("", None), (None, None), ("0,4", CPUSet.parse("0,4")),
                                         (CPUSet.parse("1"), CPUSet.parse("1"))])
def test_reserved_cpus_accept_text_or_a_set(value, want):
    assert NodeConfig(reserved_cpus=value).reserved_cpus == want


def test_the_config_is_immutable():
    config = NodeConfig()
    with pytest.raises(AttributeError):
        config.policy = "none"  # type: ignore[misc]
    assert config.replace(policy="none").policy == "none" and config.policy == "static"
