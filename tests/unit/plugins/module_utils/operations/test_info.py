"""What is pinned where: the state joined with the runtime and cgroupfs (names, drift, throttling), the per-CPU map of
the fleet report, free whole cores per NUMA node.

Machine: 2 sockets x 2 cores x 2 threads, NUMA 0 = cores {0,4} {1,5}, NUMA 1 = cores {2,6} {3,7}; CPU 0 reserved.
"""

from __future__ import annotations

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.info import (cpu_map, free_whole_cores,
                                                                                          node_info)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.info import housekeeping_info
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irq import IrqFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import IrqBalance
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import FakeIrqBalance, proc_irq

TOPO = Topology(generated_cpus(2, 2, 2))


def pinned_node(tmp_path):
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(TOPO, new_policy("static", TOPO, 1), StateStore(str(tmp_path / "state")), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache())
    web = runtime.add("uid-web", "main", "Guaranteed", 2000, pod_name="web", namespace="prod")
    api = runtime.add("uid-api", "app", "Burstable", 250, pod_name="api", namespace="prod")
    manager.reconcile()
    return manager, runtime, web, api


def test_free_whole_cores_per_numa_node():
    assert free_whole_cores(TOPO, CPUSet.parse("1-7")) == {"0": 1, "1": 2}
    assert free_whole_cores(TOPO, CPUSet.parse("0-3")) == {"0": 0, "1": 0}


def test_the_cpu_map_names_owners_and_marks_reserved_and_shared():
    rows = cpu_map(TOPO, CPUSet.parse("0"), [{"cpus": "1,5", "pod": "prod/web", "pod_uid": "u", "container": "main"},
                                             {"cpus": "2", "pod": None, "pod_uid": "u2", "container": "db"}])
    by_cpu = {r["cpu"]: r for r in rows}
    assert [r["cpu"] for r in rows] == list(range(8))
    assert by_cpu[0]["kind"] == "reserved" and by_cpu[3]["kind"] == "shared" and by_cpu[3]["owner"] is None
    assert by_cpu[1]["owner"] == by_cpu[5]["owner"] == "prod/web/main"
    assert by_cpu[2]["owner"] == "u2/db"  # no name from the runtime: the pod UID
    assert (by_cpu[5]["core"], by_cpu[5]["socket"], by_cpu[5]["numa"]) == (1, 0, 0)


def test_info_joins_the_state_with_the_runtime_and_cgroupfs(tmp_path):
    manager, runtime, web, api = pinned_node(tmp_path)
    info = node_info(manager, manager.read_state())
    assert info["runtime"] == "fake" and info["warnings"] == [] and info["drift"] == []
    (assignment,) = info["assignments"]
    assert assignment == dict(assignment, pod="prod/web", container="main", cpus="1,5", container_id=web,
                              running=True, cgroup_cpus="1,5", drift=False, numa_nodes="0")
    rows = {r["container"]: r for r in info["containers"]}
    assert rows["app"]["cpus"] == "0,2-4,6-7" and not rows["app"]["exclusive"] and rows["app"]["qos"] == "Burstable"
    assert rows["main"]["cfs_quota"] == 200000 and rows["main"]["cpu_request_milli"] == 2000
    assert info["free_whole_cores_per_numa"] == {"0": 0, "1": 2}
    owners = {r["cpu"]: r["owner"] for r in info["cpus"] if r["kind"] == "exclusive"}
    assert owners == {1: "prod/web/main", 5: "prod/web/main"}


def test_drift_is_what_cgroupfs_shows_against_the_state(tmp_path):
    manager, runtime, web, _api = pinned_node(tmp_path)
    runtime.write("cpuset", runtime.infos[web].cgroup_path, "cpuset.cpus", "0-7")
    info = node_info(manager, manager.read_state())
    assert info["drift"] == [{"container_id": web, "pod": "prod/web", "container": "main", "want": "1,5",
                              "have": "0-7"}]


def test_without_the_runtime_the_state_alone_and_a_down_runtime_is_a_warning(tmp_path):
    manager, runtime, _web, _api = pinned_node(tmp_path)
    alone = node_info(manager, manager.read_state(), use_runtime=False)
    assert alone["runtime"] is None and alone["containers"] == [] and alone["assignments"][0]["pod"] is None
    runtime.down = True
    down = node_info(manager, manager.read_state())
    assert down["runtime"] is None and down["warnings"][0].startswith("runtime not queried: ")
    assert down["assignments"][0]["cpus"] == "1,5"


def test_housekeeping_shows_interrupts_on_exclusive_cpus_irqbalance_and_the_daemons(tmp_path):
    irqs = IrqFS(proc_irq(tmp_path / "irq", {24: "0-3", 25: "6", 26: "4-5"}, default="3f"))
    (tmp_path / "state.irq.json").write_text('{"format":"kubecpu.irq/v1","kept_off":"6-7","originals":{},'
                                             '"banned":"6-7","refused":[25]}')
    for name, cpus in (("system.slice", "0-1"), ("kubepods.slice", "0-7")):
        (tmp_path / "cg" / name).mkdir(parents=True)
        (tmp_path / "cg" / name / "cpuset.cpus.effective").write_text(cpus + "\n")
    (tmp_path / "run").mkdir()
    daemon = FakeIrqBalance(tmp_path / "run")
    try:
        balance = IrqBalance(str(tmp_path / "run"))
        balance.ban(daemon.path, CPUSet.parse("6"))  # it bans less than is held
        doc = housekeeping_info(CPUSet.parse("6-7"), str(tmp_path / "cg"), str(tmp_path / "state.irq.json"), irqs,
                                balance)
    finally:
        daemon.close()
    assert doc == {"interrupts": 3, "interrupts_on_exclusive": [25], "interrupts_kept_off": 2,
                   "interrupts_refused": [25], "default_affinity": "0-5",
                   "irqbalance": {"pid": daemon.pid, "banned": "6", "agrees": False},
                   "daemons": {"system.slice": "0-1", "kubepods.slice": "0-7"}}
    assert housekeeping_info(CPUSet(), str(tmp_path / "none"), None, irqs, IrqBalance(str(tmp_path / "x")))[
        "irqbalance"] is None
