# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Static policy options: names, maturity, parsing and validation exactly as the kubelet does them."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from ..errors import OptionError

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_CPUS_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"

# Maturity in the kubelet sources this project follows (policy_options.go @ 7ed31812).
MATURITY: Dict[str, str] = {
    FULL_PCPUS_ONLY: "GA",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "beta",
    ALIGN_BY_SOCKET: "alpha",
    DISTRIBUTE_CPUS_ACROSS_CORES: "alpha",
    STRICT_CPU_RESERVATION: "beta",
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: "beta",
}
ALL_OPTIONS: Tuple[str, ...] = tuple(MATURITY)

# Checked in this order by the kubelet.
EXCLUSIVE_PAIRS: Tuple[Tuple[str, str], ...] = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool; raises ValueError with Go's text."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError('strconv.ParseBool: parsing "%s": invalid syntax' % text)


class PolicyOptions(NamedTuple):
    """The parsed StaticPolicyOptions flags."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_cpus_by_uncorecache: bool = False
    kubelet_minor: int = 35  # whose allocation rules (docs/VERSIONS_IN_KUBECPU.md): 37 and 38 changed some

    def enabled(self) -> List[str]:
        """Kubelet names of the options that are on, in the kubelet's order."""
        return [name for name in ALL_OPTIONS if getattr(self, _field(name))]


def _field(name: str) -> str:
    return name.replace("-", "_")


def option_strings(raw: Any, what: str = "policy_options") -> Dict[str, str]:
    """An option map as the kubelet reads it from YAML: string values; YAML booleans become "true"/"false"."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise OptionError("%s must be a mapping of option names to values, got %r" % (what, raw))
    out: Dict[str, str] = {}
    for name, value in raw.items():
        if isinstance(value, bool):
            out[str(name)] = "true" if value else "false"
        elif isinstance(value, (str, int)):
            out[str(name)] = str(value)
        else:
            raise OptionError("%s: the value of %s must be a string or a boolean, got %r" % (what, name, value))
    return out


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (strconv.Quote), as the kubelet's messages quote a value: printable characters as
    they are, the rest escaped."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append(("\\x%02x" if code < 0x80 else "\\u%04x" if code < 0x10000 else "\\U%08x") % code)
    return '"%s"' % "".join(out)


def go_map_repr(raw: Mapping[str, str]) -> str:
    """fmt's rendering of a map[string]string: keys sorted, ``map[k:v k2:v2]``."""
    return "map[%s]" % " ".join("%s:%s" % (k, raw[k]) for k in sorted(raw))


def parse_options(raw: Optional[Mapping[str, str]], alpha_enabled: bool = True,
                  beta_enabled: bool = True) -> PolicyOptions:
    """NewStaticPolicyOptions: names, gates, ParseBool values, then the exclusive pairs.

    kubecpu has no feature gates of its own, so by default every maturity level is allowed; pass the
    kubelet's gate values to check a kubelet configuration. With several bad entries the kubelet reports
    one at random (Go map order); we report the first in sorted order.
    """
    flags: Dict[str, bool] = {}
    for name in sorted(raw or {}):
        value = (raw or {})[name]
        if name not in MATURITY:
            raise OptionError('unknown CPU Manager Policy option: "%s"' % name)
        if MATURITY[name] == "alpha" and not alpha_enabled:
            raise OptionError('CPU Manager Policy Alpha-level Options not enabled, but option "%s" provided' % name)
        if MATURITY[name] == "beta" and not beta_enabled:
            raise OptionError('CPU Manager Policy Beta-level Options not enabled, but option "%s" provided' % name)
        if not isinstance(value, str):
            raise OptionError('bad value for option "%s": a string is expected, got %r' % (name, value))
        try:
            flags[_field(name)] = parse_bool(value)
        except ValueError as exc:
            raise OptionError('bad value for option "%s": %s' % (name, exc)) from None
    options = PolicyOptions(**flags)
    for first, second in EXCLUSIVE_PAIRS:
        if getattr(options, _field(first)) and getattr(options, _field(second)):
            raise OptionError("static policy options %s and %s can not be used at the same time" % (first, second))
    return options


def parse_option_args(args: Optional[List[str]]) -> Dict[str, str]:
    """``NAME[=VALUE]`` command-line items to the kubelet's option map (a bare name means "true")."""
    raw: Dict[str, str] = {}
    for item in args or []:
        name, sep, value = item.partition("=")
        if not name:
            raise OptionError('bad --option "%s": expected NAME[=VALUE]' % item)
        raw[name] = value if sep else "true"
    return raw


def validate_for_machine(options: PolicyOptions, num_sockets: int, num_numa: int,
                         topology_manager_policy: Optional[str] = None) -> None:
    """ValidateStaticPolicyOptions (only align-by-socket has machine checks)."""
    if not options.align_by_socket:
        return
    if topology_manager_policy == "single-numa-node":
        raise OptionError("Topolgy manager single-numa-node policy is incompatible with CPUManager "
                          "align-by-socket policy option")
    if num_sockets > num_numa:
        raise OptionError("Align by socket is not compatible with hardware where number of sockets are more "
                          "than number of NUMA")
