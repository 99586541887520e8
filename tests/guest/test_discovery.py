"""On a real 2-socket SMT NUMA kernel, kubecpu's topology is what the kernel says: lscpu's rows and sysfs's
siblings, NUMA nodes, caches and distances."""

from __future__ import annotations

import glob
import os
import subprocess

from conftest import kubecpu


def _sysfs(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def _cpulist(text):
    cpus = set()
    for part in text.split(","):
        first, _sep, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def test_discovery_equals_lscpu_and_sysfs():
    topo = kubecpu("topology")
    assert topo["source"] == "sysfs"
    cpus = {c["cpu"]: c for c in topo["cpus"]}
    rows = [line.split(",") for line in subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET,NODE"], capture_output=True,
                                                       text=True, check=True).stdout.splitlines()
            if not line.startswith("#")]
    assert sorted(cpus) == sorted(int(row[0]) for row in rows) == list(range(8))
    lscpu_core = {}  # lscpu's core numbers are its own: the same core has one number, checked as a partition
    for cpu, core, socket, node in ((int(v) for v in row) for row in rows):
        assert cpus[cpu]["socket"] == socket and cpus[cpu]["numa"] == node, cpu
        lscpu_core.setdefault(core, set()).add(cpu)
    ours = {}
    for cpu, item in cpus.items():
        ours.setdefault(item["core"], set()).add(cpu)
    assert sorted(map(sorted, ours.values())) == sorted(map(sorted, lscpu_core.values())) == [
        [0, 1], [2, 3], [4, 5], [6, 7]]
    for cpu, item in cpus.items():  # the core id is the lowest sibling, as the kubelet numbers cores
        siblings = _cpulist(_sysfs("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list" % cpu))
        assert item["core"] == min(siblings) and siblings == ours[item["core"]]
        assert item["socket"] == int(_sysfs("/sys/devices/system/cpu/cpu%d/topology/physical_package_id" % cpu))
        l3 = [d for d in glob.glob("/sys/devices/system/cpu/cpu%d/cache/index*" % cpu)
              if _sysfs(os.path.join(d, "level")) == "3"]
        assert item["uncore"] == int(_sysfs(os.path.join(l3[0], "id"))) and item["online"]
    for node in (0, 1):
        assert {c for c, item in cpus.items() if item["numa"] == node} == _cpulist(
            _sysfs("/sys/devices/system/node/node%d/cpulist" % node))
        assert topo["numa_distances"][str(node)] == [int(v) for v in _sysfs(
            "/sys/devices/system/node/node%d/distance" % node).split()]
    assert topo["numa_distances"] == {"0": [10, 21], "1": [21, 10]}
    assert len({item["uncore"] for item in cpus.values()}) == 2  # one L3 per socket


def test_the_demo_table_on_the_server():
    """``bin/kubecpu demo`` on this node: 8 CPUs, 4 cores, 2 sockets, 2 NUMA nodes, 2 threads per core."""
    text = kubecpu("demo").stdout
    assert text.startswith("Node (sysfs): 8 CPUs, 4 cores, 2 sockets, 2 NUMA nodes, 2 uncore caches, 2 threads "
                           "per core")
