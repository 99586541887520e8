# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Container IDs as kubecpu accepts them from a runtime: they go on command lines and into paths. (Sets, not a regular
expression: the OCI hook's start-up does not load ``re``.)"""

from __future__ import annotations

from ..errors import RuntimeOutputError

_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_REST = _FIRST | frozenset("_.-")


def check_container_id(value: str) -> str:
    """Only [A-Za-z0-9_.-], at most 128 characters; RuntimeOutputError otherwise."""
    valid = isinstance(value, str) and 0 < len(value) <= 128 and value[0] in _FIRST and _REST.issuperset(value)
    if not valid:
        raise RuntimeOutputError("invalid container ID %r: expected letters, digits, '_', '.' or '-'" % (value,))
    return value
