"""Single settings, each refused with a ConfigError that names it."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.settings import (choice, num_reserved,
                                                                                           option_map, parse_duration,
                                                                                           reserved_cpus)


def test_good_values():
    assert choice("a", "x", ("a", "b")) == "a"
    assert num_reserved(None) is None and num_reserved(0) == 0
    assert reserved_cpus("0-1,4") == CPUSet.parse("0-1,4") and reserved_cpus("") is None
    assert option_map({"full-pcpus-only": True, "n": 8}, "o") == {"full-pcpus-only": "true", "n": "8"}
    assert option_map(None, "o") == {}


@pytest.mark.parametrize("call, text", [
    (lambda: choice("c", "policy", ("a", "b")), "policy must be one of a, b, got 'c'"),
    (lambda: num_reserved(-1), "num_reserved must not be negative, got -1"),
    (lambda: num_reserved(True), "num_reserved must not be negative, got True"),
    (lambda: num_reserved("2"), "num_reserved must not be negative, got '2'"),
    (lambda: reserved_cpus("1-"), 'reserved_cpus: invalid CPU list "1-"'),
    (lambda: option_map(["x"], "policy_options"), "policy_options must be a mapping"),
    (lambda: option_map({"x": [1]}, "policy_options"), "policy_options: the value of x must be a string"),
])
def test_bad_values_name_the_setting(call, text):
    with pytest.raises(ConfigError) as refused:
        call()
    assert str(refused.value).startswith(text)


@pytest.mark.parametrize("text, seconds", [("10s", 10.0), ("500ms", 0.5), ("1m30s", 90.0), ("2", 2.0), (".5", 0.5),
                                           ("1h", 3600.0), ("24h", 86400.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "-1s", "s", "1d", "25h", "1s2", "1 s"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
