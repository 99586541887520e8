# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What a rollout needs on a node, asked before anything changes there (the fleet's plan, and the rollout before
its first batch): root, systemd as PID 1 (the agent and the kubelet are its units), an interpreter the core runs on
and, for the agent, a container runtime that answers its version and a reservation that exists on the node and is
free in the agent's state file (the options it is built with included).

Every check is made, whatever failed before it: a refused node names all that is wrong with it at once. Nothing is
written; what is read is bounded (PID 1's name, the interpreter's answer) and the runtime is asked with its timeout.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, cast

from ..errors import ConfigError, KubecpuError
from ..kubelet.cpuset import CPUSet
from ..kubelet.discovery import CommandRunner, run_command
from ..kubelet.state import CPUState
from ..node.config import NodeConfig
from ..node.factory import build_policy, build_runtime, load_topology
from ..node.state_store import StateStore
from .process_age import service_age

MANAGERS = ("agent", "kubelet")
MIN_PYTHON = (3, 9)  # the core's oldest (no match statement, no X | Y at run time)
COMM_BYTES = 64  # of /proc/1/comm (the kernel keeps 16)
ANSWER_BYTES = 4096  # of what an interpreter answers to --version
_VERSION = re.compile(r"\bPython ([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
WHO = {"agent": "the agent", "kubelet": "the kubelet role"}


class Versioned(Protocol):
    """A runtime backend asked for its version (crictl's and the CRI client's both answer)."""

    def version(self) -> Dict[str, str]: ...

    def close(self) -> None: ...


def asked_runtime(config: NodeConfig) -> Versioned:
    """The backend the agent will use (``runtime``, its endpoint and timeout)."""
    return cast(Versioned, build_runtime(config))


def running_as_root(euid: int, manager: str) -> Optional[str]:
    """None when the module runs as root; else what the rollout could not do."""
    if euid == 0:
        return None
    writes = ("/opt/kubecpu, /etc/kubecpu, /var/lib/kubecpu and a systemd unit" if manager == "agent"
              else "the kubelet's configuration and checkpoint, and restarts the kubelet")
    return ("not root (uid %d): %s writes %s (become: true, or connect as root)" % (euid, WHO[manager], writes))


def init_name(root: str) -> str:
    """PID 1's name (``<root>/proc/1/comm``), at most ``COMM_BYTES`` of it (OSError when it cannot be read)."""
    with open(os.path.join(root, "proc", "1", "comm"), "rb") as handle:
        return handle.read(COMM_BYTES).decode("utf-8", "replace").strip()


def systemd_is_init(root: str, manager: str) -> Optional[str]:
    """None when PID 1 is systemd (below ``root``: the machine's /proc, a fake tree's in tests)."""
    path = os.path.join(root, "proc", "1", "comm")
    unit = "kubecpu-agent.service" if manager == "agent" else "the kubelet's unit (it is stopped and started)"
    try:
        name = init_name(root)
    except OSError as exc:
        return "cannot read PID 1's name (%s): %s; %s needs systemd" % (path, exc.strerror or exc, unit)
    if name != "systemd":
        return "PID 1 is %s, not systemd: %s needs systemd" % (name or "unnamed", unit)
    return None


def python_version(python: str, run: CommandRunner = run_command) -> Tuple[Optional[Tuple[int, int, int]], str]:
    """(major, minor, micro) of ``python --version``, or None, and what it answered (or why not)."""
    if not os.path.isabs(python):
        return None, "%s is not an absolute path" % python
    if not os.path.exists(python):
        return None, "%s does not exist" % python
    code, out, err = run([python, "--version"])
    text = (out[:ANSWER_BYTES] + " " + err[:ANSWER_BYTES]).strip()  # Python 2 answers on stderr
    found = _VERSION.search(text)
    if code != 0 or found is None:
        return None, "%s --version answered %r (exit %d)" % (python, text[:200], code)
    return (int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)), found.group(0)


def python_fits(python: Optional[str], run: CommandRunner = run_command,
                own: Tuple[int, ...] = tuple(sys.version_info[:3])) -> Tuple[Optional[str], str]:
    """(None or the problem, the version found) for the interpreter the agent runs with (``python``), or, None, the
    one this check runs in (the modules' own)."""
    if python is None:
        version: Optional[Tuple[int, ...]] = own
        said = "Python %s" % ".".join(str(part) for part in own)
        what = "this node's Python for Ansible's modules"
    else:
        version, said = python_version(python, run)
        what = "the agent's Python (%s)" % python
        if version is None:
            return "%s cannot run: %s" % (what, said), said
    if version is not None and tuple(version[:2]) < MIN_PYTHON:
        return ("%s is %s: kubecpu needs Python %d.%d or newer" % (what, said, MIN_PYTHON[0], MIN_PYTHON[1]),
                said)
    return None, said


def runtime_answers(runtime: Versioned) -> Tuple[Optional[str], Optional[Dict[str, str]]]:
    """(None or the problem, its name and version): the runtime asked for its version over its socket (or
    crictl), with its timeout."""
    try:
        answer = runtime.version()
    except KubecpuError as exc:
        return "the container runtime does not answer its version: %s" % exc, None
    finally:
        runtime.close()
    name, version = answer.get("RuntimeName", ""), answer.get("RuntimeVersion", "")
    if not name or not version:
        return "the container runtime answered no name or version: %r" % (answer,), None
    return None, {"name": name, "version": version, "api_version": answer.get("RuntimeApiVersion", "")}


def owners(state: CPUState, cpus: CPUSet) -> List[str]:
    """pod/container (the state's UIDs) of each assignment holding one of ``cpus``."""
    return ["%s/%s (%s)" % (pod, container, held) for pod, container, held in state.assignments()
            if held.intersection(cpus)]


def reservation_fits(config: NodeConfig) -> Tuple[Optional[str], Optional[str]]:
    """(None or the problem, the reserved CPUs): the policy built as the agent builds it (the options, the reserved
    CPUs online in this node's topology, a reservation at all), and the agent's state file, when there is one,
    valid for it with the reserved CPUs held by no container."""
    try:
        topology = load_topology(config)
        policy = build_policy(topology, config.policy, config.reserved_cpus, config.num_reserved,
                              config.policy_options, kubelet_minor=config.kubelet.minor)
    except KubecpuError as exc:
        return "the agent's settings do not fit this node: %s" % exc, None
    reserved = policy.reserved
    try:
        state = StateStore(config.state_path, policy.name, read_only=True, kubelet=config.kubelet).load()
    except KubecpuError as exc:
        return "the agent's state file cannot be used: %s" % exc, str(reserved)
    if state is None:
        return None, str(reserved)
    held = owners(state, reserved)
    if held:
        return ("reserved CPUs %s are not free: the agent's state file %s gives them to %s (release those "
                "containers or reserve other CPUs)" % (reserved, config.state_path, ", ".join(held))), str(reserved)
    try:
        policy.start(state, running=True)
    except KubecpuError as exc:
        return "the agent's state file %s does not fit this node: %s" % (config.state_path, exc), str(reserved)
    return None, str(reserved)


def preflight(config: NodeConfig, manager: str, *, python: Optional[str] = None, check_runtime: bool = True,
              euid: Optional[int] = None, run: CommandRunner = run_command,
              runtime_factory: Callable[[NodeConfig], Versioned] = asked_runtime,
              service: Optional[str] = None, service_files: Sequence[str] = ()) -> Dict[str, Any]:
    """Every check for ``manager`` (agent or kubelet), whatever failed before it: ``checks`` (each with ``check``,
    ``ok`` and ``detail``, the problem where it failed), ``problems`` (those details), ``python``, and for the agent
    ``runtime`` (name, version, API version), ``reserved_cpus`` and ``state_found`` (its state file was there); with
    ``service``, that unit's main process and which of ``service_files`` changed after it started
    (``process_age.service_age``; None without)."""
    if manager not in MANAGERS:
        raise ConfigError("manager must be one of %s, got %r" % (", ".join(MANAGERS), manager))
    root = config.sysfs_root or "/"
    checks: List[Dict[str, Any]] = []
    result: Dict[str, Any] = {"manager": manager, "checks": checks, "runtime": None, "reserved_cpus": None,
                              "state_found": None}

    def record(name: str, problem: Optional[str], detail: str) -> None:
        checks.append({"check": name, "ok": problem is None, "detail": problem or detail})

    record("root", running_as_root(os.geteuid() if euid is None else euid, manager), "root")
    record("systemd", systemd_is_init(root, manager), "PID 1 is systemd")
    problem, result["python"] = python_fits(python if manager == "agent" else None, run)
    record("python", problem, result["python"])
    if manager == "agent":
        if check_runtime:
            try:
                problem, answer = runtime_answers(runtime_factory(config))
            except KubecpuError as exc:
                problem, answer = "the container runtime cannot be asked: %s" % exc, None
            result["runtime"] = answer
            record("runtime", problem, "%s %s" % (answer["name"], answer["version"]) if answer else "")
        result["state_found"] = os.path.lexists(config.state_path)  # a failed first installation keeps it then
        problem, result["reserved_cpus"] = reservation_fits(config)
        record("reservation", problem, "reserved CPUs %s" % result["reserved_cpus"])
    result["service"] = service_age(service, service_files, run) if service else None
    result["problems"] = [check["detail"] for check in checks if not check["ok"]]
    return result
