# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What ``kubecpu COMMAND --help`` says: each sub-command's one-line description and examples, a usage line that
names the command's own flags (not the forty it shares with the others), and a misspelled flag answered with that
sub-command's usage and the nearest flag it has."""

from __future__ import annotations

import difflib
from typing import Any, Dict, List, Optional, Sequence, Tuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

# sub-command -> (its one line: the top-level list and its own --help), examples (each a line, run as they are)
ABOUT: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "topology": ("print this node's CPU topology as JSON",
                 ("kubecpu topology", "kubecpu topology --sysfs-root /mnt/node > node.json")),
    "plan": ("what the static policy would give a container asking for N CPUs (nothing is read or written)",
             ("kubecpu plan --topology node.json --available 1-15 --count 4 --option full-pcpus-only",)),
    "hints": ("the CPU manager's topology hints for a request (GetTopologyHints)",
              ("kubecpu hints --topology node.json --available 1-15 --count 4",
               "kubecpu hints --topology node.json --available 1-15 --count 2 --scope pod --pod-assigned 2:4-5")),
    "merge": ("the Topology Manager's merge and admission of hint providers' answers",
              ("kubecpu merge --policy single-numa-node --numa-nodes 0-1 --hints hints.json",)),
    "allocate": ("allocate CPUs for a container and record them in the state",
                 ("kubecpu allocate --state ./state --pod pod.json --container app",
                  "kubectl get pod web -o json | kubecpu allocate --state ./state --pod - --container app")),
    "release": ("release a container's exclusive CPUs (refused when the state holds no entry for it)",
                ("kubecpu release --state ./state --pod-uid 0f3c2a2e-6d1b-4bb8-9b52-1c1f0b6f7f11 --container app",)),
    "state": ("print (and with a topology, validate) the checkpoint; only --reset and --rebuild write",
              ("kubecpu state", "kubecpu state --state /var/lib/kubelet/cpu_manager_state --kubelet-version 1.37",
               "kubecpu state --rebuild --check")),
    "reconcile": ("one reconcile pass against the container runtime (or --loop: the agent)",
                  ("kubecpu reconcile --check", "kubecpu reconcile --loop --config /etc/kubecpu/agent.json")),
    "housekeeping": ("beside a kubelet that pins CPUs itself: keep device interrupts (and irqbalance) off the CPUs "
                     "its checkpoint assigns exclusively, and with --cpu-power set their C-states and governor as "
                     "their pods ask (or --loop: as a service)",
                     ("kubecpu housekeeping --check", "kubecpu housekeeping --loop --period 30s")),
    "defrag": ("move pinned containers so that larger whole-core requests fit again",
               ("kubecpu defrag --check", "kubecpu defrag --max-moves 2 --keep-numa")),
    "nri": ("run as an NRI plugin: containers get their CPUs before they are created",
            ("kubecpu nri --config /etc/kubecpu/agent.json",)),
    "hook": ("run as an OCI createRuntime hook: a container is created on its CPUs or not at all (fail closed); the "
             "OCI state on stdin", ("kubecpu hook --config /etc/kubecpu/agent.json < oci-state.json",)),
    "demo": ("discover this node and show what the static policy gives sample pods (nothing is written)",
             ("kubecpu demo", "kubecpu demo --topology node.json --num-reserved 2 --json")),
}


def texts(name: str) -> Dict[str, Any]:
    """``add_parser``'s keyword arguments for sub-command ``name``: its line, description and examples."""
    line, examples = ABOUT[name]
    return {"help": line, "description": line[0].upper() + line[1:] + ".",
            "epilog": "examples:\n" + "\n".join("  " + example for example in examples),
            "formatter_class": formatter()}


_FORMATTER: List[Any] = []  # made once, when argparse is imported (the OCI hook's start-up does without it)


def formatter() -> Any:
    """A help formatter that keeps the examples' lines as written and puts a flag's help beside it (column 30)."""
    if not _FORMATTER:
        import argparse  # noqa: PLC0415

        class Formatter(argparse.RawDescriptionHelpFormatter):
            def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 30,
                         width: Optional[int] = None) -> None:
                super().__init__(prog, indent_increment, max_help_position, width)
        _FORMATTER.append(Formatter)
    return _FORMATTER[0]


def shorten_usage(parser: argparse.ArgumentParser, own: Sequence[str]) -> None:
    """When the sub-command shares groups of flags with others: its usage names its required flags and ``own``, then
    ``[OPTIONS]`` (every flag is in the help below it)."""
    formatter_ = parser._get_formatter()  # pylint: disable=protected-access  # the parser's own usage words
    shown = [action for action in parser._actions  # pylint: disable=protected-access
             if action.option_strings and (action.required or set(action.option_strings) & set(own))]
    formatter_.add_usage(None, shown, [], prefix="")
    parser.usage = formatter_.format_help().strip().replace("%", "%%") + " [OPTIONS]"


def unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """argparse's message for words it does not know, with the nearest flag of ``parser`` for a misspelled one."""
    import argparse  # noqa: PLC0415

    listed = [option for action in parser._actions  # pylint: disable=protected-access
              if action.help != argparse.SUPPRESS for option in action.option_strings if option.startswith("--")]
    hints: List[str] = []
    for word in extras:
        if word.startswith("--"):
            near = difflib.get_close_matches(word.split("=", 1)[0], listed, n=1, cutoff=0.6)
            if near:
                hints.append("%s: did you mean %s?" % (word.split("=", 1)[0], near[0]))
    return "unrecognized arguments: %s%s" % (" ".join(extras), "".join(" (%s)" % hint for hint in hints))
