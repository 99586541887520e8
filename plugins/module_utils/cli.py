# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu``: the node agent command line on the same core as the Ansible modules.

Exit codes: 0 success; 1 the request was refused (allocation error, invalid or corrupt state, store
error); 2 bad arguments or configuration (unparsable sets, unknown options, reservation mismatch).
Machine output is one JSON object on stdout; errors go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from .cpuset import CPUSet
from .discovery import discover
from .errors import (AllocationError, CheckpointError, CPUSetError, KubecpuError, OptionError, PodSpecError,
                     PolicyError, StateError, StoreError, TopologyError)
from .options import ALL_OPTIONS, parse_option_args, parse_options
from .pod import Pod
from .policy import POLICY_NAMES, STATIC, Policy, StaticPolicy, check_numa_nodes, new_policy, plan
from .state import CPUState
from .state_store import DEFAULT_PATH, StateStore
from .topology import Topology

REFUSED = (AllocationError, StateError, CheckpointError, StoreError)
VERSION = "0.1.0"


class UsageError(KubecpuError):
    """Bad command-line arguments (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2 with usage
        self.print_usage(sys.stderr)
        raise UsageError("%s: error: %s" % (self.prog, message))


def _cpuset_arg(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('invalid count "%s": a whole number is expected' % text) from None
    if value < 0:
        raise argparse.ArgumentTypeError('invalid count "%s": must not be negative' % text)
    return value


def _topology_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--topology", metavar="FILE", help="topology JSON (kubecpu.topology/v1); - reads stdin")
    group.add_argument("--sysfs-root", metavar="DIR", help="discover from sysfs below DIR (default /)")


def _policy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--option", action="append", metavar="NAME[=VALUE]", default=[],
                        help="static policy option (%s); a bare name means true" % ", ".join(ALL_OPTIONS))


def _state_args(parser: argparse.ArgumentParser) -> None:
    _topology_args(parser)
    _policy_args(parser)
    parser.add_argument("--state", metavar="FILE", default=DEFAULT_PATH,
                        help="checkpoint file (default %(default)s)")
    parser.add_argument("--policy", choices=POLICY_NAMES, default=STATIC, help="CPU manager policy")
    parser.add_argument("--num-reserved", type=_count_arg, metavar="N",
                        help="number of reserved CPUs, chosen by topology unless --reserved-cpus lists them")
    parser.add_argument("--reserved-cpus", type=_cpuset_arg, metavar="CPUSET",
                        help="explicit reserved CPUs (alone, implies --num-reserved)")
    parser.add_argument("--read-only", action="store_true",
                        help="never write the state file (implied for the kubelet's own checkpoint)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kubecpu", description="Kubernetes-grade CPU pinning: the kubelet static CPU "
                     "manager policy on a node.")
    parser.add_argument("--version", action="version", version="kubecpu " + VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("topology", help="print this node's CPU topology as JSON")
    _topology_args(p)

    p = sub.add_parser("plan", help="what the static policy would give a container asking for N CPUs")
    _topology_args(p)
    _policy_args(p)
    p.add_argument("--available", required=True, type=_cpuset_arg, metavar="CPUSET", help="the free CPUs")
    p.add_argument("--count", required=True, type=_count_arg, metavar="N", help="exclusive CPUs requested")
    p.add_argument("--numa-affinity", type=_cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")

    p = sub.add_parser("allocate", help="allocate CPUs for a container and record them in the state")
    _state_args(p)
    p.add_argument("--pod", required=True, metavar="FILE", help="pod JSON; - reads stdin")
    p.add_argument("--container", required=True, metavar="NAME")
    p.add_argument("--numa-affinity", type=_cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")

    p = sub.add_parser("release", help="release a container's exclusive CPUs")
    _state_args(p)
    p.add_argument("--pod-uid", required=True, metavar="UID")
    p.add_argument("--container", required=True, metavar="NAME")

    p = sub.add_parser("state", help="print (and with a topology, validate) the checkpoint")
    _state_args(p)
    p.add_argument("--reset", action="store_true",
                   help="explicit recovery: move the current file aside and start from a fresh state")

    p = sub.add_parser("demo", help="discover this node and show what the static policy gives sample pods")
    _topology_args(p)
    _policy_args(p)
    p.add_argument("--num-reserved", type=_count_arg, default=1, metavar="N", help="reserved CPUs (default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


# --- helpers ---------------------------------------------------------------------------------------------
def _read_text(path: str, what: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError("cannot read %s %s: %s" % (what, path, exc.strerror or exc)) from None


def load_topology(args: argparse.Namespace, stdin: TextIO) -> Topology:
    if getattr(args, "topology", None):
        return Topology.from_json(_read_text(args.topology, "topology file", stdin),
                                  "topology file %s" % ("<stdin>" if args.topology == "-" else args.topology))
    return discover(args.sysfs_root or "/")


def _has_topology(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "topology", None) or getattr(args, "sysfs_root", None))


def _check_cpus_known(topo: Topology, cpus: CPUSet, what: str) -> None:
    offline = cpus.intersection(topo.offline_cpus)
    unknown = cpus.difference(topo.all_cpus).difference(offline)
    if offline:
        raise TopologyError("%s lists offline CPU(s) %s" % (what, offline))
    if unknown:
        raise TopologyError("%s lists CPU(s) %s that are not in the topology (online CPUs: %s)"
                            % (what, unknown, topo.all_cpus))


def _policy_for(args: argparse.Namespace, topo: Topology) -> Policy:
    raw = parse_option_args(args.option)
    if args.policy != STATIC:
        return new_policy(args.policy, topo, raw_options=raw)
    reserved: Optional[CPUSet] = args.reserved_cpus
    if reserved:
        _check_cpus_known(topo, reserved, "--reserved-cpus")
    count = args.num_reserved if args.num_reserved is not None else (len(reserved) if reserved else 0)
    return new_policy(STATIC, topo, count, reserved, raw)


def _affinity(topo: Topology, nodes: Optional[CPUSet]) -> Optional[List[int]]:
    return None if nodes is None else list(check_numa_nodes(topo, nodes))


def _emit(out: TextIO, doc: Dict[str, Any]) -> None:
    out.write(json.dumps(doc) + "\n")


# --- commands ---------------------------------------------------------------------------------------------
def cmd_topology(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    out.write(load_topology(args, stdin).to_json())
    return 0


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    topo = load_topology(args, stdin)
    options = parse_options(parse_option_args(args.option))
    _check_cpus_known(topo, args.available, "--available")
    cpus = plan(topo, options, args.available, args.count, _affinity(topo, args.numa_affinity))
    _emit(out, {"cpus": str(cpus)})
    return 0


def _store(args: argparse.Namespace, policy_name: str) -> StateStore:
    return StateStore(args.state, policy_name, read_only=args.read_only or None)


def _start(policy: Policy, state: CPUState, store: StateStore) -> None:
    try:
        policy.start(state)
    except StateError as exc:
        raise StateError("state file %s does not fit this node: %s" % (store.path, exc)) from None


def _commit(store: StateStore, before: CPUState, state: CPUState) -> None:
    """Persist a changed state; a read-only store refuses any change."""
    if not store.read_only:
        store.save(state)
    elif state != before:
        raise StoreError("state file %s is read-only: the change was not recorded" % store.path)


def cmd_allocate(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    try:
        pod_doc = json.loads(_read_text(args.pod, "pod file", stdin))
    except ValueError as exc:
        raise PodSpecError("pod file %s is not valid JSON: %s" % (args.pod, exc)) from None
    pod = Pod.from_dict(pod_doc, "pod file %s" % args.pod)
    pod.container(args.container)
    topo = load_topology(args, stdin)
    policy = _policy_for(args, topo)
    affinity = _affinity(topo, args.numa_affinity)
    store = _store(args, policy.name)
    with store.locked():
        state = store.load_or_new()
        _start(policy, state, store)
        before = state.copy()
        result = policy.allocate(state, pod, args.container, affinity)
        _commit(store, before, state)
    _emit(out, {"cpus": str(result.cpus), "exclusive": result.exclusive})
    return 0


def cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    topo = load_topology(args, stdin)
    policy = _policy_for(args, topo)
    store = _store(args, policy.name)
    with store.locked():
        state = store.load_or_new()
        _start(policy, state, store)
        before = state.copy()
        released = policy.remove_container(state, args.pod_uid, args.container)
        _commit(store, before, state)
    _emit(out, {"released": str(released)})
    return 0


def cmd_state(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    topo = load_topology(args, stdin) if _has_topology(args) else None
    policy = _policy_for(args, topo) if topo is not None else None
    store = _store(args, policy.name if policy else args.policy)
    with store.locked():
        if args.reset:
            aside = store.reset()
            err.write("kubecpu: %s\n" % ("moved %s aside to %s" % (store.path, aside) if aside
                                         else "%s did not exist; nothing to move aside" % store.path))
        state = store.load_or_new()
        if policy is not None:
            _start(policy, state, store)
        if not store.read_only:
            store.save(state)
    _emit(out, state.to_dict())
    return 0


SAMPLE_PODS: Tuple[Dict[str, Any], ...] = (
    {"uid": "demo-0001", "namespace": "net", "name": "dpdk-forwarder", "containers": [
        {"name": "fwd", "cpu_request": "2", "cpu_limit": "2", "memory_request": "1Gi", "memory_limit": "1Gi"}]},
    {"uid": "demo-0002", "namespace": "trading", "name": "matcher", "init_containers": [
        {"name": "warmup", "cpu_request": "1", "cpu_limit": "1", "memory_request": "256Mi",
         "memory_limit": "256Mi"}], "containers": [
        {"name": "engine", "cpu_request": "1", "cpu_limit": "1", "memory_request": "512Mi",
         "memory_limit": "512Mi"}]},
    {"uid": "demo-0003", "namespace": "ml", "name": "inference", "containers": [
        {"name": "model", "cpu_request": "1500m", "cpu_limit": "1500m", "memory_request": "2Gi",
         "memory_limit": "2Gi"}]},
    {"uid": "demo-0004", "namespace": "web", "name": "frontend", "containers": [
        {"name": "nginx", "cpu_request": "250m", "memory_request": "64Mi"}]},
)


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    topo = load_topology(args, stdin)
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
    report: Dict[str, Any] = {
        "topology": dict(topo.summary(), source=topo.source), "reserved": str(policy.reserved),
        "options": policy.options.enabled(), "containers": rows, "shared_pool": str(state.default),
        "checkpoint": state.to_dict()}
    if args.json:
        _emit(out, report)
        return 0
    s = topo.summary()
    counts = [_plural(s[key], word) for key, word in (("cpus", "CPU"), ("cores", "core"), ("sockets", "socket"), (
        "numa_nodes", "NUMA node"), ("uncore_caches", "uncore cache"), ("threads_per_core", "thread"))]
    out.write("Node (%s): %s per core\n" % (topo.source, ", ".join(counts)))
    options = ", ".join(policy.options.enabled()) or "none"
    out.write("Static policy: reserved CPUs %s, options: %s\n\n" % (policy.reserved or "none", options))
    out.write("%-26s %-10s %-11s %-8s %s\n" % ("POD/CONTAINER", "QOS", "CPU REQUEST", "PINNED", "CPUS"))
    for row in rows:
        cpus = row["cpus"] if row["cpus"] is not None else "refused: " + row["refused"]
        name = "%s/%s" % (row["pod"], row["container"])
        pinned = "yes" if row["exclusive"] else "no"
        out.write("%-26s %-10s %-11s %-8s %s\n" % (name, row["qos"], row["cpu_request"], pinned, cpus))
    out.write("\nShared pool after these allocations: %s\n" % (state.default or "(empty)"))
    return 0


def _plural(count: int, word: str) -> str:
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def doc_request(doc: Dict[str, Any], name: str) -> str:
    for item in doc.get("init_containers", []) + doc["containers"]:
        if item["name"] == name:
            return item.get("cpu_request") or item.get("cpu_limit") or "-"
    return "-"


COMMANDS = {"topology": cmd_topology, "plan": cmd_plan, "allocate": cmd_allocate, "release": cmd_release,
            "state": cmd_state, "demo": cmd_demo}


def main(argv: Optional[Sequence[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         stdin: TextIO = sys.stdin) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, out, err, stdin)
    except REFUSED as exc:
        err.write("%s\n" % exc)
        return 1
    except (UsageError, OptionError, PolicyError, CPUSetError, TopologyError, PodSpecError) as exc:
        err.write("%s\n" % exc)
        return 2
    except KubecpuError as exc:
        err.write("%s\n" % exc)
        return 1
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
