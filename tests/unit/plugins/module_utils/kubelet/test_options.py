"""The static policy's options: the kubelet's parse and validation cases (kubelet-cases/static_policy.json)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import OptionError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import parse_options
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import cases, ids

PARSE_CASES = [c for c in cases("static_policy.json") if not c.get("unconvertible") and c["kind"] == "parse_options"]


@pytest.mark.parametrize("case", PARSE_CASES, ids=ids(PARSE_CASES))
def test_parse_options(case):
    if case["expected"]["error"]:
        with pytest.raises(OptionError):
            parse_options(case["options"])
        return
    flags = parse_options(case["options"])
    go_names = {"FullPhysicalCPUsOnly": "full_pcpus_only"}
    assert {name for name, on in flags._asdict().items() if on is True} == {go_names[k] for k in case["expected"]["value"]}
