# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu demo``: what the static policy gives a few sample pods on this node (nothing is written), and the table
the real-node demo (scripts/demo_node.py) prints too."""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict, NamedTuple, Sequence, TextIO, Tuple

from ..errors import AllocationError
from ..kubelet.options import parse_option_args
from ..kubelet.pod import Pod
from ..kubelet.policy import STATIC, StaticPolicy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology

SAMPLE_PODS: Tuple[Dict[str, Any], ...] = (  # the embedded demo's pods and the real-node demo's (scripts/demo_node.py)
    {"uid": "demo-0001", "namespace": "net", "name": "dpdk-forwarder", "containers": [
        {"name": "fwd", "cpu_request": "1", "cpu_limit": "1", "memory_request": "256Mi", "memory_limit": "256Mi"},
        {"name": "stats", "cpu_request": "500m", "cpu_limit": "500m", "memory_request": "64Mi",
         "memory_limit": "64Mi"}]},
    {"uid": "demo-0002", "namespace": "trading", "name": "matcher", "init_containers": [
        {"name": "warmup", "cpu_request": "1", "cpu_limit": "1", "memory_request": "256Mi",
         "memory_limit": "256Mi"}], "containers": [
        {"name": "engine", "cpu_request": "1", "cpu_limit": "1", "memory_request": "256Mi",
         "memory_limit": "256Mi"}]},
    {"uid": "demo-0003", "namespace": "web", "name": "frontend", "containers": [
        {"name": "nginx", "cpu_request": "250m", "memory_request": "64Mi"}]},
    {"uid": "demo-0004", "namespace": "batch", "name": "report", "containers": [{"name": "job"}]},
)


def init_notes() -> str:
    """What the table cannot say: an init container's CPUs are its pod's app containers' too, once it finished."""
    lines = []
    for doc in SAMPLE_PODS:
        for init in doc.get("init_containers", []):
            apps = ", ".join(item["name"] for item in doc["containers"])
            lines.append("%s/%s/%s is an init container: it finishes before %s starts, which then reuses its CPUs "
                         "(as the kubelet does).\n" % (doc["namespace"], doc["name"], init["name"], apps))
    return "".join(lines)


class Row(NamedTuple):
    """One container in the demo's table (the embedded demo and the real-node demo print the same table)."""

    name: str  # namespace/pod/container
    qos: str
    request: str  # the CPU request as written, "-" for none
    state: str  # "planned" (embedded), "running", "exited"
    pinned: str  # "yes", "no", "refused"
    cpus: str  # the CPUs it gets (embedded) or has (cgroupfs and the kernel), "-" for none
    refused: str = ""  # why, when pinned is "refused"


COLUMNS = ("POD/CONTAINER", "QOS", "CPU REQUEST", "STATE", "PINNED", "CPUS")


def node_line(topo: Topology) -> str:
    s = topo.summary()
    counts = [_plural(s[key], word) for key, word in (("cpus", "CPU"), ("cores", "core"), ("sockets", "socket"), (
        "numa_nodes", "NUMA node"), ("uncore_caches", "uncore cache"), ("threads_per_core", "thread"))]
    return "Node (%s): %s per core" % (topo.source, ", ".join(counts))


def table(rows: Sequence[Row]) -> str:
    """The table, then one line per refusal."""
    cells = [COLUMNS] + [(r.name, r.qos, r.request, r.state, r.pinned, r.cpus) for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in cells]
    lines += ["%s: refused: %s" % (r.name, r.refused) for r in rows if r.refused]
    return "\n".join(lines) + "\n"


def run_demo(args: argparse.Namespace, topo: Topology, out: TextIO) -> int:
    """The demo on ``topo``: a table, or with ``--json`` one JSON object."""
    count = min(args.num_reserved, len(topo.all_cpus))
    policy = StaticPolicy(topo, count, None, parse_option_args(args.option))
    state = CPUState(STATIC)
    policy.start(state)
    rows = []
    for doc in SAMPLE_PODS:
        pod = Pod.from_dict(doc)
        for container in pod.all_containers():
            row: Dict[str, Any] = {"pod": "%s/%s" % (pod.namespace, pod.name), "container": container.name,
                                   "qos": pod.qos_class(), "cpu_request": str(doc_request(doc, container.name))}
            try:
                result = policy.allocate(state, pod, container.name)
                row.update(cpus=str(result.cpus), exclusive=result.exclusive)
            except AllocationError as exc:
                row.update(cpus=None, exclusive=False, refused=str(exc))
            rows.append(row)
    for row in rows:  # a container without exclusive CPUs runs on the shared pool as these allocations left it
        if row["cpus"] is not None and not row["exclusive"]:
            row["cpus"] = str(state.default)
    report: Dict[str, Any] = {
        "topology": dict(topo.summary(), source=topo.source), "reserved": str(policy.reserved),
        "options": policy.options.enabled(), "containers": rows, "shared_pool": str(state.default),
        "checkpoint": state.to_dict()}
    if args.json:
        out.write(json.dumps(report) + "\n")
        return 0
    out.write(node_line(topo) + "\n")
    options = ", ".join(policy.options.enabled()) or "none"
    out.write("Static policy: reserved CPUs %s, options: %s\n\n" % (policy.reserved or "none", options))
    out.write(table([Row("%s/%s" % (r["pod"], r["container"]), r["qos"], r["cpu_request"], "planned",
                         "refused" if r["cpus"] is None else "yes" if r["exclusive"] else "no", r["cpus"] or "-",
                         r.get("refused", "")) for r in rows]))
    out.write(init_notes())
    out.write("\nShared pool after these allocations: %s\n" % (state.default or "(empty)"))
    return 0


def _plural(count: int, word: str) -> str:
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def doc_request(doc: Dict[str, Any], name: str) -> str:
    for item in doc.get("init_containers", []) + doc["containers"]:
        if item["name"] == name:
            return item.get("cpu_request") or item.get("cpu_limit") or "-"
    return "-"
