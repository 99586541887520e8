# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Which CPU manager and Topology Manager options a kubelet version knows, at which maturity, and the feature gates
they need (KUBELET_CONFIG.md section 2): the kubelet's own refusals, in its words, for versions 1.22 to 1.36 (later
versions as 1.36). The kubelet configuration planner (``operations/kubelet_config``) asks these first.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from .options import (ALIGN_BY_SOCKET, DISTRIBUTE_CPUS_ACROSS_CORES, DISTRIBUTE_CPUS_ACROSS_NUMA, FULL_PCPUS_ONLY,
                      PREFER_ALIGN_CPUS_BY_UNCORECACHE, STRICT_CPU_RESERVATION, go_quote, parse_bool)
from .topology_manager import MAX_ALLOWABLE, POLICIES, PREFER_CLOSEST, SCOPES

OLDEST, NEWEST = 22, 36
ALPHA, BETA, GA = "alpha", "beta", "GA"

# (first minor version, maturity) steps per static policy option (KUBELET_CONFIG.md section 2).
CPU_OPTION_HISTORY: Dict[str, Tuple[Tuple[int, str], ...]] = {
    FULL_PCPUS_ONLY: ((22, "alpha-gate"), (23, BETA), (33, GA)),
    DISTRIBUTE_CPUS_ACROSS_NUMA: ((23, ALPHA), (33, BETA)),
    ALIGN_BY_SOCKET: ((25, ALPHA),),
    DISTRIBUTE_CPUS_ACROSS_CORES: ((31, ALPHA),),
    STRICT_CPU_RESERVATION: ((32, ALPHA), (33, BETA), (35, GA)),
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: ((32, ALPHA), (34, BETA), (36, GA)),
}
TOPOLOGY_OPTION_HISTORY: Dict[str, Tuple[Tuple[int, str], ...]] = {
    PREFER_CLOSEST: ((26, ALPHA), (28, BETA), (32, GA)),
    MAX_ALLOWABLE: ((31, BETA), (35, GA)),
}

# Gate names.
CPU_MANAGER = "CPUManager"
CPU_OPTIONS_GATE = "CPUManagerPolicyOptions"
CPU_ALPHA_GATE = "CPUManagerPolicyAlphaOptions"
CPU_BETA_GATE = "CPUManagerPolicyBetaOptions"
TM_OPTIONS_GATE = "TopologyManagerPolicyOptions"
TM_ALPHA_GATE = "TopologyManagerPolicyAlphaOptions"
TM_BETA_GATE = "TopologyManagerPolicyBetaOptions"

_VERSION = re.compile(r"(?:Kubernetes\s+)?v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?")


def parse_version(text: str) -> Tuple[int, int]:
    """``Kubernetes v1.33.2`` (``kubelet --version``), ``v1.33.2`` or ``1.33`` to (1, 33)."""
    match = _VERSION.fullmatch(str(text).strip())
    if not match:
        raise ConfigError('cannot read a kubelet version from "%s" (expected like "Kubernetes v1.33.2" or "1.33")'
                          % text)
    return int(match.group(1)), int(match.group(2))


def _maturity(history: Mapping[str, Tuple[Tuple[int, str], ...]], name: str, minor: int) -> Optional[str]:
    level = None
    for since, maturity in history.get(name, ()):
        if minor >= since:
            level = maturity
    return level


def cpu_option_maturity(name: str, minor: int) -> Optional[str]:
    """The option's maturity in kubelet 1.<minor>, None when that kubelet does not know it."""
    return _maturity(CPU_OPTION_HISTORY, name, min(minor, NEWEST))


def _gate_value(gates: Mapping[str, Any], name: str, default: bool) -> bool:
    value = gates.get(name, default)
    return value if isinstance(value, bool) else default


_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
             "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}  # strconv.ParseBool


def flag_gates(args: Sequence[str]) -> Dict[str, bool]:
    """The feature gates a kubelet's command line sets (``--feature-gates=A=true,B=false``, or the list as the next
    argument; repeated flags add up, a later value wins). The kubelet lays them over its configuration file's
    ``featureGates``."""
    gates: Dict[str, bool] = {}
    for index, arg in enumerate(args):
        if arg.startswith("--feature-gates="):
            value = arg.split("=", 1)[1]
        elif arg == "--feature-gates" and index + 1 < len(args):
            value = args[index + 1]
        else:
            continue
        for pair in filter(None, (part.strip() for part in value.split(","))):
            name, sep, text = pair.partition("=")
            if not sep or text.strip() not in _GO_BOOLS:
                raise ConfigError('invalid argument "%s" for "--feature-gates" flag: missing bool value for %s'
                                  % (value, name.strip()) if not sep else
                                  'invalid argument "%s" for "--feature-gates" flag: invalid value of %s: %s'
                                  % (value, name.strip(), text.strip()))
            gates[name.strip()] = _GO_BOOLS[text.strip()]
    return gates


# The kubelet's flags that set what kubecpu plans, each a KubeletConfiguration key: on the kubelet's command line a
# flag overrides its key in the configuration file (kubernetes.io, "Set Kubelet Parameters Via A Configuration File").
CONFIG_FLAGS = {"--cpu-manager-policy": "cpuManagerPolicy", "--cpu-manager-policy-options": "cpuManagerPolicyOptions",
                "--cpu-manager-reconcile-period": "cpuManagerReconcilePeriod", "--reserved-cpus": "reservedSystemCPUs",
                "--kube-reserved": "kubeReserved", "--system-reserved": "systemReserved",
                "--kube-reserved-cgroup": "kubeReservedCgroup", "--system-reserved-cgroup": "systemReservedCgroup",
                "--topology-manager-policy": "topologyManagerPolicy",
                "--topology-manager-scope": "topologyManagerScope",
                "--topology-manager-policy-options": "topologyManagerPolicyOptions"}


def overriding_flags(args: Sequence[str]) -> List[str]:
    """The flags of a kubelet's command line (``--name=value`` or ``--name value``) that override a key of its
    configuration file that kubecpu plans (``CONFIG_FLAGS``), as given, in order."""
    found = []
    for index, arg in enumerate(args):
        name, sep, _value = arg.partition("=")
        if name in CONFIG_FLAGS:
            found.append(arg if sep or index + 1 >= len(args) else "%s=%s" % (name, args[index + 1]))
    return found


def flag_value(args: Sequence[str], flag: str) -> Optional[str]:
    """The last value a kubelet command line gives ``flag`` (``--name=value`` or ``--name value``), None without it."""
    found = None
    for index, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name == flag:
            found = value if sep else (args[index + 1] if index + 1 < len(args) else "")
    return found


def check_existing_gates(gates: Mapping[str, Any], minor: int) -> None:
    """Gates in the current file that this kubelet would refuse outright."""
    for name, value in sorted(gates.items()):
        if not isinstance(value, bool):
            raise ConfigError("featureGates.%s must be true or false, got %r" % (name, value))
    if minor >= 33 and CPU_MANAGER in gates:
        raise ConfigError("unrecognized feature gate: %s (removed in kubelet 1.33; delete it from featureGates)"
                          % CPU_MANAGER)
    locked = [(CPU_MANAGER, 26, 32), (CPU_OPTIONS_GATE, 33, NEWEST), (TM_OPTIONS_GATE, 32, NEWEST)]
    for name, first, last in locked:
        if first <= minor <= last and gates.get(name) is False:
            raise ConfigError("cannot set feature gate %s to false, feature is locked to true" % name)


def cpu_gates(options: Mapping[str, str], minor: int, gates: Mapping[str, Any]) -> Dict[str, bool]:
    """Check the static policy options' names against kubelet 1.<minor> and return the gates they need set to true
    (their values and pairs are parse_options' job).

    Gates on by default are written only when the file turns them off; locked (GA) gates are never written.
    """
    needed: Dict[str, bool] = {}
    if not options:
        return needed
    if minor < OLDEST:
        raise ConfigError("kubelet 1.%d has no CPU manager policy options (they start in 1.22)" % minor)
    for name in sorted(options):
        level = cpu_option_maturity(name, minor)
        if level is None:
            raise ConfigError('unknown CPU Manager Policy option: "%s"%s' % (name, _known_since(name, minor)))
        if level in ("alpha-gate", ALPHA):
            needed[CPU_ALPHA_GATE if level == ALPHA else CPU_OPTIONS_GATE] = True
        elif level == BETA and not _gate_value(gates, CPU_BETA_GATE, True):
            needed[CPU_BETA_GATE] = True
    if 23 <= minor <= 32 and not _gate_value(gates, CPU_OPTIONS_GATE, True):
        needed[CPU_OPTIONS_GATE] = True
    if minor == 22:
        needed[CPU_OPTIONS_GATE] = True
    return needed


def _known_since(name: str, minor: int) -> str:
    history = CPU_OPTION_HISTORY.get(name) or TOPOLOGY_OPTION_HISTORY.get(name)
    if history:
        return " (kubelet 1.%d does not know it; it exists from 1.%d)" % (minor, history[0][0])
    return ""


def topology_gates(policy: str, scope: str, options: Mapping[str, str], *, minor: int, num_numa: int,
                   gates: Mapping[str, Any]) -> Dict[str, bool]:
    """Validate the Topology Manager settings for kubelet 1.<minor>; the gates its options need."""
    if policy not in POLICIES:  # the kubelet's configuration validation, word for word (Go's %q of a []string)
        raise ConfigError('invalid configuration: topologyManagerPolicy (--topology-manager-policy) %s must be one '
                          'of: [%s]' % (go_quote(policy), " ".join(go_quote(name) for name in POLICIES)))
    if scope not in SCOPES:
        raise ConfigError('invalid configuration: topologyManagerScope (--topology-manager-scope) %s must be one of: '
                          '%s, or %s' % (go_quote(scope), go_quote(SCOPES[0]), go_quote(SCOPES[1])))
    needed: Dict[str, bool] = {}
    max_numa = 8
    for name in sorted(options):
        level = _maturity(TOPOLOGY_OPTION_HISTORY, name, min(minor, NEWEST))
        if level is None:
            raise ConfigError('unknown Topology Manager Policy option: "%s"%s' % (name, _known_since(name, minor)))
        value = options[name]
        if name == PREFER_CLOSEST:
            try:
                parse_bool(value)
            except ValueError as exc:
                raise ConfigError('bad value for option "%s": %s' % (name, exc)) from None
        else:
            if not re.fullmatch(r"[+-]?\d+", value):
                raise ConfigError('bad value for option "%s": strconv.Atoi: parsing "%s": invalid syntax'
                                  % (name, value))
            max_numa = int(value)
            if max_numa < 8:
                raise ConfigError('the minimum value of "%s" should not be less than 8' % MAX_ALLOWABLE)
        if level == ALPHA:
            needed[TM_ALPHA_GATE] = True
        elif level == BETA and (minor < 28 or not _gate_value(gates, TM_BETA_GATE, True)):
            needed[TM_BETA_GATE] = True
        if minor < 28 or (minor < 32 and not _gate_value(gates, TM_OPTIONS_GATE, True)):
            needed[TM_OPTIONS_GATE] = True
    if policy != "none" and num_numa > max_numa:
        raise ConfigError("topology manager policy %s: unsupported on machines with more than %d NUMA Nodes "
                          "(this node has %d; raise the %s option)" % (policy, max_numa, num_numa, MAX_ALLOWABLE))
    return needed
