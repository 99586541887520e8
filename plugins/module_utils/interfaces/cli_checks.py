# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What ``kubecpu`` refuses before a command runs, instead of guessing (exit 2, nothing read or written):

* a combination of flags it cannot honour: a check (``--check``, ``--read-only``) with a flag that writes
  (``state --reset``, ``state --rebuild`` without ``--check``, ``--loop``, ``--metrics-path``);
* a ``--state`` whose directory does not exist (a typo would otherwise create it, mode 0700, wherever it points);
  kubecpu's own directory (``/var/lib/kubecpu``) is the one it creates;
* the static policy with ``--num-reserved 0``, in the kubelet's words (ALGORITHM.md section 3).
"""

from __future__ import annotations

import os
from typing import Any, List

from ..errors import PolicyError, UsageError
from ..kubelet.policy import STATIC, ZERO_RESERVATION
from ..node.state_paths import DEFAULT_PATH

OWN_DIRECTORY = os.path.dirname(DEFAULT_PATH)  # the state directory kubecpu creates when it is missing
# commands that accept --num-reserved (a shared configuration file) without using it
RESERVATION_UNUSED = ("housekeeping",)


def _set(args: Any, name: str) -> bool:
    return bool(getattr(args, name, None))


# (flag, flag, why they cannot both be honoured) for two flags given together
CONFLICTS = (
    ("check", "reset", "--reset moves the checkpoint aside and writes a fresh one, --check changes nothing"),
    ("check", "loop", "--loop runs the agent, whose every pass changes the node, --check changes nothing"),
    ("check", "metrics_path", "--metrics-path writes a file, --check changes nothing; --metrics-path= drops a --config "
                              "file's"),
    ("read_only", "reset", "--reset moves the checkpoint aside and writes a fresh one, --read-only never writes it"),
    ("rebuild", "reset", "--rebuild and --reset each write a new checkpoint"),
)


def conflicts(args: Any) -> List[str]:
    """Why the flags given together cannot be honoured (empty when they can)."""
    found = ["--%s with --%s: %s (drop one of them)" % (one.replace("_", "-"), other.replace("_", "-"), why)
             for one, other, why in CONFLICTS if _set(args, one) and _set(args, other)]
    if _set(args, "read_only") and _set(args, "rebuild") and not _set(args, "check") and not _set(args, "reset"):
        found.append("--read-only with --rebuild: --rebuild writes the rebuilt checkpoint, --read-only never writes "
                     "it (add --check to print what it would write)")
    return found


def refuse(args: Any) -> None:
    """UsageError (exit 2) for what ``args`` asks that kubecpu cannot do as asked; nothing has been touched yet."""
    command = getattr(args, "command", "")
    for why in conflicts(args):
        raise UsageError("kubecpu %s: %s" % (command, why))
    if (getattr(args, "num_reserved", None) == 0 and getattr(args, "policy", STATIC) == STATIC
            and command not in RESERVATION_UNUSED):
        raise PolicyError(ZERO_RESERVATION + (" (set --num-reserved to 1 or more)" if command == "demo" else
                                              " (set --reserved-cpus or --num-reserved)"))
    state = getattr(args, "state", None)
    if state:
        check_state_directory(state)


def check_state_directory(path: str) -> None:
    """UsageError unless the directory of the state file ``path`` exists (or is kubecpu's own, which is created)."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory == OWN_DIRECTORY or os.path.isdir(directory):
        return
    what = "is not a directory" if os.path.exists(directory) else "does not exist"
    raise UsageError("--state %s: its directory %s %s (kubecpu creates only its own %s): create it first, or name "
                     "a file in an existing directory" % (path, directory, what, OWN_DIRECTORY))
