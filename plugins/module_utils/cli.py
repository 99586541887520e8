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

from .agent import Agent, parse_duration
from .config import (DEFAULT_CGROUP_ROOT, DEFAULT_STATE_PATH, DEFAULT_TIMEOUT, ISOLATED_MODES, KUBELET_STATE_PATH,
                     QUOTA_MODES, RUNTIMES, NodeConfig)
from .cpuset import CPUSet
from .demo import run_demo
from .discovery import discover
from .errors import ConfigError, CPUSetError, KubecpuError, PodSpecError, StateError, UsageError
from .hints import container_hints, hints_document, pod_hints
from .manager import NodeManager
from .metrics import Metrics
from .node import build_manager, build_policy, check_cpus_known
from .options import ALL_OPTIONS, parse_option_args, parse_options, validate_for_machine
from .pod import Pod
from .policy import POLICY_NAMES, STATIC, Policy, check_numa_nodes, plan
from .state import CPUState
from .state_store import StateStore
from .topology import Topology, parse_numa_distances
from .topology_manager import POLICIES, SCOPES, TopologyManager, parse_policy_options, parse_providers

VERSION = "0.3.0"


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
    parser.add_argument("--state", metavar="FILE", default=DEFAULT_STATE_PATH,
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

    p = sub.add_parser("hints", help="the CPU manager's topology hints for a request (GetTopologyHints)")
    _topology_args(p)
    _policy_args(p)
    p.add_argument("--available", required=True, type=_cpuset_arg, metavar="CPUSET",
                   help="CPUs free for exclusive use (the default set minus the reserved CPUs)")
    p.add_argument("--count", required=True, type=_count_arg, metavar="N", help="the guaranteed CPUs requested")
    p.add_argument("--reusable", type=_cpuset_arg, default=CPUSet(), metavar="CPUSET",
                   help="CPUs of the pod's finished init containers")
    p.add_argument("--assigned", type=_cpuset_arg, metavar="CPUSET", help="container scope: the CPUs it holds")
    p.add_argument("--scope", choices=("container", "pod"), default="container")
    p.add_argument("--pod-assigned", action="append", type=_pod_assigned_arg, default=[], metavar="R:CPUSET",
                   help="pod scope: a container holding CPUs (its request R and its CPUs); repeatable")

    p = sub.add_parser("merge", help="the Topology Manager's merge and admission of hint providers' answers")
    p.add_argument("--policy", required=True, metavar="POLICY", help="none, best-effort, restricted, single-numa-node")
    p.add_argument("--numa-nodes", required=True, type=_cpuset_arg, metavar="LIST", help="the machine's NUMA nodes")
    p.add_argument("--hints", required=True, metavar="FILE", help="the providers' hints (JSON list); - reads stdin")
    p.add_argument("--numa-distances", metavar="FILE", help="JSON: node id -> distance row (prefer-closest-numa-nodes)")
    p.add_argument("--option", action="append", metavar="NAME[=VALUE]", default=[],
                   help="prefer-closest-numa-nodes=BOOL, max-allowable-numa-nodes=INT")

    p = sub.add_parser("allocate", help="allocate CPUs for a container and record them in the state")
    _state_args(p)
    p.add_argument("--pod", required=True, metavar="FILE", help="pod JSON; - reads stdin")
    p.add_argument("--container", required=True, metavar="NAME")
    p.add_argument("--numa-affinity", type=_cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")
    _topology_manager_args(p)

    p = sub.add_parser("release", help="release a container's exclusive CPUs")
    _state_args(p)
    p.add_argument("--pod-uid", required=True, metavar="UID")
    p.add_argument("--container", required=True, metavar="NAME")

    p = sub.add_parser("state", help="print (and with a topology, validate) the checkpoint")
    _state_args(p)
    p.add_argument("--reset", action="store_true",
                   help="explicit recovery: move the current file aside and start from a fresh state")

    p = sub.add_parser("reconcile", help="one reconcile pass against the container runtime (or --loop: the agent)")
    _state_args(p)
    _runtime_args(p)
    p.add_argument("--loop", action="store_true", help="run as the agent: a pass every --period until SIGTERM")
    p.add_argument("--period", type=_duration_arg, default=10.0, metavar="DURATION",
                   help="time between passes with --loop (10s, 500ms, 1m; default 10s)")
    p.add_argument("--metrics-path", metavar="FILE", help="write Prometheus textfile metrics here after each pass")
    p.add_argument("--check", action="store_true", help="only report the plan: change nothing")
    p.add_argument("--config", metavar="FILE",
                   help="JSON object of these options by long name (\"period\": \"1s\"); flags given here win")

    p = sub.add_parser("demo", help="discover this node and show what the static policy gives sample pods")
    _topology_args(p)
    _policy_args(p)
    p.add_argument("--num-reserved", type=_count_arg, default=1, metavar="N", help="reserved CPUs (default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds_arg(text: str) -> float:
    """A number of seconds (its range is the configuration's to check)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('invalid timeout "%s": seconds expected' % text) from None


def _runtime_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", choices=RUNTIMES, default="crictl", help="runtime backend (default crictl)")
    parser.add_argument("--runtime-endpoint", metavar="URL",
                        help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock (default: what crictl uses)")
    parser.add_argument("--crictl", default="crictl", metavar="PATH", help="crictl binary (default: from PATH)")
    parser.add_argument("--runtime-timeout", type=_seconds_arg, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="timeout of each runtime call (default 2)")
    parser.add_argument("--cgroup-root", default=DEFAULT_CGROUP_ROOT, metavar="DIR",
                        help="cgroupfs mount (default %(default)s)")
    parser.add_argument("--kubelet-state", default=KUBELET_STATE_PATH, metavar="FILE",
                        help="the kubelet's checkpoint: kubecpu refuses to act when it says static")
    parser.add_argument("--force", action="store_true", help="act even though the kubelet pins CPUs itself")
    parser.add_argument("--cache", metavar="FILE", help="container cache (default <state>.containers.json)")
    parser.add_argument("--isolated-cpus", choices=ISOLATED_MODES, default="ignore",
                        help="take exclusive CPUs from the isolcpus set first (prefer) or only (only)")
    parser.add_argument("--align-memory", action="store_true",
                        help="set cpuset.mems of pinned containers to the NUMA nodes of their CPUs")
    parser.add_argument("--cpu-quota", choices=QUOTA_MODES, default="keep",
                        help="unlimited: no CFS quota for exclusively pinned containers and their pods")
    _topology_manager_args(parser)


def _topology_manager_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology-manager-policy", choices=POLICIES, default="none",
                        help="merge the CPU hints under this policy first and allocate inside the merged affinity")
    parser.add_argument("--topology-manager-scope", choices=SCOPES, default="container")
    parser.add_argument("--topology-manager-option", action="append", default=[], metavar="NAME[=VALUE]",
                        help="prefer-closest-numa-nodes, max-allowable-numa-nodes=N")


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


def _policy_for(args: argparse.Namespace, topo: Topology) -> Policy:
    return build_policy(topo, args.policy, args.reserved_cpus, args.num_reserved, parse_option_args(args.option),
                        what="--reserved-cpus")


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
    check_cpus_known(topo, args.available, "--available")
    cpus = plan(topo, options, args.available, args.count, _affinity(topo, args.numa_affinity))
    _emit(out, {"cpus": str(cpus)})
    return 0


def _pod_assigned_arg(text: str) -> Tuple[int, CPUSet]:
    request, sep, cpus = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError('invalid --pod-assigned "%s": expected R:CPUSET' % text)
    return _count_arg(request), _cpuset_arg(cpus)


def cmd_hints(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    if args.scope == "pod" and args.assigned is not None:
        raise UsageError("--assigned is for container scope; use --pod-assigned R:CPUSET with --scope pod")
    if args.scope == "container" and args.pod_assigned:
        raise UsageError("--pod-assigned needs --scope pod")
    topo = load_topology(args, stdin)
    options = parse_options(parse_option_args(args.option))
    validate_for_machine(options, topo.num_sockets, topo.num_numa)
    if args.scope == "pod":
        found = pod_hints(topo, options, args.available, args.count, reusable=args.reusable,
                          assigned=args.pod_assigned)
    else:
        found = container_hints(topo, options, args.available, args.count, reusable=args.reusable,
                                assigned=args.assigned)
    _emit(out, hints_document(found))
    return 0


def cmd_merge(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    if not args.numa_nodes:
        raise UsageError("--numa-nodes must list at least one NUMA node")
    raw = parse_option_args(args.option)
    providers = parse_providers(_read_json(args.hints, "hints file", stdin), "hints file")
    distances = None
    if args.policy != "none" and parse_policy_options(raw).prefer_closest and args.numa_distances:
        distances = parse_numa_distances(_read_json(args.numa_distances, "NUMA distances file", stdin),
                                         "NUMA distances file %s" % args.numa_distances)
    manager = TopologyManager(args.policy, sorted(args.numa_nodes), raw, distances)
    _emit(out, manager.merge(providers).to_dict())
    return 0


def _read_json(path: str, what: str, stdin: TextIO) -> Any:
    text = _read_text(path, what, stdin)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError("%s %s is not valid JSON: %s" % (what, path, exc)) from None


def _store(args: argparse.Namespace, policy_name: str) -> StateStore:
    return StateStore(args.state, policy_name, read_only=args.read_only or None)


def _start(policy: Policy, state: CPUState, store: StateStore) -> None:
    try:
        policy.start(state)
    except StateError as exc:
        raise StateError("state file %s does not fit this node: %s" % (store.path, exc)) from None


def _manager(args: argparse.Namespace, topo: Topology) -> NodeManager:
    config = _node_config(args)
    policy = _policy_for(args, topo)
    return NodeManager(topo, policy, _store(args, policy.name), options=config.options)


def cmd_allocate(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    try:
        pod_doc = json.loads(_read_text(args.pod, "pod file", stdin))
    except ValueError as exc:
        raise PodSpecError("pod file %s is not valid JSON: %s" % (args.pod, exc)) from None
    pod = Pod.from_dict(pod_doc, "pod file %s" % args.pod)
    pod.container(args.container)
    topo = load_topology(args, stdin)
    manager = _manager(args, topo)
    plan = manager.allocate_pod(pod, args.container, _affinity(topo, args.numa_affinity))
    _emit(out, plan.result)
    return 0


def cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    plan = _manager(args, load_topology(args, stdin)).release_entry(args.pod_uid, args.container)
    _emit(out, plan.result)
    return 0


# flag destination -> setting name, where they differ
_SETTING_NAMES = {"state": "state_path", "topology": "topology_path", "crictl": "crictl_path",
                  "kubelet_state": "kubelet_state_path", "cache": "cache_path"}


def _node_config(args: argparse.Namespace) -> NodeConfig:
    """The flags as the node's settings (``NodeConfig`` validates each)."""
    values = {_SETTING_NAMES.get(name, name): value for name, value in vars(args).items()}
    values["policy_options"] = parse_option_args(getattr(args, "option", []))
    values["topology_manager_policy_options"] = parse_option_args(getattr(args, "topology_manager_option", []))
    return NodeConfig.from_mapping(values)


def cmd_reconcile(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    config = _node_config(args)
    topo = load_topology(args, stdin)
    manager = build_manager(config, with_runtime=True, topology=topo)
    if args.loop:
        return Agent(manager, args.period, err, args.metrics_path).run()
    with manager:
        plan = manager.reconcile(apply=not args.check)
    doc = plan.to_dict()
    if args.metrics_path:
        metrics = Metrics()
        metrics.record(doc, plan.seconds, topo, plan.after, manager.policy.reserved)
        metrics.write(args.metrics_path)
    _emit(out, doc)
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


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    return run_demo(args, load_topology(args, stdin), out)


COMMANDS = {"topology": cmd_topology, "plan": cmd_plan, "hints": cmd_hints, "merge": cmd_merge,
            "allocate": cmd_allocate, "release": cmd_release,
            "state": cmd_state, "demo": cmd_demo, "reconcile": cmd_reconcile}


def config_arguments(path: str) -> List[str]:
    """A JSON configuration file as command-line arguments (validated by the same parser as the flags)."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise UsageError("cannot read configuration file %s: %s" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise UsageError("configuration file %s is not valid JSON: %s" % (path, exc)) from None
    if not isinstance(doc, dict):
        raise UsageError("configuration file %s must hold a JSON object of option names to values" % path)
    argv: List[str] = []
    for key, value in doc.items():
        flag = "--" + str(key).replace("_", "-")
        if flag == "--config" or not str(key).replace("_", "-").replace("-", "").isalnum():
            raise UsageError("configuration file %s: unknown option %r" % (path, key))
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is True:
                argv.append(flag)
            elif item is None or item is False:
                continue
            elif isinstance(item, (str, int, float)):
                argv.append("%s=%s" % (flag, item))
            else:
                raise UsageError("configuration file %s: option %s must be a string, number, boolean or list"
                                 % (path, key))
    return argv


def main(argv: Optional[Sequence[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         stdin: TextIO = sys.stdin) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "config", None):
            given = list(sys.argv[1:] if argv is None else argv)
            rest = given[given.index(args.command) + 1:]
            args = parser.parse_args([args.command] + config_arguments(args.config) + rest)
        return COMMANDS[args.command](args, out, err, stdin)
    except ConfigError as exc:
        err.write("%s\n" % exc)
        return 2
    except KubecpuError as exc:
        err.write("%s\n" % exc)
        return 1
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
