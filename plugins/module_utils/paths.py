# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The one rule for a path kubecpu is handed, by an operator or by a peer, before it opens or writes anything there.

Absolute: kubecpu runs in directories of others' choosing (Ansible's, a runtime's), where a relative path names
nothing the one who gave it meant. Without a NUL byte: no system call takes one, and Python refuses it with a
``ValueError``, not the ``OSError`` every reader here expects of a path it cannot open.
"""

from __future__ import annotations

import os


def is_absolute_path(value: object) -> bool:
    """``value`` is a string, an absolute path, and free of NUL bytes."""
    return isinstance(value, str) and os.path.isabs(value) and "\x00" not in value
