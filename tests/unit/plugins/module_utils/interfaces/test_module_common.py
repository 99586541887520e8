"""The modules' adapter: a domain error fails the module with its text and type, anything else without a traceback
in the message; a plan's result keys, its diff, and its errors as warnings."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (TOPOLOGY_ARGS,
                                                                                                   plan_result,
                                                                                                   run_module)


def outcome(body, capsys, **params):
    with patch_module_args(dict(params, _ansible_diff=True)), pytest.raises(SystemExit) as exit_info:
        run_module(AnsibleModule(argument_spec=dict(TOPOLOGY_ARGS), supports_check_mode=True), body)
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("error, kind", [(ConfigError("num_reserved must not be negative, got -1"), "ConfigError"),
                                         (StateError("default cpuset cannot be empty"), "StateError")])
def test_a_domain_error_fails_with_its_text_and_type(capsys, error, kind):
    def body(_module):
        raise error

    code, result = outcome(body, capsys)
    assert code == 1 and result["failed"] and result["msg"] == str(error) and result["error_type"] == kind
    assert "exception" not in result


def test_anything_else_fails_cleanly_with_its_type_and_text(capsys):
    def body(_module):
        raise KeyError("boom")

    code, result = outcome(body, capsys)
    assert code == 1 and result["msg"] == "unexpected KeyError: 'boom'" and "Traceback" not in result["msg"]


def test_a_plans_result_its_diff_and_its_errors_as_warnings(capsys):
    doc = {"changed": True, "actions": [], "errors": [{"pod": "ns/p", "container": "c", "error": "no room"}],
           "state_before": {"entries": {}}, "state_after": {"entries": {"u": {"c": "1"}}}, "extra": 1}

    warned = []

    def body(module):
        module.warn = warned.append
        return plan_result(module, doc, ["changed", "actions", "errors"])

    code, result = outcome(body, capsys)
    assert code == 0 and result["changed"] and "extra" not in result
    assert result["diff"] == {"before": {"entries": {}}, "after": {"entries": {"u": {"c": "1"}}}}
    assert warned == ["ns/p/c: no room"]
