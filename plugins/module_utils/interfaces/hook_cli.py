# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``bin/kubecpu hook`` on its own: the OCI hook runs on every container's start path, so ``bin/kubecpu`` loads this
module instead of ``cli`` for it. Same flags, configuration file and exit codes as every sub-command.

A start that needs nothing (the container is not Kubernetes', or its cgroup already holds what the state gives it) is
answered by ``services.hook_check`` before the argument parser, the configuration and the kubelet model are even
imported: this module reads the few settings that check needs (``--state``, ``--cgroup-root``, ``--policy``,
``--kubelet-state``, ``--read-only``, ``--force``, from the flags or the ``--config`` file) by itself, and only from a
command line every word of which the hook's parser knows. Anything else, and every start the check cannot confirm, goes
through the parser and ``services.hook`` as before, with the bytes already read from stdin."""

from __future__ import annotations

import io
import sys

from ..errors import KubecpuError
from ..node.state_paths import DEFAULT_PATH, KUBELET_PATH
from ..runtime.cgroups import DEFAULT_ROOT
from ..runtime.oci_hook import read_stdin
from ..services.hook_check import quick_check
from ..wire.json_lean import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import IO, Callable, Dict, Optional, Sequence, TextIO, Tuple

MAX_CONFIG_BYTES = 1024 * 1024  # the configuration file: a JSON object of option names
# The hook parser's flags (a test holds this to ``build_parser(only="hook")``): those the check reads, the
# switches, and the rest, each of which takes one value.
QUICK_SETTINGS = ("--state", "--cgroup-root", "--policy", "--kubelet-state", "--config")
SWITCHES = ("--read-only", "--force", "--align-memory", "--besteffort-idle", "--cpu-burst", "--exclusive-burstable",
            "--system-partition", "--cpu-power")
LISTS = ("--option", "--feature-gate", "--topology-manager-option")
OTHER_FLAGS = ("--num-reserved", "--reserved-cpus", "--option", "--kubelet-version", "--feature-gate", "--runtime",
               "--runtime-endpoint", "--crictl", "--runtime-timeout", "--cache", "--isolated-cpus",
               "--cpu-quota", "--irq-isolation", "--topology-manager-policy", "--topology-manager-scope",
               "--topology-manager-option", "--topology", "--sysfs-root",
               "--lock-timeout", "--period", "--socket", "--plugin-name", "--plugin-index", "--metrics-path",
               "--system-namespaces", "--system-priority-classes")


def cmd_hook(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """The OCI hook: 0 when the container may be created (its cgroup on its CPUs), 1 with one line when not."""
    from ..services.hook import Hook  # noqa: PLC0415  # the full hook: only when the quick check cannot answer
    from .cli_args import node_config  # noqa: PLC0415

    result = Hook(node_config(args), args.lock_timeout).run(_stdin_bytes(stdin))
    if result.view_error:  # the container is placed; only the quick path of the next one is lost
        err.write("kubecpu hook: warning: %s\n" % result.view_error)
    if result.note:  # passed: the kubelet places it
        err.write("kubecpu hook: %s\n" % result.note)
    out.write(dumps(result.to_dict()) + "\n")
    return 0


def main(argv: Optional[Sequence[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         stdin: TextIO = sys.stdin) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    settings = _quick_settings(given)
    if settings is not None:
        try:
            data = read_stdin(_stdin_bytes(stdin))
        except KubecpuError as exc:
            err.write("%s\n" % exc)
            return 1
        try:
            answer = quick_check(data, settings["state"], settings["cgroup-root"], settings["kubelet-state"],
                                 settings.get("force") == "true",
                                 exclusive_burstable=settings.get("exclusive-burstable") == "true",
                                 system_partition=settings.get("system-partition") == "true")
        except KubecpuError:
            answer = None  # the full hook reads the same input again and reports it
        if answer is not None:
            if answer.get("note"):
                err.write("kubecpu hook: %s\n" % answer["note"])
            out.write(dumps(answer) + "\n")
            return 0
        stdin = io.TextIOWrapper(io.BytesIO(data))
    from .cli_args import exit_code  # noqa: PLC0415

    args = _hook_arguments(given)
    if args is not None:
        return exit_code(lambda: cmd_hook(args, out, err, stdin), err)
    from .cli_args import build_parser, run_command  # noqa: PLC0415  # argparse words what is wrong

    return run_command(build_parser(only="hook"), {"hook": cmd_hook}, given, out=out, err=err, stdin=stdin)


def _flag_table() -> Dict[str, Tuple[str, object, Optional[Callable[[str], object]], Sequence[str]]]:
    """The hook parser's flags (a test holds this to ``build_parser(only="hook")``): flag -> (kind, default,
    conversion, choices); kind is "switch", "list" (repeatable) or "value"."""
    from ..kubelet.policy import POLICY_NAMES, STATIC  # noqa: PLC0415  # the full path's modules
    from ..kubelet.topology_manager import POLICIES, SCOPES  # noqa: PLC0415
    from ..node.config import IRQ_MODES, ISOLATED_MODES, KUBELET_STATE_PATH, QUOTA_MODES, RUNTIMES  # noqa: PLC0415
    from ..runtime.model import DEFAULT_TIMEOUT  # noqa: PLC0415
    from .cli_flags import count_arg as _count_arg, cpuset_arg as _cpuset_arg, seconds_arg as _seconds_arg  # noqa: PLC0415

    table: Dict[str, Tuple[str, object, Optional[Callable[[str], object]], Sequence[str]]] = {
        flag: ("switch", False, None, ()) for flag in SWITCHES}
    table.update((flag, ("list", [], None, ())) for flag in LISTS)
    table.update((flag, ("value", None, None, ())) for flag in OTHER_FLAGS + QUICK_SETTINGS if flag not in LISTS)
    table.update({
        "--state": ("value", DEFAULT_PATH, None, ()), "--policy": ("value", STATIC, None, POLICY_NAMES),
        "--num-reserved": ("value", None, _count_arg, ()), "--reserved-cpus": ("value", None, _cpuset_arg, ()),
        "--runtime": ("value", "crictl", None, RUNTIMES), "--crictl": ("value", "crictl", None, ()),
        "--runtime-timeout": ("value", DEFAULT_TIMEOUT, _seconds_arg, ()),
        "--cgroup-root": ("value", DEFAULT_ROOT, None, ()), "--kubelet-state": ("value", KUBELET_STATE_PATH, None, ()),
        "--isolated-cpus": ("value", "ignore", None, ISOLATED_MODES),
        "--cpu-quota": ("value", "keep", None, QUOTA_MODES), "--irq-isolation": ("value", "off", None, IRQ_MODES),
        "--topology-manager-policy": ("value", "none", None, POLICIES),
        "--topology-manager-scope": ("value", "container", None, SCOPES),
        "--lock-timeout": ("value", 2.0, _seconds_arg, ()),
    })
    return table


def _hook_arguments(given: Sequence[str]) -> Optional[argparse.Namespace]:
    """``hook`` and its flags as its parser reads them (the ``--config`` file's first, the command line's winning),
    without argparse (a tenth of an allocating hook's time); None for whatever the parser should decide and word: a
    word it would refuse or abbreviate, a bad or missing value, ``--topology`` with ``--sysfs-root``."""
    from types import SimpleNamespace  # noqa: PLC0415

    from .cli_args import config_arguments  # noqa: PLC0415

    table = _flag_table()
    words = list(given[1:])
    config = None
    for index, word in enumerate(words):
        flag, has_value, value = word.partition("=")
        if flag == "--config":
            config = value if has_value else (words[index + 1] if index + 1 < len(words) else None)
    try:
        words = (config_arguments(config) if config else []) + words
    except KubecpuError:
        return None
    values: Dict[str, object] = {flag[2:].replace("-", "_"): spec[1] for flag, spec in table.items()}
    while words:
        flag, has_value, value = words.pop(0).partition("=")
        if flag not in table:
            return None
        kind, _default, convert, choices = table[flag]
        dest = flag[2:].replace("-", "_")
        if kind == "switch":
            if has_value:
                return None
            values[dest] = True
            continue
        if not has_value:
            if not words or words[0].startswith("-"):
                return None
            value = words.pop(0)
        if choices and value not in choices:
            return None
        try:
            converted = convert(value) if convert is not None else value
        except Exception:  # argparse's own error (ArgumentTypeError): the parser words it
            return None
        if kind == "list":
            values[dest] = list(values[dest]) + [converted]  # type: ignore[call-overload]
        else:
            values[dest] = converted
    if values["topology"] is not None and values["sysfs_root"] is not None:
        return None
    return SimpleNamespace(command="hook", **values)  # type: ignore[return-value]  # a Namespace's attributes


def _quick_settings(argv: Sequence[str]) -> Optional[Dict[str, str]]:
    """The check's settings from ``hook`` and its flags (a ``--config`` file first, the flags winning); None when the
    command line has a word the hook's parser does not know, or the settings leave only the full hook to decide."""
    if argv[:1] != ["hook"]:
        return None
    given: Dict[str, object] = {}
    words = list(argv[1:])
    while words:
        word = words.pop(0)
        flag, has_value, value = word.partition("=")
        if flag in SWITCHES and not has_value:
            given[flag[2:]] = True
        elif flag in QUICK_SETTINGS + OTHER_FLAGS and (has_value or words):
            given[flag[2:]] = value if has_value else words.pop(0)
        else:
            return None
    settings = {"state": DEFAULT_PATH, "cgroup-root": DEFAULT_ROOT, "policy": "static", "kubelet-state": KUBELET_PATH}
    if "config" in given:
        from_file = _config_settings(str(given["config"]))
        if from_file is None:
            return None
        settings.update(from_file)
    settings.update((name, value) for name, value in given.items() if isinstance(value, str))
    for switch in ("force", "exclusive-burstable", "system-partition"):
        if given.get(switch):
            settings[switch] = "true"
    if settings["policy"] != "static" or given.get("read-only") or settings.get("read-only"):
        return None
    return settings


def _config_settings(path: str) -> Optional[Dict[str, str]]:
    """What the check reads from the configuration file; None when it is anything but a small JSON object of
    strings and booleans for those settings (the parser then reads it and reports what is wrong)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        doc = loads(data)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_CONFIG_BYTES or not isinstance(doc, dict):
        return None
    settings = {}
    for key, value in doc.items():
        name = str(key).replace("_", "-")
        if name in ("state", "cgroup-root", "policy", "kubelet-state"):
            if not isinstance(value, str):
                return None
            settings[name] = value
        elif name in ("read-only", "force", "exclusive-burstable", "system-partition") and value not in (False, None):
            settings[name] = "true"
    return settings


def _stdin_bytes(stdin: TextIO) -> IO[bytes]:
    """A real stdin's bytes, or an in-memory one as it is."""
    buffer = getattr(stdin, "buffer", None)
    return buffer if buffer is not None else stdin  # type: ignore[return-value]  # tests hand in bytes
