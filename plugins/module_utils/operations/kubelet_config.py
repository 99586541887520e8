# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet's CPU manager configuration: validation per kubelet version, the new KubeletConfiguration keys,
and whether the kubelet would reject its ``cpu_manager_state`` after the change (the safe-migration decision).

The texts are the kubelet's own where it has one (KUBELET_CONFIG.md); a change is checked as a whole and the
first problem in a fixed order is reported, so the same input always gives the same message.
"""

from __future__ import annotations

import copy
import math
import os
import re
from fractions import Fraction
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..errors import (ConfigError, CPUSetError, KubecpuError, OptionError, PolicyError, QuantityError, RestoreFailure,
                      StateError)
from ..kubelet.checkpoint_formats import read
from ..kubelet.cpuset import CPUSet
from ..kubelet.discovery import CommandRunner, run_command
from ..kubelet.feature_gates import (NEWEST, check_existing_gates, cpu_gates, flag_value, overriding_flags,
                                     parse_version, topology_gates)
from ..kubelet.kubelet_versions import DEFAULT, KubeletVersion, clamped
from ..kubelet.device_state import DeviceNodes, devices_beside, read_device_nodes
from ..kubelet.memory_state import beside, read_memory_nodes
from ..kubelet.options import PolicyOptions, go_map_repr, option_strings, parse_options, validate_for_machine
from ..kubelet.policy import NO_RESERVATION, NONE, STATIC, ZERO_RESERVATION, new_policy, take_by_topology
from ..kubelet.quantity import parse_quantity
from ..kubelet.reservation import plan_reservation
from ..kubelet.topology import Topology
from ..node.admission import Admission
from ..node.config import NodeConfig
from ..node.judge import MemoryNodes
from ..node.what_if import Running
from .rewrite import Adopter, Rewrite, rewrite_checkpoint

MANAGED_KEYS = ("cpuManagerPolicy", "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod", "reservedSystemCPUs",
                "topologyManagerPolicy", "topologyManagerScope", "topologyManagerPolicyOptions", "featureGates")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")


class Desired(NamedTuple):
    """What the operator asks for; None keeps the file's current value."""

    policy: str = STATIC
    policy_options: Optional[Mapping[str, str]] = None
    reconcile_period: Optional[str] = None
    reserved_cpus: Optional[CPUSet] = None
    num_reserved: Optional[int] = None
    topology_manager_policy: Optional[str] = None
    topology_manager_scope: Optional[str] = None
    topology_manager_policy_options: Optional[Mapping[str, str]] = None


class Change(NamedTuple):
    config: Dict[str, Any]
    changed_keys: List[str]
    reserved: CPUSet
    reserved_source: str
    feature_gates: Dict[str, bool]
    verdict_before: Optional[str]
    verdict_after: Optional[str]
    notes: List[str]
    current_policy: str
    current_reserved: Optional[CPUSet]
    kubelet: KubeletVersion = DEFAULT  # whose checkpoint rules: the version, clamped to 1.35-1.38
    current_options: Optional[Dict[str, str]] = None  # the policy options of the configuration as it is now

    @property
    def migration_required(self) -> bool:
        return self.verdict_after is not None

    def settings(self) -> Dict[str, Any]:
        """The new configuration as the node's settings (``NodeConfig`` names)."""
        config = self.config
        return {"policy": config["cpuManagerPolicy"], "reserved_cpus": str(self.reserved) if self.reserved else None,
                "num_reserved": len(self.reserved), "policy_options": dict(config.get("cpuManagerPolicyOptions") or {}),
                "topology_manager_policy": str(config.get("topologyManagerPolicy") or "none"),
                "topology_manager_scope": str(config.get("topologyManagerScope") or "container"),
                "topology_manager_policy_options": dict(config.get("topologyManagerPolicyOptions") or {}),
                "kubelet_version": self.kubelet.name, "feature_gates": dict(self.kubelet.gates)}

    def to_dict(self, state_path: str) -> Dict[str, Any]:
        return {"config": self.config, "changed_keys": self.changed_keys, "config_changed": bool(self.changed_keys),
                "reserved_cpus": str(self.reserved), "reserved_source": self.reserved_source,
                "feature_gates": self.feature_gates,
                "migration": {"required": self.migration_required, "reason": self.verdict_after,
                              "state_path": state_path, "rejected_now": self.verdict_before is not None},
                "notes": self.notes,
                "checkpoint": {"kubelet": self.kubelet.name, "format": self.kubelet.writes,
                               "feature_gates": dict(self.kubelet.gates)},
                "current": {"policy": self.current_policy,
                            "reserved_cpus": None if self.current_reserved is None else str(self.current_reserved),
                            "policy_options": dict(self.current_options or {})}}


def _string_map(value: Any, what: str) -> Dict[str, str]:
    try:
        return option_strings(value, what)
    except OptionError as exc:
        raise ConfigError(str(exc)) from None


def _reserved(topo: Topology, desired: Desired, current: Mapping[str, Any],
              options: PolicyOptions) -> Tuple[CPUSet, str, bool, List[str]]:
    """The reserved set the kubelet will use, where it comes from, and whether to write it."""
    if desired.reserved_cpus is not None:
        if desired.num_reserved is not None and desired.num_reserved != len(desired.reserved_cpus):
            raise ConfigError("reserved_cpus %s holds %d CPUs but num_reserved is %d"
                              % (desired.reserved_cpus, len(desired.reserved_cpus), desired.num_reserved))
        return desired.reserved_cpus, "reserved_cpus", True, []
    if desired.num_reserved is not None:
        if desired.num_reserved == 0:
            return CPUSet(), "num_reserved", True, []
        plan = plan_reservation(topo, count=desired.num_reserved, options=options)
        return CPUSet.parse(plan["reserved_cpus"]), "planner", True, plan["notes"]
    listed = current.get("reservedSystemCPUs")
    if listed not in (None, ""):
        try:
            return CPUSet.parse(str(listed)), "config", False, []
        except CPUSetError as exc:
            raise ConfigError("the current reservedSystemCPUs: %s" % exc) from None
    cores, named = Fraction(0), False
    for section in ("kubeReserved", "systemReserved"):
        block = current.get(section) or {}
        if isinstance(block, Mapping) and block.get("cpu") not in (None, ""):
            named = True
            try:
                cores += parse_quantity(str(block["cpu"]))
            except QuantityError as exc:
                raise ConfigError("%s.cpu: %s" % (section, exc)) from None
    count = math.ceil(cores)
    if not count:  # "none": no reservation named at all; a named one of zero CPUs is the kubelet's other refusal
        return CPUSet(), "kubeReserved+systemReserved" if named else "none", False, []
    cpus = take_by_topology(topo, options, topo.all_cpus.as_frozenset(), min(count, len(topo.all_cpus)))
    return cpus, "kubeReserved+systemReserved", False, []


def state_verdict(data: Optional[bytes], policy: str, topo: Topology, reserved: CPUSet, *,
                  options: Mapping[str, str], state_path: str,
                  kubelet: KubeletVersion = DEFAULT, admission: Optional[Admission] = None,
                  memory: Optional[MemoryNodes] = None, devices: Optional[DeviceNodes] = None) -> Optional[str]:
    """None when the kubelet would accept its checkpoint with this configuration (or there is none) and, with
    ``admission`` (the new Topology Manager), admit every pinned pod again at its restart (``node/judge.py``, with the
    Memory Manager's pinned NUMA nodes, ``memory``, and the devices', ``devices``); else the kubelet's "could not
    restore state from checkpoint"
    message, or the first pod it would reject."""
    if data is None:
        return None
    try:
        restored = read(data, policy, kubelet)
        built = new_policy(policy, topo, len(reserved), reserved or None, options)
        built.start(restored.state.copy())
    except RestoreFailure as exc:
        return ("could not restore state from checkpoint: %s, please drain this node and delete the CPU manager "
                'checkpoint file "%s" before restarting Kubelet' % (exc, state_path))
    except (StateError, PolicyError, OptionError) as exc:
        return str(exc)
    rejected = [] if admission is None else admission.readmission(built, restored.state, memory=memory,
                                                                  devices=devices)
    if rejected:
        first = rejected[0]
        return "pod %s container %s: %s%s" % (first["pod"], first["container"], first["reason"],
                                              " (and %d more)" % (len(rejected) - 1) if len(rejected) > 1 else "")
    return None


def rewrite_for(change: Change, topo: Topology, state: Optional[bytes], adopt: Optional[Adopter] = None, *,
                state_path: Optional[str] = None) -> Rewrite:
    """The checkpoint the kubelet accepts after ``change`` (no drain), with its moves (``rewrite``), judged with the
    running pods (``adopt``'s list, ``what_if.Running``) and the Memory and Device Managers' checkpoints beside
    ``state_path``."""
    settings = change.settings()
    options = settings["policy_options"]
    if settings["policy"] == STATIC:  # the moves are chosen as this kubelet chooses
        options = parse_options(options)._replace(kubelet_minor=change.kubelet.minor)
    policy = new_policy(settings["policy"], topo, settings["num_reserved"], change.reserved or None, options)
    admission = Admission(topo, settings["topology_manager_policy"], settings["topology_manager_scope"],
                          settings["topology_manager_policy_options"])
    return rewrite_checkpoint(state, policy, admission=admission, adopt=adopt, kubelet=change.kubelet,
                              memory=read_memory_nodes(beside(state_path)) if state_path else None,
                              pods=adopt.pods() if isinstance(adopt, Running) else None,
                              devices=read_device_nodes(devices_beside(state_path)) if state_path else None)


def _current_policy(current: Mapping[str, Any]) -> str:
    return str(current.get("cpuManagerPolicy") or NONE)


def plan_change(current: Mapping[str, Any], desired: Desired, topo: Topology, version: str, *,
                state: Optional[bytes], state_path: str, flags: Optional[Mapping[str, bool]] = None,
                args: Sequence[str] = ()) -> Change:
    """Validate ``desired`` against this kubelet (its command line ``args``) and node, and compute the new config and
    the migration verdict.

    Raises ConfigError (or another KubecpuError) with one clear message when the kubelet would refuse it.
    """
    overriding = overriding_flags(args)
    if overriding:  # the kubelet runs what they say, whatever the file this plans says
        raise ConfigError("the kubelet's command line sets %s: a flag there overrides the configuration file, which "
                          "is what kubecpu plans; move the setting into the file (or remove it) first"
                          % ", ".join(overriding))
    drop_ins = flag_value(args, "--config-dir")
    if drop_ins:  # the kubelet merges each *.conf there over the file this plans (KubeletConfigDropinDir)
        raise ConfigError("the kubelet's command line sets --config-dir=%s: its drop-ins override the configuration "
                          "file, which is what kubecpu plans and reads; move their settings into the file and remove "
                          "the flag first" % drop_ins)
    root = flag_value(args, "--root-dir")
    if root and os.path.normpath(os.path.join(root, "cpu_manager_state")) != os.path.normpath(state_path):
        raise ConfigError("the kubelet's command line sets --root-dir=%s: its checkpoint is %s, not %s; name that "
                          "file as the kubelet's checkpoint" % (root, os.path.join(root, "cpu_manager_state"),
                                                                state_path))
    if not isinstance(current, Mapping):
        raise ConfigError("the kubelet configuration is not a mapping of keys to values")
    kind = current.get("kind")
    if kind not in (None, "KubeletConfiguration"):
        raise ConfigError('the kubelet configuration has kind "%s", expected KubeletConfiguration' % kind)
    major, minor = parse_version(version)
    if major != 1:
        raise ConfigError("kubelet version %s: only Kubernetes 1.x is known" % version)
    notes: List[str] = []
    if minor > NEWEST:
        notes.append("kubelet 1.%d is newer than the newest this collection knows (1.%d); its rules are assumed"
                     % (minor, NEWEST))
    if desired.policy not in (STATIC, NONE):
        raise ConfigError('unknown policy: "%s"' % desired.policy)
    flags = dict(flags or {})  # the kubelet's --feature-gates, laid over the file's
    in_file = current.get("featureGates") or {}
    if not isinstance(in_file, Mapping):
        raise ConfigError("featureGates must be a mapping of gate names to true/false")
    gates_now = dict(in_file, **flags)
    check_existing_gates(gates_now, minor)
    options = _string_map(desired.policy_options if desired.policy_options is not None
                          else current.get("cpuManagerPolicyOptions"), "cpuManagerPolicyOptions")
    if desired.policy == NONE and options:
        raise ConfigError("None policy: received unsupported options=%s" % go_map_repr(options))
    needed = cpu_gates(options, minor, gates_now)
    try:
        parsed = parse_options(options)
    except OptionError as exc:
        raise ConfigError(str(exc)) from None
    tm_policy = desired.topology_manager_policy or str(current.get("topologyManagerPolicy") or "none")
    tm_scope = desired.topology_manager_scope or str(current.get("topologyManagerScope") or "container")
    tm_options = _string_map(desired.topology_manager_policy_options
                             if desired.topology_manager_policy_options is not None
                             else current.get("topologyManagerPolicyOptions"), "topologyManagerPolicyOptions")
    needed.update(topology_gates(tm_policy, tm_scope, tm_options, minor=minor, num_numa=topo.num_numa,
                                 gates=gates_now))
    try:
        validate_for_machine(parsed, topo.num_sockets, topo.num_numa, tm_policy)
    except OptionError as exc:
        raise ConfigError(str(exc)) from None
    if desired.reconcile_period is not None and not _DURATION.match(desired.reconcile_period):
        raise ConfigError('cpuManagerReconcilePeriod "%s" is not a duration like 10s, 500ms or 1m'
                          % desired.reconcile_period)
    reserved, source, write_reserved, more = _reserved(topo, desired, current, parsed)
    notes.extend(more)
    if reserved:
        if current.get("systemReservedCgroup") or current.get("kubeReservedCgroup"):
            raise ConfigError("invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with "
                              "systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup "
                              "(--kube-reserved-cgroup)")
        if not reserved.issubset(topo.all_cpus):
            raise ConfigError("reserved-cpus: %s is not a subset of online-cpus: %s" % (reserved, topo.all_cpus))
    if desired.policy == STATIC and not reserved:  # the kubelet's words: none named, or named and zero
        raise ConfigError((NO_RESERVATION if source == "none" else ZERO_RESERVATION)
                          + " (set reserved_cpus or num_reserved)")

    new = copy.deepcopy(dict(current))
    new.setdefault("apiVersion", "kubelet.config.k8s.io/v1beta1")
    new.setdefault("kind", "KubeletConfiguration")
    new["cpuManagerPolicy"] = desired.policy
    _set_map(new, "cpuManagerPolicyOptions", options)
    if desired.reconcile_period is not None:
        new["cpuManagerReconcilePeriod"] = desired.reconcile_period
    if write_reserved:
        if reserved:
            new["reservedSystemCPUs"] = str(reserved)
        else:
            new.pop("reservedSystemCPUs", None)
    if desired.topology_manager_policy is not None:
        new["topologyManagerPolicy"] = tm_policy
    if desired.topology_manager_scope is not None:
        new["topologyManagerScope"] = tm_scope
    if desired.topology_manager_policy_options is not None:
        _set_map(new, "topologyManagerPolicyOptions", tm_options)
    overridden = sorted(name for name, value in needed.items() if flags.get(name) is False)
    if overridden:
        raise ConfigError("the kubelet's command line sets --feature-gates=%s, which this configuration needs on: "
                          "change the kubelet's flags first" % ",".join("%s=false" % name for name in overridden))
    if needed:
        gates = dict(in_file)
        gates.update(needed)
        new["featureGates"] = gates
    changed = [key for key in sorted(set(new) | set(current)) if new.get(key) != current.get(key)]
    kubelet = clamped(minor, {k: v for k, v in dict(new.get("featureGates") or {}, **flags).items()
                              if isinstance(v, bool)})
    try:
        current_options: Optional[Dict[str, str]] = _string_map(current.get("cpuManagerPolicyOptions"),
                                                                "cpuManagerPolicyOptions")
    except KubecpuError:
        current_options = None
    before, reserved_now = _verdict_now(current, current_options, topo, state, state_path=state_path,
                                        kubelet=kubelet)
    after = state_verdict(state, desired.policy, topo, reserved, options=options, state_path=state_path,
                          kubelet=kubelet, admission=Admission(topo, tm_policy, tm_scope, tm_options),
                          memory=read_memory_nodes(beside(state_path)),
                          devices=read_device_nodes(devices_beside(state_path)))
    notes.extend(_format_notes(state, desired.policy, kubelet))
    return Change(new, changed, reserved, source, needed, before, after, notes, _current_policy(current), reserved_now,
                  kubelet, current_options)


def _format_notes(state: Optional[bytes], policy: str, kubelet: KubeletVersion) -> List[str]:
    """What this kubelet loses of a checkpoint a newer one wrote (1.36 reads only a V4 file's V2 part)."""
    if state is None or kubelet.minor >= 37:
        return []
    try:
        newest = read(state, policy, clamped(37)).state
    except RestoreFailure:
        return []
    if newest.pod_entries and not kubelet.pod_level:
        return ["kubelet %s reads only the V2 part of this checkpoint: its pod-level assignments (podEntries of "
                "%s) are dropped" % (kubelet.name, ", ".join(sorted(newest.pod_entries)))]
    return []


def _verdict_now(current: Mapping[str, Any], options: Optional[Dict[str, str]], topo: Topology,
                 state: Optional[bytes], *, state_path: str,
                 kubelet: KubeletVersion) -> Tuple[Optional[str], Optional[CPUSet]]:
    """Would the kubelet accept its checkpoint with the configuration as it is now (its policy ``options``, None
    when they cannot be read) (None when it would or when that cannot be told), and the reserved CPUs it uses now."""
    policy = _current_policy(current)
    if options is None:
        return None, None
    try:
        reserved = _reserved(topo, Desired(policy=policy), current, parse_options(options))[0]
    except KubecpuError:
        return None, None
    return state_verdict(state, policy, topo, reserved, options=options, state_path=state_path,
                         kubelet=kubelet), reserved


def _set_map(config: Dict[str, Any], key: str, value: Dict[str, str]) -> None:
    if value:
        config[key] = dict(value)
    else:
        config.pop(key, None)


VERSION_OUTPUT_BYTES = 4096  # of what ``kubelet --version`` prints: one line


def ask_kubelet_version(binary: str, run: CommandRunner = run_command) -> str:
    """What ``<binary> --version`` prints (``Kubernetes v1.37.2``), the first line only; ``run`` bounds its time.
    A binary that cannot be run, fails, or prints no version the kubelet's way is a ConfigError naming it."""
    code, out, err = run([binary, "--version"])
    line = out[:VERSION_OUTPUT_BYTES].strip().split("\n", 1)[0].strip()
    if code != 0:
        said = (err or out)[:VERSION_OUTPUT_BYTES].strip()
        raise ConfigError("%s --version failed (exit %d): %s" % (binary, code, said or "no output"))
    parse_version(line)  # a ConfigError quoting the line when it is no version
    return line


def adopter(config: NodeConfig, topology: Topology) -> Running:
    """``what_if.adopt`` with a read-only manager for ``config`` (the runtime listed once on first use, closed after),
    and the running pods the judge admits again (``Running.pods``)."""
    return Running(config, topology)
