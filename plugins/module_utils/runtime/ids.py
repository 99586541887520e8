# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Container IDs as kubecpu accepts them from a runtime: they go on command lines and into paths."""

from __future__ import annotations

import re

from ..errors import RuntimeOutputError

_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_container_id(value: str) -> str:
    """Only [A-Za-z0-9_.-], at most 128 characters; RuntimeOutputError otherwise."""
    if not isinstance(value, str) or not _CONTAINER_ID.match(value):
        raise RuntimeOutputError("invalid container ID %r: expected letters, digits, '_', '.' or '-'" % (value,))
    return value
