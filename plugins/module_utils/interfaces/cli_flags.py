# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The flags ``kubecpu``'s sub-commands share (the node, its policy and checkpoint; the container runtime; what a
pass sets; the Topology Manager; the services'), each group a heading of its own in ``--help``, and how a flag's
text becomes its value (a bad one is argparse's error: exit 2 with the sub-command's usage). ``cli_args`` puts them
together into the sub-commands."""

from __future__ import annotations

from typing import Any, Tuple

from ..errors import CPUSetError
from ..kubelet.cpuset import CPUSet
from ..kubelet.kubelet_versions import EXCLUSIVE_RESIZE, POD_LEVEL
from ..kubelet.options import ALL_OPTIONS
from ..kubelet.policy import POLICY_NAMES, STATIC
from ..kubelet.topology_manager import POLICIES, SCOPES
from ..node.config import (DEFAULT_CGROUP_ROOT, DEFAULT_STATE_PATH, IRQ_MODES, ISOLATED_MODES, KUBELET_STATE_PATH,
                           QUOTA_MODES, RUNTIMES)
from ..runtime.model import DEFAULT_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

DEFAULT_NUM_RESERVED = 1  # every sub-command's --num-reserved when --reserved-cpus does not list them either
KNOWN_GATES = (POD_LEVEL, EXCLUSIVE_RESIZE)  # the kubelet feature gates that change what kubecpu reads, writes or does


def bad_value(message: str) -> Exception:
    """argparse's error for a flag's bad value (argparse imported then: the OCI hook's start-up does without it)."""
    import argparse  # noqa: PLC0415

    return argparse.ArgumentTypeError(message)


def cpuset_arg(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise bad_value(str(exc)) from None


def count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_value('invalid count "%s": a whole number is expected' % text) from None
    if value < 0:
        raise bad_value('invalid count "%s": must not be negative' % text)
    return value


def topology_args(parser: Any) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--topology", metavar="FILE", help="topology JSON (kubecpu topology); - is stdin")
    group.add_argument("--sysfs-root", metavar="DIR", help="discover below DIR (default /), /proc/irq too")


def policy_args(parser: Any, listed: bool = True) -> None:
    """--option; ``listed``: its help names every option (where the help has room for it)."""
    parser.add_argument("--option", action="append", metavar="NAME[=VALUE]", default=[],
                        help="static policy option (%s); a bare name means true" % ", ".join(ALL_OPTIONS) if listed
                        else "static policy option (see kubecpu plan --help)")


def state_args(parser: argparse.ArgumentParser) -> None:
    """The node, its policy and its checkpoint: a group of their own in --help."""
    group = parser.add_argument_group("node, policy and checkpoint")
    topology_args(group)
    policy_args(group, listed=False)
    checkpoint_args(group)
    kubelet_args(group)


def checkpoint_args(parser: Any) -> None:
    parser.add_argument("--state", metavar="FILE", default=DEFAULT_STATE_PATH,
                        help="checkpoint file, in an existing directory (default %(default)s)")
    parser.add_argument("--policy", choices=POLICY_NAMES, default=STATIC, help="CPU manager policy (default static)")
    parser.add_argument("--num-reserved", type=count_arg, metavar="N",
                        help="how many CPUs to reserve (default %d; the static policy refuses 0, as the kubelet "
                             "does)" % DEFAULT_NUM_RESERVED)
    parser.add_argument("--reserved-cpus", type=cpuset_arg, metavar="CPUSET",
                        help="the reserved CPUs by number (alone: implies N)")
    parser.add_argument("--read-only", action="store_true",
                        help="never write the checkpoint (as the kubelet's)")


def kubelet_args(parser: Any) -> None:
    parser.add_argument("--kubelet-version", metavar="X.Y",
                        help="kubelet whose rules apply: 1.35 (default)-1.38")
    parser.add_argument("--feature-gate", action="append", default=[], metavar="NAME=BOOL",
                        help="kubelet feature gate: %s" % " or ".join(KNOWN_GATES))


def service_args(parser: argparse.ArgumentParser, after: str, example: str) -> None:
    """The flags of the long-running commands (the agent, the NRI plugin): metrics and a configuration file."""
    parser.add_argument("--metrics-path", metavar="FILE",
                        help="write Prometheus textfile metrics here after each %s" % after)
    parser.add_argument("--config", metavar="FILE",
                        help="JSON object of these flags by long name (%s); the command line's win" % example)


def duration_arg(text: str) -> float:
    from ..kubelet.settings import parse_duration  # noqa: PLC0415  # (re loaded only here: not the hook's start-up)

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise bad_value(str(exc)) from None


def seconds_arg(text: str) -> float:
    """A number of seconds (its range is the configuration's to check)."""
    try:
        return float(text)
    except ValueError:
        raise bad_value('invalid timeout "%s": seconds expected' % text) from None


KUBELET_STATE_HELP = "the kubelet's checkpoint: while it says static, kubecpu steps aside unless --force"


def runtime_args(parser: argparse.ArgumentParser, *, manager: bool = True,
                 kubelet_state: str = KUBELET_STATE_HELP) -> None:
    """The runtime's flags and (``manager``) the node manager's options beyond the kubelet: groups of their own."""
    group = parser.add_argument_group("container runtime")
    group.add_argument("--runtime", choices=RUNTIMES, default="crictl", help="runtime backend (default crictl)")
    group.add_argument("--runtime-endpoint", metavar="URL",
                       help="CRI endpoint (default: crictl's), e.g. unix:///run/containerd/containerd.sock")
    group.add_argument("--crictl", default="crictl", metavar="PATH", help="crictl binary (default: from PATH)")
    group.add_argument("--runtime-timeout", type=seconds_arg, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help="each runtime call's timeout (default 2)")
    group.add_argument("--cgroup-root", default=DEFAULT_CGROUP_ROOT, metavar="DIR",
                       help="cgroupfs mount (default %(default)s)")
    group.add_argument("--kubelet-state", default=KUBELET_STATE_PATH, metavar="FILE",
                       help="%s (default %%(default)s)" % kubelet_state)
    group.add_argument("--force", action="store_true", help="act even though the kubelet pins CPUs itself")
    group.add_argument("--cache", metavar="FILE", help="cache (default <state>.containers.json)")
    if manager:
        manager_args(parser.add_argument_group("what each pass sets besides the cpuset"))
        topology_manager_args(parser.add_argument_group("Topology Manager"))


def manager_args(parser: Any) -> None:
    parser.add_argument("--isolated-cpus", choices=ISOLATED_MODES, default="ignore", metavar="MODE",
                        help="the isolcpus set: ignore (default), prefer, only")
    parser.add_argument("--align-memory", action="store_true", help="cpuset.mems: the pinned CPUs' NUMA nodes")
    parser.add_argument("--cpu-quota", choices=QUOTA_MODES, default="keep", metavar="MODE",
                        help="keep (default); unlimited: none when pinned")
    parser.add_argument("--besteffort-idle", action="store_true",
                        help="cpu.idle = 1 for BestEffort pods (cgroup v2)")
    parser.add_argument("--irq-isolation", choices=IRQ_MODES, default="off", metavar="MODE",
                        help="off (default); exclusive, annotated: keep device interrupts off exclusive CPUs")
    parser.add_argument("--cpu-burst", action="store_true",
                        help="cpu.max.burst from cpu-burst.kubecpu.io")
    parser.add_argument("--exclusive-burstable", action="store_true",
                        help="exclusive CPUs for the containers a Burstable pod's cpu-exclusive.kubecpu.io names")
    parser.add_argument("--system-partition", action="store_true",
                        help="system pods on the reserved CPUs only, every other container off them")
    parser.add_argument("--system-namespaces", metavar="NS[,NS]",
                        help="the system partition's namespaces (default none)")
    parser.add_argument("--system-priority-classes", metavar="NAME[,NAME]",
                        help="the system partition's priority classes, as priority-class.kubecpu.io says "
                             "(default system-node-critical; '' for none)")
    parser.add_argument("--cpu-power", action="store_true",
                        help="exclusive CPUs' C-states, governor by annotation")


def topology_manager_args(parser: Any) -> None:
    parser.add_argument("--topology-manager-policy", choices=POLICIES, default="none", metavar="POLICY",
                        help="%s: merge the CPU hints first (default none)" % ", ".join(POLICIES))
    parser.add_argument("--topology-manager-scope", choices=SCOPES, default="container", metavar="SCOPE",
                        help="container (default) or pod")
    parser.add_argument("--topology-manager-option", action="append", default=[], metavar="NAME[=VALUE]",
                        help="prefer-closest-numa-nodes, max-allowable-numa-nodes=N")


def unlisted(parser: argparse.ArgumentParser, *flags: str) -> None:
    """``flags`` stay accepted (a configuration file shared with the other commands, a script that passes them to
    each) but are not listed in ``--help``: the command does not use them."""
    import argparse  # noqa: PLC0415  # build_parser's

    for action in parser._actions:  # pylint: disable=protected-access  # argparse has no public way to hide one
        if set(action.option_strings) & set(flags):
            action.help = argparse.SUPPRESS


def pod_assigned_arg(text: str) -> Tuple[int, CPUSet]:
    request, sep, cpus = text.partition(":")
    if not sep:
        raise bad_value('invalid --pod-assigned "%s": expected R:CPUSET' % text)
    return count_arg(request), cpuset_arg(cpus)
