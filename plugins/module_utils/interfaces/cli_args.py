# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu``'s command line: the sub-commands, their flags and how each flag's text is parsed (a bad flag is a
``UsageError``, exit 2), the JSON configuration file read as flags, the flags as a ``NodeConfig``, and how a command
runs (its errors as exit codes). The commands themselves are ``cli``'s (``hook_cli``'s for the OCI hook, which
starts with only what it needs: ``build_parser(only="hook")``; the NRI plugin's and the agent's modules are
imported only when their sub-commands are built)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from ..errors import ConfigError, CPUSetError, KubecpuError, UsageError
from ..kubelet.cpuset import CPUSet
from ..kubelet.options import ALL_OPTIONS, parse_option_args
from ..kubelet.policy import POLICY_NAMES, STATIC
from ..kubelet.topology_manager import POLICIES, SCOPES
from ..node.config import (DEFAULT_CGROUP_ROOT, DEFAULT_STATE_PATH, IRQ_MODES, ISOLATED_MODES, KUBELET_STATE_PATH,
                           QUOTA_MODES, RUNTIMES, ManagerOptions, NodeConfig)
from ..runtime.model import DEFAULT_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

Command = Callable[["argparse.Namespace", TextIO, TextIO, TextIO], int]

VERSION = "0.8.0"
DEFAULT_NUM_RESERVED = 1  # every sub-command's --num-reserved when --reserved-cpus does not list them either


def _bad_value(message: str) -> Exception:
    """argparse's error for a flag's bad value (argparse imported then: the OCI hook's start-up does without it)."""
    import argparse  # noqa: PLC0415

    return argparse.ArgumentTypeError(message)


def _cpuset_arg(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise _bad_value(str(exc)) from None


def _count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _bad_value('invalid count "%s": a whole number is expected' % text) from None
    if value < 0:
        raise _bad_value('invalid count "%s": must not be negative' % text)
    return value


def _topology_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--topology", metavar="FILE", help="topology JSON (kubecpu.topology/v1); - reads stdin")
    group.add_argument("--sysfs-root", metavar="DIR", help="discover from sysfs below DIR (default /); /proc/irq "
                       "is read below it too")


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
                        help="number of reserved CPUs, chosen by topology unless --reserved-cpus lists them "
                             "(default %d; the static policy refuses 0, as the kubelet does)" % DEFAULT_NUM_RESERVED)
    parser.add_argument("--reserved-cpus", type=_cpuset_arg, metavar="CPUSET",
                        help="explicit reserved CPUs (alone, implies --num-reserved)")
    parser.add_argument("--read-only", action="store_true",
                        help="never write the state file (implied for the kubelet's own checkpoint)")
    _kubelet_args(parser)


def _kubelet_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubelet-version", metavar="X.Y",
                        help="the kubelet whose checkpoint format and allocation rules apply: 1.35 (default), 1.36, "
                             "1.37, 1.38")
    parser.add_argument("--feature-gate", action="append", default=[], metavar="NAME=BOOL",
                        help="a kubelet feature gate (PodLevelResourceManagers, "
                             "InPlacePodVerticalScalingExclusiveCPUs); repeatable")


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """Every sub-command, or with ``only="hook"`` that one alone (the hook's start-up)."""
    import argparse  # noqa: PLC0415  # here: the hook's own flags are read without it where they can be

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2 with usage
            self.print_usage(sys.stderr)
            raise UsageError("%s: error: %s" % (self.prog, message))

    parser = _Parser(prog="kubecpu", description="Kubernetes-grade CPU pinning: the kubelet static CPU "
                     "manager policy on a node.")
    parser.add_argument("--version", action="version", version="kubecpu " + VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    if only == "hook":
        _hook_parser(sub)
        return parser

    p = sub.add_parser("topology", help="print this node's CPU topology as JSON")
    _topology_args(p)

    p = sub.add_parser("plan", help="what the static policy would give a container asking for N CPUs")
    _topology_args(p)
    _policy_args(p)
    _kubelet_args(p)
    p.add_argument("--available", required=True, type=_cpuset_arg, metavar="CPUSET", help="the free CPUs")
    p.add_argument("--count", required=True, type=_count_arg, metavar="N", help="exclusive CPUs requested")
    p.add_argument("--numa-affinity", type=_cpuset_arg, metavar="NODES", help="preferred NUMA nodes (hint)")

    p = sub.add_parser("hints", help="the CPU manager's topology hints for a request (GetTopologyHints)")
    _topology_args(p)
    _policy_args(p)
    _kubelet_args(p)
    _unlisted(p, "--kubelet-version", "--feature-gate")  # the hints themselves are the same for 1.35-1.38
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

    p = sub.add_parser("state", help="print (and with a topology, validate) the checkpoint; only --reset and "
                                     "--rebuild write (a missing file is printed as the fresh state, not created)")
    _state_args(p)
    p.add_argument("--reset", action="store_true",
                   help="explicit recovery: move the current file aside and start from a fresh state")
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild the checkpoint from what runs (runtime and cgroupfs); the old file is kept aside")
    p.add_argument("--kubelet-stopped", action="store_true",
                   help="the kubelet is stopped: its own checkpoint may be rebuilt or reset")
    p.add_argument("--check", action="store_true", help="with --rebuild, print the file it would write")
    _runtime_args(p, manager=False)
    _unlisted(p, "--kubelet-state", "--force")  # a rebuild reads the runtime, whoever pins

    p = sub.add_parser("reconcile", help="one reconcile pass against the container runtime (or --loop: the agent)")
    _state_args(p)
    _runtime_args(p)
    p.add_argument("--loop", action="store_true", help="run as the agent: a pass every --period until SIGTERM")
    p.add_argument("--period", type=_duration_arg, default=10.0, metavar="DURATION",
                   help="time between passes with --loop (10s, 500ms, 1m; default 10s)")
    p.add_argument("--no-watch", action="store_true",
                   help="with --loop, pass every --period only (default: also when a container cgroup comes or goes)")
    p.add_argument("--check", action="store_true", help="only report the plan: change nothing")
    _service_args(p, "pass", '"period": "1s"')

    p = sub.add_parser("housekeeping", help="beside a kubelet that pins CPUs itself: keep device interrupts (and "
                       "irqbalance) off the CPUs its checkpoint assigns exclusively (or --loop: as a service)")
    _state_args(p)
    _runtime_args(p, kubelet_state="the kubelet's checkpoint: interrupts are kept off the CPUs it assigns "
                  "exclusively")
    p.set_defaults(irq_isolation="exclusive")
    p.add_argument("--loop", action="store_true", help="a pass every --period (and when a container cgroup comes or "
                   "goes) until SIGTERM")
    p.add_argument("--period", type=_duration_arg, default=10.0, metavar="DURATION",
                   help="time between passes with --loop (default 10s)")
    p.add_argument("--no-watch", action="store_true", help="with --loop, pass every --period only")
    p.add_argument("--check", action="store_true", help="only report what would change")
    _service_args(p, "pass", '"kubelet_state": "/var/lib/kubelet/cpu_manager_state"')
    _unlisted(p, "--policy", "--num-reserved", "--reserved-cpus", "--read-only", "--runtime", "--runtime-endpoint",
              "--crictl", "--runtime-timeout", "--force", "--cache", "--isolated-cpus", "--align-memory", "--cpu-quota",
              "--besteffort-idle", "--cpu-burst", "--topology-manager-policy", "--topology-manager-scope",
              "--topology-manager-option", "--option")  # the kubelet's checkpoint and the interrupts only

    p = sub.add_parser("defrag", help="move pinned containers so that larger whole-core requests fit again")
    _state_args(p)
    _runtime_args(p)
    p.add_argument("--check", action="store_true", help="only print the moves: change nothing")
    p.add_argument("--max-moves", type=_count_arg, metavar="N", help="at most N moves (default: as many as help)")
    p.add_argument("--time-budget", type=_duration_arg, default=0.5, metavar="DURATION",
                   help="time for the exact search, after which the best packing found is taken (default 500ms)")
    p.add_argument("--keep-numa", action="store_true",
                   help="no container leaves its NUMA nodes (placed near a device); one whose memory the kubelet's "
                        "Memory Manager pinned (memory_manager_state beside --kubelet-state) stays on that memory's "
                        "nodes anyway")

    from ..runtime.nri_api import DEFAULT_INDEX, DEFAULT_NAME, DEFAULT_SOCKET  # noqa: PLC0415  # not the hook's

    p = sub.add_parser("nri", help="run as an NRI plugin: containers get their CPUs before they are created")
    _state_args(p)
    _runtime_args(p)
    p.add_argument("--socket", default=DEFAULT_SOCKET, metavar="PATH",
                   help="the runtime's NRI socket (default %(default)s)")
    p.add_argument("--plugin-name", default=DEFAULT_NAME, metavar="NAME", help="plugin name (default %(default)s)")
    p.add_argument("--plugin-index", default=DEFAULT_INDEX, metavar="NN",
                   help="plugin index, two digits (default %(default)s)")
    _service_args(p, "event", '"socket": "/x.sock"')
    _unlisted(p, "--runtime", "--runtime-endpoint", "--crictl", "--runtime-timeout")  # the runtime is NRI's peer

    _hook_parser(sub)

    p = sub.add_parser("demo", help="discover this node and show what the static policy gives sample pods")
    _topology_args(p)
    _policy_args(p)
    p.add_argument("--num-reserved", type=_count_arg, default=DEFAULT_NUM_RESERVED, metavar="N",
                   help="number of reserved CPUs, chosen by topology (default %d; the static policy refuses 0, as "
                        "the kubelet does)" % DEFAULT_NUM_RESERVED)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _hook_parser(sub: Any) -> None:
    import argparse  # noqa: PLC0415  # build_parser's

    p = sub.add_parser("hook", help="run as an OCI createRuntime hook: a container is created on its CPUs or not at "
                       "all (fail closed); the OCI state on stdin")
    _state_args(p)
    _runtime_args(p)
    p.add_argument("--lock-timeout", type=_seconds_arg, default=2.0, metavar="SECONDS",
                   help="refuse the container when the state lock is not had within this (default 2)")
    for flag in ("--period", "--socket", "--plugin-name", "--plugin-index"):  # the agent's and the plugin's own:
        p.add_argument(flag, help=argparse.SUPPRESS)  # accepted, so that their configuration file serves the hook
    _service_args(p, "hook (not written: the hook runs once per container)", '"state": "/var/lib/kubecpu/state"')
    _unlisted(p, "--runtime", "--runtime-endpoint", "--crictl", "--runtime-timeout", "--cache", "--align-memory",
              "--cpu-quota", "--besteffort-idle", "--cpu-burst", "--metrics-path")  # the cgroup's cpuset only: the
    # agent's pass sets the rest


def _service_args(parser: argparse.ArgumentParser, after: str, example: str) -> None:
    """The flags of the long-running commands (the agent, the NRI plugin): metrics and a configuration file."""
    parser.add_argument("--metrics-path", metavar="FILE",
                        help="write Prometheus textfile metrics here after each %s" % after)
    parser.add_argument("--config", metavar="FILE",
                        help="JSON object of these options by long name (%s); flags given here win" % example)


def _duration_arg(text: str) -> float:
    from ..kubelet.settings import parse_duration  # noqa: PLC0415  # (re loaded only here: not the hook's start-up)

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise _bad_value(str(exc)) from None


def _seconds_arg(text: str) -> float:
    """A number of seconds (its range is the configuration's to check)."""
    try:
        return float(text)
    except ValueError:
        raise _bad_value('invalid timeout "%s": seconds expected' % text) from None


KUBELET_STATE_HELP = ("the kubelet's checkpoint: while it says static, kubecpu steps aside (commands refuse; the hook, "
                      "the agent and the NRI plugin pin nothing) unless --force")


def _runtime_args(parser: argparse.ArgumentParser, *, manager: bool = True,
                  kubelet_state: str = KUBELET_STATE_HELP) -> None:
    """The runtime's flags and (``manager``) the node manager's options beyond the kubelet."""
    parser.add_argument("--runtime", choices=RUNTIMES, default="crictl", help="runtime backend (default crictl)")
    parser.add_argument("--runtime-endpoint", metavar="URL",
                        help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock (default: what crictl uses)")
    parser.add_argument("--crictl", default="crictl", metavar="PATH", help="crictl binary (default: from PATH)")
    parser.add_argument("--runtime-timeout", type=_seconds_arg, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="timeout of each runtime call (default 2)")
    parser.add_argument("--cgroup-root", default=DEFAULT_CGROUP_ROOT, metavar="DIR",
                        help="cgroupfs mount (default %(default)s)")
    parser.add_argument("--kubelet-state", default=KUBELET_STATE_PATH, metavar="FILE",
                        help="%s (default %%(default)s)" % kubelet_state)
    parser.add_argument("--force", action="store_true", help="act even though the kubelet pins CPUs itself")
    parser.add_argument("--cache", metavar="FILE", help="container cache (default <state>.containers.json)")
    if manager:
        _manager_args(parser)


def _manager_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--isolated-cpus", choices=ISOLATED_MODES, default="ignore",
                        help="take exclusive CPUs from the isolcpus set first (prefer) or only (only)")
    parser.add_argument("--align-memory", action="store_true",
                        help="set cpuset.mems of pinned containers to the NUMA nodes of their CPUs")
    parser.add_argument("--cpu-quota", choices=QUOTA_MODES, default="keep",
                        help="unlimited: no CFS quota for exclusively pinned containers and their pods")
    parser.add_argument("--besteffort-idle", action="store_true",
                        help="cpu.idle = 1 for each BestEffort pod's cgroup (cgroup v2, kernel 5.15 or newer): its "
                        "containers only take what nobody else wants")
    parser.add_argument("--irq-isolation", choices=IRQ_MODES, default="off",
                        help="exclusive: keep device interrupts (and irqbalance) off the CPUs held exclusively; "
                        "annotated: only off those of pods annotated irq-load-balancing.kubecpu.io: disable")
    parser.add_argument("--cpu-burst", action="store_true",
                        help="cpu.max.burst of Burstable containers from their pod's cpu-burst.kubecpu.io "
                        "annotation (a duration), at most their CFS quota (cgroup v2, kernel 5.14 or newer)")
    _topology_manager_args(parser)


def _topology_manager_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology-manager-policy", choices=POLICIES, default="none",
                        help="merge the CPU hints under this policy first and allocate inside the merged affinity")
    parser.add_argument("--topology-manager-scope", choices=SCOPES, default="container")
    parser.add_argument("--topology-manager-option", action="append", default=[], metavar="NAME[=VALUE]",
                        help="prefer-closest-numa-nodes, max-allowable-numa-nodes=N")


def _unlisted(parser: argparse.ArgumentParser, *flags: str) -> None:
    """``flags`` stay accepted (a configuration file shared with the other commands, a script that passes them to
    each) but are not listed in ``--help``: the command does not use them."""
    import argparse  # noqa: PLC0415  # build_parser's

    for action in parser._actions:  # pylint: disable=protected-access  # argparse has no public way to hide one
        if set(action.option_strings) & set(flags):
            action.help = argparse.SUPPRESS


def _pod_assigned_arg(text: str) -> Tuple[int, CPUSet]:
    request, sep, cpus = text.partition(":")
    if not sep:
        raise _bad_value('invalid --pod-assigned "%s": expected R:CPUSET' % text)
    return _count_arg(request), _cpuset_arg(cpus)


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
    """``--feature-gate NAME=BOOL`` flags (their values are the configuration's to check)."""
    gates = {}
    for flag in flags:
        name, sep, value = flag.partition("=")
        if not sep:
            raise UsageError('--feature-gate %s: expected NAME=true or NAME=false' % flag)
        gates[name] = value
    return gates


def run_command(parser: argparse.ArgumentParser, commands: Mapping[str, Command], argv: Optional[Sequence[str]], *,
                out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """Parse (a ``--config`` file read as flags before the command line's own), run the command; a configuration
    or usage error is exit 2, any other domain error exit 1, each one line on ``err``."""
    def parsed_and_run() -> int:
        args = parser.parse_args(argv)
        if getattr(args, "config", None):
            given = list(sys.argv[1:] if argv is None else argv)
            rest = given[given.index(args.command) + 1:]
            args = parser.parse_args([args.command] + config_arguments(args.config) + rest)
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


def exit_code(call: Callable[[], int], err: TextIO) -> int:
    """``call``'s exit code; a configuration or usage error is exit 2, any other domain error exit 1, each one line
    on ``err``."""
    try:
        return call()
    except ConfigError as exc:
        err.write("%s\n" % as_flags(str(exc)))
        return 2
    except KubecpuError as exc:
        err.write("%s\n" % as_flags(str(exc)))
        return 1
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
