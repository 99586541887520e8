"""cpu_manager_preflight in-process: a node that has what the agent needs passes with what it found; one that
lacks several things fails once, its message naming each, with every check in the result (the plan's table shows
the message on the node's line)."""

from __future__ import annotations

import json
import os
import sys

from unittest import mock

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubecpu.cpu_manager.plugins.modules import cpu_manager_preflight
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl, fake_sysfs


def run(args, capsys):
    with patch_module_args(dict(args, _ansible_check_mode=True)), pytest.raises(SystemExit) as exit_info, \
            mock.patch.object(ansible_internal, "is_controller", False):
        cpu_manager_preflight.main()
    result = json.loads(capsys.readouterr().out)
    result["rc"] = exit_info.value.code
    return result


@pytest.fixture
def node(tmp_path):
    root = str(tmp_path / "root")
    fake_sysfs.build(root, fake_sysfs.machine(1, 4, 1))
    os.makedirs(os.path.join(root, "proc", "1"))
    with open(os.path.join(root, "proc", "1", "comm"), "w", encoding="utf-8") as handle:
        handle.write("systemd\n")
    crictl = fake_crictl.make_node(str(tmp_path / "runtime"))["crictl"]
    return {"manager": "agent", "sysfs_root": root, "crictl_path": crictl, "python": sys.executable,
            "state_path": str(tmp_path / "state"), "num_reserved": 1}


def test_a_node_with_everything_passes(node, capsys):
    result = run(node, capsys)
    assert result["rc"] == 0 and not result["changed"] and result["problems"] == []
    assert result["runtime"]["name"] == "containerd" and result["reserved_cpus"] == "0"
    if os.geteuid() == 0:
        assert all(check["ok"] for check in result["checks"])


def test_a_node_lacking_several_things_fails_once_naming_each(node, capsys):
    result = run(dict(node, crictl_path="/nonexistent/crictl", reserved_cpus="5",
                      policy_options={"full-pcpus-onyl": "true"}), capsys)
    assert result["rc"] == 1 and result["failed"] and result["error_type"] == "PreflightError"
    assert "the container runtime does not answer its version" in result["msg"]
    assert "reserved CPUs lists CPU(s) 5 that are not in the topology" in result["msg"]
    assert result["msg"] == "; ".join(result["problems"])
    assert {check["check"]: check["ok"] for check in result["checks"]}["systemd"] is True
    assert not os.path.exists(node["state_path"])  # nothing written


def test_a_bad_argument_is_refused_before_anything_is_asked(node, capsys):
    result = run(dict(node, manager="both"), capsys)
    assert result["rc"] == 1 and "manager" in result["msg"] and "both" in result["msg"]
