"""The static policy's options: the kubelet's parse and validation cases (kubelet-cases/static_policy.json)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import OptionError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import go_quote, parse_options
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


@pytest.mark.parametrize("text,quoted", [  # what Go's strconv.Quote gives (go 1.26, fmt's %q)
    ("bogus", '"bogus"'), ("", '""'), ('a"b', '"a\\"b"'), ("a\\b", '"a\\\\b"'), ("\n\t", '"\\n\\t"'),
    ("\x00\x7f", '"\\x00\\x7f"'), ("\u00e9", '"\u00e9"'), ("\u200b", '"\\u200b"'), ("\U0001f600", '"\U0001f600"'),
    ("\U000e0001", '"\\U000e0001"'),
])
def test_go_quote_is_what_the_kubelets_messages_print(text, quoted):
    assert go_quote(text) == quoted
