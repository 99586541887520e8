"""The kubelet Device Manager's checkpoint, read for the NUMA nodes of each container's devices (per resource):
``DeviceIDs`` keyed by NUMA node since kubelet 1.20, ``-1`` for a device without NUMA affinity, a plain list (older
files) for none known; a clear refusal naming the file for anything this reader cannot trust."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.device_state import (
    MAX_DEVICE_STATE_BYTES, device_nodes, devices_beside, read_device_nodes)

NIC, GPU = "example.com/sriov-nic", "example.com/gpu"
CHECKPOINT = {"Data": {"PodDeviceEntries": [
    {"PodUID": "pod-a", "ContainerName": "app", "ResourceName": NIC, "DeviceIDs": {"1": ["vf-3", "vf-4"]},
     "AllocResp": "CgQKAmlk"},
    {"PodUID": "pod-a", "ContainerName": "app", "ResourceName": GPU, "DeviceIDs": {"0": ["gpu-0"], "1": ["gpu-1"]},
     "AllocResp": ""},
    {"PodUID": "pod-b", "ContainerName": "db", "ResourceName": NIC, "DeviceIDs": {"-1": ["vf-9"]}, "AllocResp": ""},
    {"PodUID": "pod-c", "ContainerName": "old", "ResourceName": NIC, "DeviceIDs": ["vf-1"], "AllocResp": ""}],
    "RegisteredDevices": {NIC: ["vf-1", "vf-3", "vf-4", "vf-9"], GPU: ["gpu-0", "gpu-1"]}}, "Checksum": 1234}


def test_the_numa_nodes_of_each_containers_devices_per_resource():
    assert device_nodes(json.dumps(CHECKPOINT).encode(), "kubelet_internal_checkpoint") == {
        ("pod-a", "app"): {NIC: frozenset({1}), GPU: frozenset({0, 1})}}  # no NUMA node known: no entry
    assert device_nodes(b'{"Data": {"PodDeviceEntries": null}, "Checksum": 1}', "x") == {}


@pytest.mark.parametrize("data, says", [
    (b"[", "not a device manager checkpoint"),
    (b'{"Data": {"PodDeviceEntries": {}}}', "Data.PodDeviceEntries is not a list"),
    (b'{"Data": {"PodDeviceEntries": [7]}}', r"Data.PodDeviceEntries\[0\] is not an entry"),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": "p", "ContainerName": "c", "ResourceName": "r", '
     b'"DeviceIDs": {"x": ["d"]}}]}}', r"Data.PodDeviceEntries\[0\] is not an entry"),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": "p", "ContainerName": "c", "ResourceName": "r", '
     b'"DeviceIDs": {"-2": ["d"]}}]}}', r"Data.PodDeviceEntries\[0\] is not an entry"),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": "p", "ContainerName": "", "ResourceName": "r", '
     b'"DeviceIDs": {"0": ["d"]}}]}}', r"Data.PodDeviceEntries\[0\] is not an entry"),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": "p", "ContainerName": "c", "ResourceName": "r", '
     b'"DeviceIDs": {"0": [1]}}]}}', r"Data.PodDeviceEntries\[0\] is not an entry"),
])
def test_a_file_it_cannot_trust_is_refused_by_name(data, says):
    with pytest.raises(StateError, match="^/x/kubelet_internal_checkpoint: " + says):
        device_nodes(data, "/x/kubelet_internal_checkpoint")


def test_the_file_below_the_kubelets_directory_is_read_with_a_bound_and_a_missing_one_pins_nothing(tmp_path):
    path = devices_beside(str(tmp_path / "cpu_manager_state"))
    assert path == str(tmp_path / "device-plugins" / "kubelet_internal_checkpoint") and read_device_nodes(path) == {}
    (tmp_path / "device-plugins").mkdir()
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(CHECKPOINT, handle)
    assert read_device_nodes(path)[("pod-a", "app")][NIC] == frozenset({1})
    with open(path, "wb") as handle:
        handle.write(b" " * (MAX_DEVICE_STATE_BYTES + 1))
    with pytest.raises(StateError, match="larger than"):
        read_device_nodes(path)
