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
from typing import Any, Dict, List, Optional, Sequence, TextIO

from ..errors import PodSpecError, StateError, UsageError
from ..kubelet.cpuset import CPUSet
from ..kubelet.discovery import discover
from ..kubelet.hints import container_hints, hints_document, pod_hints
from ..kubelet.kubelet_versions import kubelet_version
from ..kubelet.options import parse_option_args, parse_options, validate_for_machine
from ..kubelet.pod import Pod
from ..kubelet.pod_manifest import is_manifest, pod_document
from ..kubelet.policy import Policy, check_numa_nodes, plan
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology, parse_numa_distances
from ..kubelet.topology_manager import TopologyManager, parse_policy_options, parse_providers
from ..node.factory import build_manager, build_policy, check_cpus_known, kubelet_housekeeping
from ..node.manager import NodeManager
from ..node.metrics import Metrics
from ..node.state_store import StateStore
from ..operations.checkpoint_file import CheckpointFile
from ..operations.defrag import defrag_config
from ..operations.demo import run_demo
from ..runtime.cgroups import CgroupFS
from ..runtime.watch import Waker, open_watch
from ..services.agent import Agent, say
from .cli_args import build_parser, feature_gates, node_config, run_command
from .cli_checks import refuse
from .hook_cli import cmd_hook


# --- helpers ---------------------------------------------------------------------------------------------
def _read_text(path: str, what: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    if "\0" in path:  # open() would raise ValueError: no file is named so
        raise UsageError("cannot read %s %r: a path cannot hold a NUL character" % (what, path))
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
    config = node_config(args)
    return build_policy(topo, args.policy, args.reserved_cpus, config.num_reserved, parse_option_args(args.option),
                        what="--reserved-cpus", kubelet_minor=config.kubelet.minor)


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
    kubelet = kubelet_version(args.kubelet_version, feature_gates(args.feature_gate))
    options = parse_options(parse_option_args(args.option))._replace(kubelet_minor=kubelet.minor)
    check_cpus_known(topo, args.available, "--available")
    cpus = plan(topo, options, args.available, args.count, _affinity(topo, args.numa_affinity))
    _emit(out, {"cpus": str(cpus)})
    return 0


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
    config = node_config(args)
    return StateStore(args.state, policy_name, read_only=args.read_only or None,
                      kubelet_stopped=getattr(args, "kubelet_stopped", False), kubelet=config.kubelet,
                      kubelet_path=config.kubelet_state_path)


def _start(policy: Policy, state: CPUState, store: StateStore) -> None:
    try:
        policy.start(state)
    except StateError as exc:
        raise StateError("state file %s does not fit this node: %s" % (store.path, exc)) from None


def _manager(args: argparse.Namespace, topo: Topology) -> NodeManager:
    config = node_config(args)
    policy = _policy_for(args, topo)
    return NodeManager(topo, policy, _store(args, policy.name), options=config.options, sysfs_root=config.sysfs_root)


def read_pod(path: str, stdin: TextIO) -> Pod:
    """``--pod``: kubecpu's pod JSON, or a Kubernetes ``kind: Pod`` as JSON or (where PyYAML is installed) YAML."""
    where = "pod file %s" % ("<stdin>" if path == "-" else path)
    text = _read_text(path, "pod file", stdin)
    if text.lstrip()[:1] in ("{", "["):  # JSON (YAML reads it too, but JSON's errors are the ones to show)
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise PodSpecError("%s is not valid JSON: %s" % (where, exc)) from None
    else:
        doc = _yaml(text, where)
    return Pod.from_dict(pod_document(doc, where) if is_manifest(doc) else doc, where)


def _yaml(text: str, where: str) -> Any:
    """A YAML pod manifest through PyYAML's safe loader when this Python has it (the core itself needs nothing but
    the standard library: a node without PyYAML takes JSON, as ``kubectl get pod NAME -o json`` prints it)."""
    try:
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  # optional: Ansible's, and most distributions'
    except ImportError:
        raise PodSpecError("%s is not JSON, and this Python (%s) has no PyYAML to read YAML: give the pod as JSON "
                           "(kubectl get pod NAME -o json)" % (where, sys.executable)) from None
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # a safe loader
    except yaml.YAMLError as exc:
        raise PodSpecError("%s is neither JSON nor valid YAML: %s" % (where, " ".join(str(exc).split()))) from None


def cmd_allocate(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    pod = read_pod(args.pod, stdin)
    pod.container(args.container)
    topo = load_topology(args, stdin)
    manager = _manager(args, topo)
    plan = manager.allocate_pod(pod, args.container, _affinity(topo, args.numa_affinity))
    _emit(out, plan.result)
    return 0


def cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """A container's entry released; one the state does not hold is refused before the lock is taken (a typo in the
    uid would otherwise create the state file and its lock, and say it released nothing)."""
    manager = _manager(args, load_topology(args, stdin))
    state = manager.read_state()
    if state.get(args.pod_uid, args.container) is None:
        held = state.entries.get(args.pod_uid)
        if held:
            why = "pod %s holds exclusive CPUs for %s only" % (args.pod_uid, ", ".join(sorted(held)))
        else:
            why = "no pod with uid %s holds exclusive CPUs there" % args.pod_uid
        raise UsageError('nothing to release: %s (state file %s); the container "%s" is not released'
                         % (why, manager.store.path, args.container))
    plan = manager.release_entry(args.pod_uid, args.container)
    _emit(out, plan.result)
    return 0


# flag destination -> setting name, where they differ
def cmd_reconcile(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    config = node_config(args)
    topo = load_topology(args, stdin)
    manager = build_manager(config, with_runtime=True, topology=topo, service=args.loop)
    if args.loop:
        wakers = [] if args.no_watch else _wakers(manager, err)
        try:
            return Agent(manager, args.period, err, args.metrics_path, wakers=wakers).run()
        finally:
            for waker in wakers:
                waker.close()
    with manager:
        plan = manager.reconcile(apply=not args.check)
    doc = plan.to_dict()
    if args.metrics_path:
        metrics = Metrics()
        metrics.record(doc, plan.seconds, topo, plan.after, manager.policy.reserved)
        metrics.write(args.metrics_path)
    _emit(out, doc)
    return 0


def cmd_housekeeping(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """Beside a kubelet that pins CPUs itself: its checkpoint read, interrupts kept off its exclusive CPUs."""
    config = node_config(args)
    if config.options.irq_isolation == "off" and not config.options.cpu_power:
        raise UsageError("housekeeping has nothing to do with --irq-isolation off and without --cpu-power")
    housekeeping = kubelet_housekeeping(config, load_topology(args, stdin))
    if args.loop:
        watch, why = (None, "") if args.no_watch else open_watch(CgroupFS(config.cgroup_root))
        if why:
            say(err, "warning", why)
        try:
            return Agent(housekeeping, args.period, err, args.metrics_path, wakers=[watch] if watch else []).run()
        finally:
            if watch is not None:
                watch.close()
    plan = housekeeping.reconcile(apply=not args.check)
    doc = plan.to_dict()
    if args.metrics_path:
        metrics = Metrics()
        metrics.record(doc, plan.seconds, housekeeping.topology, plan.after, CPUSet())
        metrics.write(args.metrics_path)
    _emit(out, doc)
    return 0


def _wakers(manager: NodeManager, err: TextIO) -> List[Waker]:
    """What can wake the agent before its period: container cgroups (inotify), and the CRI's container events where
    the runtime streams them."""
    wakers: List[Waker] = []
    watch, why = open_watch(manager.cgroups)
    if watch is None:
        say(err, "warning", why)
    else:
        wakers.append(watch)
    stream = getattr(manager.runtime, "event_stream", None)
    if stream is not None:
        wakers.append(stream())
    return wakers


def cmd_nri(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    if not (len(args.plugin_index) == 2 and args.plugin_index.isdigit()):
        raise UsageError('invalid --plugin-index "%s": two digits, 00 to 99' % args.plugin_index)
    from ..services.nri_plugin import NRIPlugin, NRIView  # noqa: PLC0415  # only this command imports it

    view = NRIView()
    manager = build_manager(node_config(args), with_runtime=True, topology=load_topology(args, stdin), runtime=view,
                            service=True)
    plugin = NRIPlugin(manager, view, err, socket_path=args.socket, name=args.plugin_name, index=args.plugin_index,
                       metrics_path=args.metrics_path)
    return plugin.run()


def cmd_state(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    if args.rebuild:
        target = CheckpointFile(node_config(args), kubelet_stopped=args.kubelet_stopped,
                                topology=load_topology(args, stdin))
        result = target.run("rebuild", apply=not args.check)
        for problem in result["errors"]:
            err.write("kubecpu: %s\n" % problem["error"])
        if result["kept"]:
            err.write("kubecpu: the previous file is kept as %s\n" % result["kept"])
        _emit(out, result["state"])
        return 0
    topo = load_topology(args, stdin) if _has_topology(args) else None
    policy = _policy_for(args, topo) if topo is not None else None
    store = _store(args, policy.name if policy else args.policy)
    if not args.reset:  # a read: no lock, no file created or rewritten (a newer kubelet's format stays as it is)
        state = store.load_or_new()
        if policy is not None:
            _start(policy, state, store)
        _emit(out, state.to_dict())
        return 0
    with store.locked():
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


def cmd_defrag(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """Live on kubecpu's own state; on a read-only one (the kubelet's) the plan and the checkpoint to write."""
    config = node_config(args)
    plan, rewritten = defrag_config(config, check=args.check, max_moves=args.max_moves,
                                    topology=load_topology(args, stdin), budget=args.time_budget,
                                    keep_numa=args.keep_numa)
    doc = plan.to_dict()
    if rewritten is not None:
        doc["rewritten_state"] = rewritten
        doc["planned_from"] = (plan.result or {}).get("planned_from")
        err.write("kubecpu: %s is read-only: write rewritten_state with the kubelet stopped "
                  "(kubecpu.cpu_manager.cpu_manager_checkpoint action=write push=true planned_from=<planned_from>)\n"
                  % config.state_path)
    _emit(out, doc)
    return 1 if plan.errors else 0


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    return run_demo(args, load_topology(args, stdin), out)


COMMANDS = {"topology": cmd_topology, "plan": cmd_plan, "hints": cmd_hints, "merge": cmd_merge,
            "allocate": cmd_allocate, "release": cmd_release,
            "state": cmd_state, "nri": cmd_nri, "hook": cmd_hook, "demo": cmd_demo, "reconcile": cmd_reconcile,
            "defrag": cmd_defrag, "housekeeping": cmd_housekeeping}


def main(argv: Optional[Sequence[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         stdin: TextIO = sys.stdin) -> int:
    return run_command(build_parser(), COMMANDS, argv, out=out, err=err, stdin=stdin, refuse=refuse)
