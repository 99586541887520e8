"""cpu_manager_reservation and cpu_manager_kubelet_config in-process: results, check mode, clear failures."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.modules import cpu_manager_kubelet_config, cpu_manager_reservation

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs

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
    ({"per_numa": 1}, "0,2,4,6"),
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
    assert result["current"] == {"policy": "none", "reserved_cpus": ""}
    assert state.read_bytes() == before


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
