"""The Prometheus textfile: the kubelet CPU manager's metric names, counters from a pass's plan, the state's gauges,
the exposition text exactly, and an atomic write node_exporter can read at any moment."""

from __future__ import annotations

import os

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.metrics import Metrics
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

PASS = {"runtime_calls": {"list": 1, "update": 2},
        "actions": [{"action": "allocate"}, {"action": "update", "reason": "exclusive CPUs drifted in cgroupfs (0-7)"},
                    {"action": "update", "reason": "shared pool is now 0,2-7"}, {"action": "release"}],
        "errors": [{"kind": "allocation"}, {"kind": "update"}]}


def samples(text):
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_a_pass_counts_what_it_did():
    metrics = Metrics()
    metrics.observe_pass(PASS, 0.25, True)
    text = metrics.render()
    for line in ("cpu_manager_pinning_requests_total 2", "cpu_manager_pinning_errors_total 1",
                 "kubecpu_cpuset_updates_total 2", "kubecpu_drift_corrections_total 1", "kubecpu_released_total 1",
                 "kubecpu_update_errors_total 1", 'kubecpu_runtime_calls_total{call="list"} 1',
                 'kubecpu_runtime_calls_total{call="update"} 2', 'kubecpu_reconcile_passes_total{result="success"} 1',
                 "kubecpu_reconcile_duration_seconds 0.25"):
        assert line in samples(text), line


def test_a_pass_that_moved_interrupts():
    metrics = Metrics()
    metrics.observe_pass({"housekeeping": {"updated": [{"irq": "24"}, {"irq": "default"}], "refused": [30, 31]},
                          "errors": [{"kind": "irq", "error": "cannot write /proc/irq/24/smp_affinity_list"}]},
                         0.1, True)
    lines = samples(metrics.render())
    for line in ("kubecpu_irq_affinity_updates_total 2", "kubecpu_irq_affinity_refused 2",
                 "kubecpu_irq_errors_total 1", "kubecpu_update_errors_total 0"):
        assert line in lines, line


def test_a_pass_that_set_cpus_power():
    metrics = Metrics()
    metrics.observe_pass({"power": {"cpus": "2-3,6", "updated": [{"file": "cpu2/power/pm_qos_resume_latency_us"}]},
                          "errors": [{"kind": "power", "error": "cpu6 has no cpufreq"},
                                     {"kind": "annotation", "error": "pod lab/a: cpu-c-states.crio.io: 'x' ..."}]},
                         0.1, True)
    lines = samples(metrics.render())
    for line in ("kubecpu_cpu_power_cpus 3", "kubecpu_cpu_power_errors_total 1", "kubecpu_update_errors_total 1"):
        assert line in lines, line


def test_the_state_gauges_per_numa_node():
    topo = Topology(generated_cpus(2, 2, 2))  # 8 CPUs, NUMA 0 = cores {0,4} {1,5}, NUMA 1 = {2,6} {3,7}
    state = CPUState("static", CPUSet.parse("0,4"))
    state.set("pod", "a", CPUSet.parse("1,5"))
    state.set("pod", "b", CPUSet.parse("2-3,6-7"))
    metrics = Metrics()
    metrics.observe_state(topo, state, CPUSet.parse("0"))
    assert samples(metrics.render()) == [
        'cpu_manager_allocation_per_numa{numa_node="0"} 2', 'cpu_manager_allocation_per_numa{numa_node="1"} 4',
        "cpu_manager_exclusive_cpu_allocation_count 6", "cpu_manager_pinning_errors_total 0",
        "cpu_manager_pinning_requests_total 0", "cpu_manager_shared_pool_size_millicores 1000",
        "kubecpu_burstable_exclusive_allocations_total 0",
        "kubecpu_cpu_power_errors_total 0", "kubecpu_cpuset_updates_total 0", "kubecpu_drift_corrections_total 0",
        "kubecpu_exclusive_refusals_total 0",
        "kubecpu_irq_affinity_updates_total 0", "kubecpu_irq_errors_total 0", "kubecpu_peer_errors_total 0",
        "kubecpu_reconcile_passes_total 0",
        "kubecpu_released_total 0", "kubecpu_resize_errors_total 0", "kubecpu_resizes_total 0",
        "kubecpu_runtime_calls_total 0", "kubecpu_system_partition_warnings_total 0",
        "kubecpu_update_errors_total 0"]  # counters start at 0


def test_exposition_format_help_type_and_label_escaping():
    metrics = Metrics()
    metrics.inc("kubecpu_runtime_calls_total", 3, call='we"ird\\')
    text = metrics.render()
    assert "# HELP kubecpu_runtime_calls_total Container runtime calls, by call.\n" \
           "# TYPE kubecpu_runtime_calls_total counter\n" \
           'kubecpu_runtime_calls_total{call="we\\"ird\\\\"} 3\n' in text
    assert text.endswith("\n") and "0.1" not in text


def test_the_file_is_replaced_whole_and_readable_by_node_exporter(tmp_path):
    path = tmp_path / "textfile" / "kubecpu.prom"
    metrics = Metrics()
    metrics.observe_pass({}, 1.5, False)
    metrics.write(str(path))
    first = path.read_text()
    inode = os.stat(path).st_ino
    metrics.observe_pass({}, 1.5, True)
    metrics.write(str(path))
    assert os.stat(path).st_mode & 0o777 == 0o644 and os.stat(path).st_ino != inode
    assert 'kubecpu_reconcile_passes_total{result="failure"} 1' in first
    assert 'kubecpu_reconcile_passes_total{result="success"} 1' in path.read_text()
    assert sorted(os.listdir(path.parent)) == ["kubecpu.prom"]


def test_a_pass_with_burstable_pods_named_containers_and_the_system_partition():
    metrics = Metrics()
    named = "a Burstable pod's container named by cpu-exclusive.kubecpu.io"
    metrics.observe_pass({"actions": [{"action": "allocate", "reason": named},
                                      {"action": "allocate", "reason": "Guaranteed integral request"}],
                          "errors": [{"kind": "exclusive", "error": "container db of pod lab/a is named ..."},
                                     {"kind": "partition", "error": "the system partition's 3 containers ..."}],
                          "counts": {"system_partition_cpus": 2, "system_partition_containers": 3,
                                     "system_partition_request_millicores": 2500}}, 0.1, True)
    lines = samples(metrics.render())
    for line in ("cpu_manager_pinning_requests_total 2", "kubecpu_burstable_exclusive_allocations_total 1",
                 "kubecpu_exclusive_refusals_total 1", "kubecpu_system_partition_warnings_total 1",
                 "kubecpu_system_partition_cpus 2", "kubecpu_system_partition_containers 3",
                 "kubecpu_system_partition_request_millicores 2500", "kubecpu_update_errors_total 0"):
        assert line in lines, line
