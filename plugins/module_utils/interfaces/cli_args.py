# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu``'s command line: the sub-commands, their flags and how each flag's text is parsed (a bad flag is a
``UsageError``, exit 2), the JSON configuration file read as flags, the flags as a ``NodeConfig``, and how a command
runs (its errors as exit codes). The commands themselves are ``cli``'s (``hook_cli``'s for the OCI hook, which
starts with only what it needs: ``build_parser(only="hook")``; the NRI plugin's and the agent's modules are
imported only when their sub-commands are built)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO

from ..errors import ConfigError, KubecpuError, UsageError
from ..kubelet.cpuset import CPUSet
from ..kubelet.options import parse_option_args
from ..node.config import ManagerOptions, NodeConfig
from .cli_flags import (DEFAULT_NUM_RESERVED, KNOWN_GATES, count_arg, cpuset_arg, duration_arg, kubelet_args,
                        pod_assigned_arg, policy_args, runtime_args, seconds_arg, service_args, state_args,
                        topology_args, topology_manager_args, unlisted)
from .cli_help import shorten_usage, texts, unrecognized

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

Command = Callable[["argparse.Namespace", TextIO, TextIO, TextIO], int]

VERSION = "0.8.0"


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """Every sub-command, or with ``only="hook"`` that one alone (the hook's start-up)."""
    import argparse  # noqa: PLC0415  # here: the hook's own flags are read without it where they can be

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2 with usage
            self.print_usage(sys.stderr)
            raise UsageError("%s: error: %s" % (self.prog, message))

        def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
            """argparse's, but a word no flag of the sub-command takes is that sub-command's error (its usage)."""
            parsed, extras = self.parse_known_args(args, namespace)
            if extras:
                commands: Dict[str, argparse.ArgumentParser] = getattr(self, "commands", {})
                target = commands.get(getattr(parsed, "command", None) or "", self)
                target.error(unrecognized(target, extras))
            return parsed

    parser = _Parser(prog="kubecpu", description="Kubernetes-grade CPU pinning: the kubelet static CPU "
                     "manager policy on a node.")
    parser.add_argument("--version", action="version", version="kubecpu " + VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    parser.commands = sub.choices  # type: ignore[attr-defined]  # parse_args' sub-commands
    if only == "hook":
        _hook_parser(sub)
        return parser

    p = sub.add_parser("topology", **texts("topology"))
    topology_args(p)

    p = sub.add_parser("plan", **texts("plan"))
    topology_args(p)
    policy_args(p)
    kubelet_args(p)
    p.add_argument("--available", required=True, type=cpuset_arg, metavar="CPUSET", help="the free CPUs")
    p.add_argument("--count", required=True, type=count_arg, metavar="N", help="exclusive CPUs requested")
    p.add_argument("--numa-affinity", type=cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")

    p = sub.add_parser("hints", **texts("hints"))
    topology_args(p)
    policy_args(p)
    kubelet_args(p)
    unlisted(p, "--kubelet-version", "--feature-gate")  # the hints themselves are the same for 1.35-1.38
    p.add_argument("--available", required=True, type=cpuset_arg, metavar="CPUSET",
                   help="CPUs free for exclusive use (the default set minus the reserved CPUs)")
    p.add_argument("--count", required=True, type=count_arg, metavar="N", help="the guaranteed CPUs requested")
    p.add_argument("--reusable", type=cpuset_arg, default=CPUSet(), metavar="CPUSET",
                   help="CPUs of the pod's finished init containers")
    p.add_argument("--assigned", type=cpuset_arg, metavar="CPUSET", help="container scope: the CPUs it holds")
    p.add_argument("--scope", choices=("container", "pod"), default="container",
                   help="container: the hints for one container (default); pod: for the whole pod, as the Topology "
                        "Manager's pod scope asks")
    p.add_argument("--pod-assigned", action="append", type=pod_assigned_arg, default=[], metavar="R:CPUSET",
                   help="pod scope: a container holding CPUs (its request R and its CPUs); repeatable")

    p = sub.add_parser("merge", **texts("merge"))
    p.add_argument("--policy", required=True, metavar="POLICY", help="none, best-effort, restricted, single-numa-node")
    p.add_argument("--numa-nodes", required=True, type=cpuset_arg, metavar="LIST", help="the machine's NUMA nodes")
    p.add_argument("--hints", required=True, metavar="FILE", help="the providers' hints (JSON list); - reads stdin")
    p.add_argument("--numa-distances", metavar="FILE", help="JSON: node id -> distance row (prefer-closest-numa-nodes)")
    p.add_argument("--option", action="append", metavar="NAME[=VALUE]", default=[],
                   help="prefer-closest-numa-nodes=BOOL, max-allowable-numa-nodes=INT")

    p = sub.add_parser("allocate", **texts("allocate"))
    p.add_argument("--pod", required=True, metavar="FILE",
                   help="the pod: a Kubernetes kind: Pod (JSON, or YAML where PyYAML is installed) or kubecpu's pod "
                        "JSON; - reads stdin")
    p.add_argument("--container", required=True, metavar="NAME", help="the pod's container to allocate for (an "
                   "init container or a sidecar too)")
    p.add_argument("--numa-affinity", type=cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")
    state_args(p)
    topology_manager_args(p.add_argument_group("Topology Manager"))
    shorten_usage(p, ())

    p = sub.add_parser("release", **texts("release"))
    p.add_argument("--pod-uid", required=True, metavar="UID",
                   help="the pod's uid (metadata.uid; kubecpu state lists the pods it holds)")
    p.add_argument("--container", required=True, metavar="NAME",
                   help="the container whose exclusive CPUs go back to the shared pool")
    state_args(p)
    shorten_usage(p, ())

    p = sub.add_parser("state", **texts("state"))
    p.add_argument("--reset", action="store_true",
                   help="explicit recovery: move the current file aside and start from a fresh state")
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild the checkpoint from what runs (runtime and cgroupfs); the old file is kept aside")
    p.add_argument("--kubelet-stopped", action="store_true",
                   help="the kubelet is stopped: its own checkpoint may be rebuilt or reset")
    p.add_argument("--check", action="store_true", help="with --rebuild, print the file it would write")
    state_args(p)
    runtime_args(p, manager=False)
    unlisted(p, "--kubelet-state", "--force")  # a rebuild reads the runtime, whoever pins
    shorten_usage(p, ("--reset", "--rebuild", "--kubelet-stopped", "--check"))

    p = sub.add_parser("reconcile", **texts("reconcile"))
    p.add_argument("--check", action="store_true", help="only report the plan: change nothing")
    p.add_argument("--loop", action="store_true", help="run as the agent: a pass every --period until SIGTERM")
    p.add_argument("--period", type=duration_arg, default=10.0, metavar="DURATION",
                   help="time between passes with --loop (10s, 500ms, 1m; default 10s)")
    p.add_argument("--no-watch", action="store_true",
                   help="with --loop, pass every --period only (default: also when a container cgroup comes or goes)")
    service_args(p, "pass", '"period": "1s"')
    state_args(p)
    runtime_args(p)
    shorten_usage(p, ("--check", "--loop", "--period", "--config"))

    p = sub.add_parser("housekeeping", **texts("housekeeping"))
    p.add_argument("--check", action="store_true", help="only report what would change")
    p.add_argument("--loop", action="store_true", help="a pass every --period (and when a container cgroup comes or "
                   "goes) until SIGTERM")
    p.add_argument("--period", type=duration_arg, default=10.0, metavar="DURATION",
                   help="time between passes with --loop (default 10s)")
    p.add_argument("--no-watch", action="store_true", help="with --loop, pass every --period only")
    service_args(p, "pass", '"kubelet_state": "/var/lib/kubelet/cpu_manager_state"')
    state_args(p)
    runtime_args(p, kubelet_state="the kubelet's checkpoint: interrupts are kept off the CPUs it assigns "
                 "exclusively")
    p.set_defaults(irq_isolation="exclusive")  # after --irq-isolation was added: its default changed
    unlisted(p, "--policy", "--num-reserved", "--reserved-cpus", "--read-only",
             "--force", "--cache", "--isolated-cpus", "--align-memory", "--cpu-quota",
             "--besteffort-idle", "--cpu-burst", "--topology-manager-policy", "--topology-manager-scope",
             "--topology-manager-option", "--option", "--exclusive-burstable", "--system-partition",
             "--system-namespaces", "--system-priority-classes")  # the kubelet's checkpoint and the interrupts only
    shorten_usage(p, ("--check", "--loop", "--period", "--config"))

    p = sub.add_parser("defrag", **texts("defrag"))
    p.add_argument("--check", action="store_true", help="only print the moves: change nothing")
    p.add_argument("--max-moves", type=count_arg, metavar="N", help="at most N moves (default: as many as help)")
    p.add_argument("--time-budget", type=duration_arg, default=0.5, metavar="DURATION",
                   help="exact search time, then the best found (default 500ms)")
    p.add_argument("--keep-numa", action="store_true",
                   help="no container leaves its NUMA nodes (nor its pinned memory's)")
    state_args(p)
    runtime_args(p)
    shorten_usage(p, ("--check", "--max-moves", "--time-budget", "--keep-numa"))

    from ..runtime.nri_api import DEFAULT_INDEX, DEFAULT_NAME, DEFAULT_SOCKET  # noqa: PLC0415  # not the hook's

    p = sub.add_parser("nri", **texts("nri"))
    p.add_argument("--socket", default=DEFAULT_SOCKET, metavar="PATH",
                   help="the runtime's NRI socket (default %(default)s)")
    p.add_argument("--plugin-name", default=DEFAULT_NAME, metavar="NAME", help="plugin name (default %(default)s)")
    p.add_argument("--plugin-index", default=DEFAULT_INDEX, metavar="NN",
                   help="plugin index, two digits (default %(default)s)")
    service_args(p, "event", '"socket": "/x.sock"')
    state_args(p)
    runtime_args(p)
    unlisted(p, "--runtime", "--runtime-endpoint", "--crictl", "--runtime-timeout")  # the runtime is NRI's peer
    shorten_usage(p, ("--socket", "--config"))

    _hook_parser(sub)

    p = sub.add_parser("demo", **texts("demo"))
    topology_args(p)
    policy_args(p)
    p.add_argument("--num-reserved", type=count_arg, default=DEFAULT_NUM_RESERVED, metavar="N",
                   help="number of reserved CPUs, chosen by topology (default %d; the static policy refuses 0, as "
                        "the kubelet does)" % DEFAULT_NUM_RESERVED)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _hook_parser(sub: Any) -> None:
    import argparse  # noqa: PLC0415  # build_parser's

    p = sub.add_parser("hook", **texts("hook"))
    p.add_argument("--lock-timeout", type=seconds_arg, default=2.0, metavar="SECONDS",
                   help="refuse the container when the state lock is not had within this (default 2)")
    for flag in ("--period", "--socket", "--plugin-name", "--plugin-index"):  # the agent's and the plugin's own:
        p.add_argument(flag, help=argparse.SUPPRESS)  # accepted, so that their configuration file serves the hook
    service_args(p, "hook (not written: the hook runs once per container)", '"state": "/var/lib/kubecpu/state"')
    state_args(p)
    runtime_args(p)
    unlisted(p, "--runtime", "--runtime-endpoint", "--crictl", "--runtime-timeout", "--cache", "--align-memory",
             "--cpu-quota", "--besteffort-idle", "--cpu-burst", "--metrics-path")  # the cgroup's cpuset only: the
    # agent's pass sets the rest
    shorten_usage(p, ("--lock-timeout", "--config"))


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


_SETTING_NAMES = {"state": "state_path", "topology": "topology_path", "crictl": "crictl_path",
                  "kubelet_state": "kubelet_state_path", "cache": "cache_path"}


def node_config(args: argparse.Namespace) -> NodeConfig:
    """The flags as the node's settings (``NodeConfig`` validates each); without --num-reserved and --reserved-cpus,
    ``DEFAULT_NUM_RESERVED`` CPUs are reserved."""
    values = {_SETTING_NAMES.get(name, name): value for name, value in vars(args).items()}
    if "num_reserved" in values and values["num_reserved"] is None and not values.get("reserved_cpus"):
        values["num_reserved"] = DEFAULT_NUM_RESERVED
    values["policy_options"] = parse_option_args(getattr(args, "option", []))
    values["topology_manager_policy_options"] = parse_option_args(getattr(args, "topology_manager_option", []))
    values["feature_gates"] = feature_gates(getattr(args, "feature_gate", []))
    return NodeConfig.from_mapping(values)


def feature_gates(flags: Sequence[str]) -> Dict[str, str]:
    """``--feature-gate NAME=BOOL`` flags (their values are the configuration's to check); a gate kubecpu does not
    know is refused in the kubelet's words (component-base/featuregate), not ignored."""
    gates = {}
    for flag in flags:
        name, sep, value = flag.partition("=")
        if not sep:
            raise UsageError('--feature-gate %s: expected NAME=true or NAME=false' % flag)
        if name not in KNOWN_GATES:
            raise UsageError("--feature-gate %s: unrecognized feature gate: %s (the gates that change what kubecpu "
                             "does: %s)" % (flag, name, ", ".join(KNOWN_GATES)))
        gates[name] = value
    return gates


def run_command(parser: argparse.ArgumentParser, commands: Mapping[str, Command], argv: Optional[Sequence[str]], *,
                out: TextIO, err: TextIO, stdin: TextIO,
                refuse: Optional[Callable[[argparse.Namespace], None]] = None) -> int:
    """Parse (a ``--config`` file read as flags before the command line's own), ``refuse`` what cannot be done as
    asked, run the command; a configuration or usage error is exit 2, any other domain error exit 1, each one line
    on ``err``."""
    def parsed_and_run() -> int:
        args = parser.parse_args(argv)
        if getattr(args, "config", None):
            given = list(sys.argv[1:] if argv is None else argv)
            rest = given[given.index(args.command) + 1:]
            args = parser.parse_args([args.command] + config_arguments(args.config) + rest)
        if refuse is not None:
            refuse(args)
        return commands[args.command](args, out, err, stdin)

    return exit_code(parsed_and_run, err)


_OPTION_NAMES = ("time_budget", "max_moves")  # the modules' own options that the core's errors name


def as_flags(text: str) -> str:
    """An error's module option names (``reserved_cpus``) as the command line's flags (``--reserved-cpus``)."""
    flag_of = dict({setting: flag for flag, setting in _SETTING_NAMES.items()}, policy_options="option",
                   topology_manager_options="topology_manager_option", feature_gates="feature_gate")
    names = {name: "--" + flag_of.get(name, name).replace("_", "-")
             for name in NodeConfig._fields + ManagerOptions._fields + _OPTION_NAMES if "_" in name}
    pattern = r"\b(%s)\b" % "|".join(sorted(names, key=len, reverse=True))
    return re.sub(pattern, lambda match: names[match.group(1)], text)


def as_root(text: str, uid: Optional[int] = None) -> str:
    """An error that says "permission denied" to a process that is not root, with what to do: the runtime's socket,
    the state, cgroupfs and /proc/irq are root's."""
    uid = os.geteuid() if uid is None else uid
    if uid == 0 or "permission denied" not in text.lower():
        return text
    return ("%s (kubecpu runs as uid %d: the runtime's socket, the state, cgroupfs and /proc/irq are root's; run it "
            "as root)" % (text, uid))


def exit_code(call: Callable[[], int], err: TextIO) -> int:
    """``call``'s exit code; a configuration or usage error is exit 2, any other domain error exit 1, each one line
    on ``err``."""
    try:
        return call()
    except ConfigError as exc:
        err.write("%s\n" % as_root(as_flags(str(exc))))
        return 2
    except KubecpuError as exc:
        err.write("%s\n" % as_root(as_flags(str(exc))))
        return 1
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
