# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Prometheus textfile metrics of the agent, with the kubelet CPU manager's names (ALGORITHM.md section 15).

Written atomically (``atomic_write``: a temporary file, then a rename) for node_exporter's textfile collector.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Dict, List, Tuple

from ..atomic import atomic_write
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from .pod_views import NAMED

# A plan's errors of the options' own kinds, each its own counter (every other kind not named is an update's error)
_OWN_KINDS = {"exclusive": "kubecpu_exclusive_refusals_total", "partition": "kubecpu_system_partition_warnings_total"}

_HELP = {
    "cpu_manager_pinning_requests_total": ("counter", "Exclusive CPU allocations attempted."),
    "cpu_manager_pinning_errors_total": ("counter", "Exclusive CPU allocations that failed."),
    "cpu_manager_shared_pool_size_millicores": ("gauge", "Shared pool size without the reserved CPUs."),
    "cpu_manager_exclusive_cpu_allocation_count": ("gauge", "CPUs assigned exclusively."),
    "cpu_manager_allocation_per_numa": ("gauge", "Exclusively assigned CPUs per NUMA node."),
    "kubecpu_reconcile_passes_total": ("counter", "Reconcile passes, by result."),
    "kubecpu_reconcile_duration_seconds": ("gauge", "Wall time of the last reconcile pass."),
    "kubecpu_reconcile_last_success_timestamp_seconds": ("gauge", "When the last pass completed."),
    "kubecpu_runtime_calls_total": ("counter", "Container runtime calls, by call."),
    "kubecpu_cpuset_updates_total": ("counter", "Container updates pushed to the runtime."),
    "kubecpu_drift_corrections_total": ("counter", "Exclusive cpusets found changed in cgroupfs and re-applied."),
    "kubecpu_released_total": ("counter", "Assignments released because their pod or container is gone."),
    "kubecpu_update_errors_total": ("counter", "Runtime updates that failed."),
    "kubecpu_resizes_total": ("counter", "In-place resizes of exclusive CPUs carried out."),
    "kubecpu_resize_errors_total": ("counter", "In-place resizes refused or infeasible (retried every pass)."),
    "kubecpu_peer_errors_total": ("counter", "What the runtime sent that ended one request, one connection or one pass "
                                  "(never the process), by peer and kind."),
    "kubecpu_irq_affinity_updates_total": ("counter", "Interrupt affinities (and the default one) kubecpu changed to "
                                           "keep interrupts off exclusive CPUs or give released CPUs back."),
    "kubecpu_irq_affinity_refused": ("gauge", "Interrupts whose affinity names an exclusive CPU and that the kernel "
                                     "refused to move (managed interrupts), at the last scan."),
    "kubecpu_irq_errors_total": ("counter", "Passes whose interrupt isolation failed (procfs, irqbalance or the "
                                 "record file)."),
    "kubecpu_burstable_exclusive_allocations_total": ("counter", "Exclusive CPU allocations for containers a Burstable "
                                                      "pod's cpu-exclusive.kubecpu.io names."),
    "kubecpu_exclusive_refusals_total": ("counter", "Containers cpu-exclusive.kubecpu.io names that may not have "
                                         "exclusive CPUs (refused at creation, or left shared), by pass."),
    "kubecpu_system_partition_cpus": ("gauge", "The system partition's CPUs (the reserved ones)."),
    "kubecpu_system_partition_containers": ("gauge", "Shared containers of the system pods, on the system partition."),
    "kubecpu_system_partition_request_millicores": ("gauge", "What the system pods' running containers request."),
    "kubecpu_system_partition_warnings_total": ("counter", "Passes that found the system pods requesting more than "
                                                "the reserved CPUs, or no shared CPU beside them."),
    "kubecpu_cpu_power_cpus": ("gauge", "Exclusive CPUs whose C-state limit or cpufreq governor is set as their pod's "
                               "annotations ask, after the last pass."),
    "kubecpu_cpu_power_errors_total": ("counter", "Power settings not made: a CPU without the file or the governor, "
                                       "a write refused, the record file."),
}


class Metrics:
    def __init__(self) -> None:
        self.counters: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        self.gauges: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        self.gauges[(name, tuple(sorted(labels.items())))] = value

    def observe_pass(self, plan_doc: Dict[str, object], seconds: float, ok: bool) -> None:
        self.inc("kubecpu_reconcile_passes_total", result="success" if ok else "failure")
        self.set("kubecpu_reconcile_duration_seconds", round(seconds, 6))
        if ok:
            self.set("kubecpu_reconcile_last_success_timestamp_seconds", round(time.time(), 3))
        for call, count in dict(plan_doc.get("runtime_calls") or {}).items():  # type: ignore[call-overload]
            self.inc("kubecpu_runtime_calls_total", count, call=call)
        counts = dict(plan_doc.get("counts") or {})  # type: ignore[call-overload]
        followers = counts.get("followers", 0)
        for name in ("system_partition_cpus", "system_partition_containers", "system_partition_request_millicores"):
            if name in counts:
                self.set("kubecpu_" + name, counts[name])
        if followers:
            self.inc("kubecpu_cpuset_updates_total", followers)
        for action in list(plan_doc.get("actions") or []):  # type: ignore[call-overload]
            kind = action.get("action")
            if kind == "allocate":
                self.inc("cpu_manager_pinning_requests_total")
                if action.get("reason") == NAMED:
                    self.inc("kubecpu_burstable_exclusive_allocations_total")
            elif kind == "update":
                self.inc("kubecpu_cpuset_updates_total")
                if "drifted" in str(action.get("reason", "")):
                    self.inc("kubecpu_drift_corrections_total")
            elif kind == "release":
                self.inc("kubecpu_released_total")
            elif kind == "resize":
                self.inc("kubecpu_resizes_total")
        self.observe_housekeeping(dict(plan_doc.get("housekeeping") or {}))  # type: ignore[call-overload]
        power = dict(plan_doc.get("power") or {})  # type: ignore[call-overload]
        if "cpus" in power:
            self.set("kubecpu_cpu_power_cpus", len(CPUSet.parse(power["cpus"])))
        for error in list(plan_doc.get("errors") or []):  # type: ignore[call-overload]
            if error.get("kind") == "allocation":
                self.inc("cpu_manager_pinning_requests_total")
                self.inc("cpu_manager_pinning_errors_total")
            elif error.get("kind") == "resize":
                self.inc("kubecpu_resize_errors_total")
            elif error.get("kind") == "irq":
                self.inc("kubecpu_irq_errors_total")
            elif error.get("kind") in _OWN_KINDS:
                self.inc(_OWN_KINDS[str(error.get("kind"))])
            elif error.get("kind") == "power":
                self.inc("kubecpu_cpu_power_errors_total")
            else:
                self.inc("kubecpu_update_errors_total")

    def observe_housekeeping(self, report: Dict[str, Any]) -> None:
        """A pass's interrupt isolation (``IrqIsolation.apply``'s report); a deferred one is counted when done."""
        if report and not report.get("deferred"):
            self.inc("kubecpu_irq_affinity_updates_total", len(report.get("updated") or []))
            self.set("kubecpu_irq_affinity_refused", len(report.get("refused") or []))

    def record(self, plan_doc: Dict[str, object], seconds: float, topo: Topology, state: CPUState,
               reserved: CPUSet) -> None:
        """A completed pass: its actions and errors, and the state it left."""
        self.observe_pass(plan_doc, seconds, True)
        self.observe_state(topo, state, reserved)

    def observe_state(self, topo: Topology, state: CPUState, reserved: CPUSet) -> None:
        self.set("cpu_manager_shared_pool_size_millicores", len(state.default.difference(reserved)) * 1000)
        assigned = state.assigned()
        self.set("cpu_manager_exclusive_cpu_allocation_count", len(assigned))
        per_node = collections.Counter(topo.loc.get(cpu, (0, 0, -1, 0))[2] for cpu in assigned)
        for node in sorted(topo.numa_cpus):
            self.set("cpu_manager_allocation_per_numa", per_node.get(node, 0), numa_node=str(node))

    def render(self) -> str:
        lines: List[str] = []
        names = sorted({k[0] for k in self.counters} | {k[0] for k in self.gauges} | set(_HELP))
        for name in names:
            kind, text = _HELP.get(name, ("untyped", name))
            samples = sorted((k, v) for k, v in list(self.counters.items()) + list(self.gauges.items()) if k[0] == name)
            if not samples and kind == "counter":
                samples = [((name, ()), 0.0)]
            if not samples:
                continue
            lines.append("# HELP %s %s" % (name, text))
            lines.append("# TYPE %s %s" % (name, kind))
            for (_n, labels), value in samples:
                label_text = ",".join('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in labels)
                lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", _number(value)))
        return "\n".join(lines) + "\n"

    def write(self, path: str) -> None:
        """Atomically replace ``path`` (textfile collectors must never read a half-written file)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, self.render().encode("utf-8"), durable=False, mode=0o644)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
