"""The kubelet Memory Manager's checkpoint, read for the NUMA nodes each container's memory is pinned to: the Static
policy's entries (memory and hugepages blocks), nothing under the None policy or without a file, and a clear refusal
naming the file for anything this reader cannot trust."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.memory_state import (
    MAX_MEMORY_STATE_BYTES, memory_nodes, read_memory_nodes)

STATIC = {"policyName": "Static", "machineState": {"0": {"numberOfAssignments": 1}}, "entries": {
    "pod-a": {"app": [{"numaAffinity": [1], "type": "memory", "size": 1073741824},
                      {"numaAffinity": [1], "type": "hugepages-1Gi", "size": 1073741824}]},
    "pod-b": {"db": [{"numaAffinity": [0, 1], "type": "memory", "size": 4294967296}], "side": []}},
    "checksum": 1234}


@pytest.mark.parametrize("doc, want", [
    (STATIC, {("pod-a", "app"): frozenset({1}), ("pod-b", "db"): frozenset({0, 1})}),
    ({"policyName": "None", "machineState": {}, "entries": {}, "checksum": 1}, {}),
    ({"policyName": "None", "checksum": 1}, {}),
])
def test_the_nodes_each_containers_memory_is_pinned_to(doc, want):
    assert memory_nodes(json.dumps(doc).encode(), "memory_manager_state") == want


@pytest.mark.parametrize("data, says", [
    (b"{", "not a memory manager checkpoint"),
    (b"\xff", "not a memory manager checkpoint"),
    (b'{"entries": []}', "entries is not a mapping of pods"),
    (b'{"entries": {"pod": []}}', r"entries\[pod\] is not a mapping of containers"),
    (b'{"entries": {"pod": {"c": {}}}}', r"entries\[pod\]\[c\] is not a list of blocks with numaAffinity"),
    (b'{"entries": {"pod": {"c": [{"numaAffinity": "0"}]}}}', r"entries\[pod\]\[c\] is not a list of blocks"),
    (b'{"entries": {"pod": {"c": [{"numaAffinity": [true]}]}}}', r"entries\[pod\]\[c\] is not a list of blocks"),
    (b'{"entries": {"pod": {"c": [{"numaAffinity": [-1]}]}}}', r"entries\[pod\]\[c\] is not a list of blocks"),
    (b'{"entries": {"pod": {"c": [7]}}}', r"entries\[pod\]\[c\] is not a list of blocks"),
])
def test_a_file_it_cannot_trust_is_refused_by_name(data, says):
    with pytest.raises(StateError, match="^/x/memory_manager_state: " + says):
        memory_nodes(data, "/x/memory_manager_state")


def test_the_file_is_read_with_a_bound_and_a_missing_one_pins_nothing(tmp_path):
    path = tmp_path / "memory_manager_state"
    assert read_memory_nodes(str(path)) == {}
    path.write_text(json.dumps(STATIC))
    assert read_memory_nodes(str(path))[("pod-a", "app")] == frozenset({1})
    path.write_bytes(b" " * (MAX_MEMORY_STATE_BYTES + 1))
    with pytest.raises(StateError, match="larger than"):
        read_memory_nodes(str(path))
    with pytest.raises(StateError, match="cannot read the memory manager checkpoint"):
        read_memory_nodes(str(tmp_path))  # a directory
