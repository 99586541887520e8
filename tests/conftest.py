"""Make ``ansible_collections.kubecpu.cpu_manager`` importable from a plain checkout.

The repository root is the collection root. When it is not already checked out below an
``ansible_collections/kubecpu/cpu_manager`` path, a symlink tree under ``.cache/collections`` provides one.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collections_path() -> str:
    parts = ROOT.split(os.sep)
    if parts[-3:-2] == ["ansible_collections"] and parts[-2:] == ["kubecpu", "cpu_manager"]:
        return os.sep.join(parts[:-3])
    base = os.path.join(ROOT, ".cache", "collections")
    link = os.path.join(base, "ansible_collections", "kubecpu", "cpu_manager")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        try:
            os.symlink(ROOT, link)
        except FileExistsError:
            pass
    return base


if _collections_path() not in sys.path:
    sys.path.insert(0, _collections_path())
