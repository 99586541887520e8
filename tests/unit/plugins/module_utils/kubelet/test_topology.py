"""The topology model and its JSON (``kubecpu.topology/v1``, TOPOLOGY.md): round trips and refused documents."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import TopologyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import build, machine


def test_json_round_trip(tmp_path):
    topo = discover(build(str(tmp_path), machine(2, 2, 2), offline=[7], isolated="1"))
    again = Topology.from_json(topo.to_json())
    assert again.to_dict() == dict(topo.to_dict(), source="sysfs")
    path = str(tmp_path / "t.json")
    topo.save(path)
    assert Topology.load(path).loc == topo.loc


@pytest.mark.parametrize("doc,message", [
    ({"format": "other/v9", "cpus": [{"cpu": 0, "core": 0, "socket": 0}]}, 'unsupported format "other/v9"'),
    ({"cpus": []}, '"cpus" must be a non-empty list'),
    ({"cpus": [{"core": 0, "socket": 0}]}, r'cpus\[0\]: "cpu" is required'),
    ({"cpus": [{"cpu": -1, "core": 0, "socket": 0}]}, '"cpu" must be a non-negative integer'),
    ({"cpus": [{"cpu": True, "core": 0, "socket": 0}]}, '"cpu" must be a non-negative integer'),
    ({"cpus": [{"cpu": 0, "core": 0, "socket": 0}, {"cpu": 0, "core": 0, "socket": 0}]}, "CPU 0 is listed twice"),
    ({"cpus": [{"cpu": 0, "core": 0, "socket": 0, "online": "yes"}]}, '"online" must be true or false'),
    ({"cpus": [{"cpu": 0, "core": 0, "socket": 0, "online": False}]}, "no online CPU"),
    ({"cpus": [{"cpu": 0, "core": 0, "socket": 0}], "isolated": "x"}, '"isolated": invalid CPU list "x"'),
    ({"cpus": [{"cpu": 0, "core": 0, "socket": 0}], "source": "guess"}, 'unknown "source"'),
])
def test_bad_topology_documents(doc, message):
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict(doc)


def test_missing_uncore_means_socket():
    topo = Topology.from_json(json.dumps({"cpus": [{"cpu": 0, "core": 0, "socket": 3}]}))
    assert topo.loc[0] == (0, 3, 0, 3)


@pytest.mark.parametrize("value", [[], {"0": "10 21"}, {"x": [10]}, {"0": [10, -1]}, {"0": [True]}])
def test_bad_numa_distances_in_a_topology_file(value):
    doc = {"format": "kubecpu.topology/v1", "cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0}],
           "numa_distances": value}
    with pytest.raises(TopologyError, match="numa_distances"):
        Topology.from_dict(doc)
