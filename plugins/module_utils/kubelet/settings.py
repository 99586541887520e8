# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Validators of single settings, each raising ``ConfigError`` naming the setting: ``NodeConfig`` uses them for a
node's settings, and the planning modules for the few they take (without the rest of the core)."""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from ..errors import ConfigError, CPUSetError, OptionError
from .cpuset import CPUSet
from .options import option_strings


def choice(value: Any, name: str, choices: Any) -> str:
    if value not in choices:
        raise ConfigError("%s must be one of %s, got %r" % (name, ", ".join(choices), value))
    return str(value)


def option_map(value: Any, name: str) -> Dict[str, str]:
    """An option map as the kubelet reads it from YAML (string values; YAML booleans become "true"/"false")."""
    try:
        return option_strings(value, name)
    except OptionError as exc:
        raise ConfigError(str(exc)) from None


def reserved_cpus(value: Any) -> Optional[CPUSet]:
    """The reserved CPU list setting (a CPU list text, a CPUSet, or nothing)."""
    if value is None or value == "" or isinstance(value, CPUSet):
        return value or None
    try:
        return CPUSet.parse(str(value))
    except CPUSetError as exc:
        raise ConfigError("reserved_cpus: %s" % exc) from None


def num_reserved(value: Any) -> Optional[int]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError("num_reserved must not be negative, got %r" % (value,))
    return value


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go-style durations (``10s``, ``500ms``, ``1m30s``) or plain seconds; more than 0, at most 24h."""
    value = text.strip()
    if re.match(r"^(\d+(?:\.\d*)?|\.\d+)$", value):
        seconds = float(value)
    elif value and _DURATION.sub("", value) == "":
        seconds = sum(float(number) * _UNITS[unit] for number, unit in _DURATION.findall(value))
    else:
        raise ValueError('invalid duration "%s" (examples: 10s, 500ms, 1m30s)' % text)
    if not 0 < seconds <= 86400:
        raise ValueError('invalid duration "%s": must be more than 0 and at most 24h' % text)
    return seconds
