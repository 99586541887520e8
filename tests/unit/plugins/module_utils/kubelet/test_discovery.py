"""Topology discovery from fake sysfs trees, lscpu and /proc/cpuinfo; the topology JSON format."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import TopologyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import (LSCPU_ARGV, discover,
                                                                                            discover_sysfs,
                                                                                            parse_cpuinfo, parse_lscpu)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import build, machine

# (name, cpus, expected summary: cpus, cores, sockets, numa, uncore, threads per core)
MACHINES = [
    ("single-socket HT", machine(1, 4, 2), (8, 4, 1, 1, 1, 2)),
    ("dual-socket HT", machine(2, 4, 2), (16, 8, 2, 2, 2, 2)),
    ("no SMT", machine(2, 4, 1), (8, 8, 2, 2, 2, 1)),
    ("4-way SMT", machine(1, 4, 4), (16, 4, 1, 1, 1, 4)),
    ("several NUMA nodes per socket", machine(2, 8, 2, numa_per_socket=2, l3_per_socket=2), (32, 16, 2, 4, 4, 2)),
    ("sub-NUMA, one L3 per socket", machine(2, 8, 2, numa_per_socket=2, l3_per_socket=1), (32, 16, 2, 4, 2, 2)),
    ("several L3 per socket", machine(1, 16, 2, numa_per_socket=1, l3_per_socket=4), (32, 16, 1, 1, 4, 2)),
]


@pytest.mark.parametrize("name,cpus,summary", MACHINES, ids=[m[0] for m in MACHINES])
def test_sysfs_machines(tmp_path, name, cpus, summary):
    topo = discover(build(str(tmp_path), cpus))
    assert topo.source == "sysfs"
    s = topo.summary()
    assert (s["cpus"], s["cores"], s["sockets"], s["numa_nodes"], s["uncore_caches"], s["threads_per_core"]) == summary
    for c in cpus:
        info = topo.loc[c.cpu]
        assert info == (c.core, c.socket, c.numa, c.l3), name


def test_core_id_is_the_lowest_sibling_and_unique_across_sockets(tmp_path):
    topo = discover(build(str(tmp_path), machine(2, 4, 2)))
    # core_id files repeat 0..3 on both packages; the core key must not
    assert sorted(topo.core_cpus) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert sorted(topo.core_cpus[5]) == [5, 13]


def test_offline_cpus(tmp_path):
    topo = discover(build(str(tmp_path), machine(1, 4, 2), offline=[6, 7]))
    assert str(topo.all_cpus) == "0-5" and str(topo.offline_cpus) == "6-7"
    assert topo.summary()["cpus"] == 6
    doc = topo.to_dict()
    assert [c["online"] for c in doc["cpus"]] == [True] * 6 + [False] * 2
    assert sorted(topo.core_cpus[2]) == [2]  # its sibling 6 is offline


def test_isolcpus_and_nohz_full(tmp_path):
    topo = discover(build(str(tmp_path), machine(1, 4, 2), isolated="2-3,6-7", nohz_full="2-3,6-7"))
    assert str(topo.isolated) == "2-3,6-7" and str(topo.nohz_full) == "2-3,6-7"


def test_nohz_full_null_and_missing(tmp_path):
    topo = discover(build(str(tmp_path / "a"), machine(1, 2, 1), nohz_full="(null)"))
    assert str(topo.nohz_full) == ""
    assert str(discover(build(str(tmp_path / "b"), machine(1, 2, 1))).nohz_full) == ""


def test_kernel_without_die_id_or_cache_entries(tmp_path):
    cpus = [c._replace(die=None) for c in machine(2, 2, 2)]
    topo = discover(build(str(tmp_path), cpus, caches=False))
    assert all(i.die == 0 for i in topo.cpus_info)
    assert all(i.uncore == i.socket for i in topo.cpus_info)  # no L3: uncore = socket


def test_negative_die_id_and_thread_siblings_fallback(tmp_path):
    cpus = [c._replace(die=-1) for c in machine(1, 2, 2)]
    topo = discover(build(str(tmp_path), cpus, siblings_file="thread_siblings_list"))
    assert all(i.die == 0 for i in topo.cpus_info) and sorted(topo.core_cpus[0]) == [0, 2]


def test_l3_without_ids_uses_lowest_shared_cpu(tmp_path):
    topo = discover(build(str(tmp_path), machine(1, 8, 1, l3_per_socket=2), l3_ids=False))
    assert sorted(topo.uncore_cpus) == [0, 4]


def test_no_numa_directory_means_node_0(tmp_path):
    topo = discover(build(str(tmp_path), machine(2, 2, 1), numa_dirs=False))
    assert set(topo.numa_cpus) == {0}


LSCPU_COMMA = """# The following is the parsable format, which can be fed to other
# CPU,Core,Socket,Node,,L1d,L1i,L2,L3
0,0,0,0,,0,0,0,0
1,1,0,0,,1,1,1,0
2,0,0,0,,0,0,0,0
3,1,0,0,,1,1,1,0
"""
LSCPU_COLON = """# CPU,Core,Socket,Node,L1d:L1i:L2:L3
0,0,0,,0:0:0:0
1,1,1,,1:1:1:1
"""


def test_lscpu_fallback(tmp_path):
    calls = []

    def runner(argv):
        calls.append(list(argv))
        return 0, LSCPU_COMMA, ""
    (tmp_path / "sys").mkdir()
    topo = discover(str(tmp_path), runner=runner)
    assert calls == [list(LSCPU_ARGV)] and topo.source == "lscpu"
    assert sorted(topo.core_cpus) == [0, 1] and sorted(topo.core_cpus[0]) == [0, 2]


def test_lscpu_colon_format_and_missing_node():
    infos = parse_lscpu(LSCPU_COLON)
    assert [(i.cpu, i.core, i.socket, i.numa, i.uncore) for i in infos] == [(0, 0, 0, 0, 0), (1, 1, 1, 0, 1)]


def test_cpuinfo_fallback_when_lscpu_fails(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(
        "processor\t: 0\nphysical id\t: 0\ncore id\t\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t\t: 0\n\n"
        "processor\t: 2\nphysical id\t: 1\ncore id\t\t: 0\n\n")
    topo = discover(str(tmp_path), runner=lambda argv: (1, "", "lscpu: not found"))
    assert topo.source == "cpuinfo"
    assert [(i.cpu, i.core, i.socket) for i in topo.cpus_info] == [(0, 0, 0), (1, 0, 0), (2, 2, 1)]


def test_cpuinfo_without_physical_ids():
    infos = parse_cpuinfo("processor : 0\n\nprocessor : 1\n")
    assert [(i.cpu, i.core, i.socket) for i in infos] == [(0, 0, 0), (1, 1, 0)]


def test_nothing_to_discover(tmp_path):
    with pytest.raises(TopologyError, match="cannot discover the CPU topology"):
        discover(str(tmp_path))


def test_numa_distances_come_from_the_node_directories(tmp_path):
    root = build(str(tmp_path), machine(2, 2, 1))
    for node, row in ((0, "10 21"), (1, "21 10")):
        with open(os.path.join(root, "sys/devices/system/node/node%d/distance" % node), "w", encoding="utf-8") as fh:
            fh.write(row + "\n")
    topo = discover_sysfs(root)
    assert topo.numa_distances == {0: [10, 21], 1: [21, 10]}
    doc = topo.to_dict()
    assert doc["numa_distances"] == {"0": [10, 21], "1": [21, 10]}  # TOPOLOGY.md: node id (string) -> row
    assert Topology.from_dict(doc).numa_distances == {0: [10, 21], 1: [21, 10]}


def test_numa_distances_absent_without_distance_files(tmp_path):
    topo = discover_sysfs(build(str(tmp_path), machine(1, 2, 1)))
    assert topo.numa_distances is None and "numa_distances" not in topo.to_dict()
