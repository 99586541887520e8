# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Which kubelet kubecpu is exact for: 1.35 (the default, and the agent's own state), 1.36, 1.37 or 1.38, and the
feature gates that change what it reads and writes (KUBELET_VERSIONS.md, part A).

- 1.35: writes V2; reads V1, then V2.
- 1.36: with ``PodLevelResourceManagers`` off, writes V2 and reads V2, then V1; with it on, writes V3 and reads V3,
  then V2, then V1.
- 1.37 and 1.38: write V4 always; read V4, then (only when the file has neither ``data`` nor ``dataChecksum``) V3,
  then V2; no V1.
A patch version (``1.37.2``) is its minor; any other version is refused with the known ones.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from ..errors import ConfigError

KNOWN = (35, 36, 37, 38)
DEFAULT_MINOR = 35
POD_LEVEL = "PodLevelResourceManagers"
EXCLUSIVE_RESIZE = "InPlacePodVerticalScalingExclusiveCPUs"
_VERSION = re.compile(r"(?:Kubernetes\s+)?v?1\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?")


class KubeletVersion(NamedTuple):
    """A kubelet minor version and its feature gates (name, value) pairs, sorted."""

    minor: int = DEFAULT_MINOR
    gates: Tuple[Tuple[str, bool], ...] = ()

    @property
    def name(self) -> str:
        return "1.%d" % self.minor

    def gate(self, name: str) -> bool:
        return dict(self.gates).get(name, False)

    @property
    def pod_level(self) -> bool:
        """Pod-level exclusive CPUs (``podEntries``) count in this kubelet's validation."""
        return self.minor >= 36 and self.gate(POD_LEVEL)

    @property
    def writes(self) -> str:
        """The checkpoint format this kubelet writes: v2, v3 or v4."""
        if self.minor >= 37:
            return "v4"
        return "v3" if self.minor == 36 and self.gate(POD_LEVEL) else "v2"


DEFAULT = KubeletVersion()  # 1.35, no gates: the agent's own state


def feature_gates(value: Optional[Mapping[str, Any]], what: str = "feature_gates") -> Tuple[Tuple[str, bool], ...]:
    """Gate names to true/false (``NAME=BOOL`` strings accepted); sorted, so equal settings compare equal."""
    gates: Dict[str, bool] = {}
    for name, raw in dict(value or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
            raise ConfigError("%s: %r is not a feature gate name" % (what, name))
        if isinstance(raw, bool):
            gates[name] = raw
        elif isinstance(raw, str) and raw.lower() in ("true", "false"):
            gates[name] = raw.lower() == "true"
        else:
            raise ConfigError("%s: %s must be true or false, got %r" % (what, name, raw))
    return tuple(sorted(gates.items()))


def kubelet_version(text: Optional[str] = None, gates: Optional[Mapping[str, Any]] = None) -> KubeletVersion:
    """``1.37``, ``1.37.2``, ``v1.37.2`` or ``Kubernetes v1.37.2`` (None: 1.35) with its feature gates."""
    if text is None or str(text).strip() == "":
        return KubeletVersion(DEFAULT_MINOR, feature_gates(gates))
    match = _VERSION.fullmatch(str(text).strip())
    minor = int(match.group(1)) if match else None
    if minor not in KNOWN:
        raise ConfigError("kubelet version %s is not one kubecpu knows: %s" % (
            text, ", ".join("1.%d" % known for known in KNOWN)))
    return KubeletVersion(minor, feature_gates(gates))


def clamped(minor: int, gates: Optional[Mapping[str, Any]] = None) -> KubeletVersion:
    """The known kubelet whose checkpoint rules a kubelet 1.<minor> follows: older ones are 1.35's, newer 1.38's."""
    return KubeletVersion(min(max(minor, KNOWN[0]), KNOWN[-1]), feature_gates(gates))
