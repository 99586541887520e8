"""The modules' adapter: near_device to a NUMA preference (the node settings are test_config's)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import TopologyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import numa_affinity


def device(root, address, node):
    path = os.path.join(root, "sys", "bus", "pci", "devices", address)
    os.makedirs(path)
    with open(os.path.join(path, "numa_node"), "w", encoding="utf-8") as handle:
        handle.write("%d\n" % node)


@pytest.mark.parametrize("node, want", [(1, [1]), (0, [0]), (-1, None)])
def test_near_device_becomes_the_numa_preference(tmp_path, node, want):
    device(str(tmp_path), "0000:3b:00.0", node)
    assert numa_affinity({"near_device": "0000:3B:00.0", "sysfs_root": str(tmp_path)}) == want


def test_explicit_numa_affinity_wins_and_is_validated(tmp_path):
    device(str(tmp_path), "0000:3b:00.0", 1)
    assert numa_affinity({"numa_affinity": [2, 0, 2], "near_device": "0000:3b:00.0",
                          "sysfs_root": str(tmp_path)}) == [0, 2]
    with pytest.raises(TopologyError, match="must not be negative"):
        numa_affinity({"numa_affinity": [-1]})


@pytest.mark.parametrize("bad", ["3b:00.0", "0000:3b:00.9", "; rm -rf /", "$(reboot)", "../../etc/passwd"])
def test_bad_pci_addresses_are_refused_before_any_file_is_read(bad):
    with pytest.raises(TopologyError, match="not a PCI address"):
        numa_affinity({"near_device": bad, "sysfs_root": "/"})


def test_missing_device_names_the_file(tmp_path):
    with pytest.raises(TopologyError, match=r"cannot read .*numa_node"):
        numa_affinity({"near_device": "0000:00:1f.0", "sysfs_root": str(tmp_path)})
