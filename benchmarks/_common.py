"""Shared helpers of the benchmark scripts: import path, generated topologies, percentiles."""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Callable, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
importlib.import_module("conftest")  # makes the collection and the test helpers importable

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated  # noqa: E402

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology  # noqa: E402


TOPOLOGIES: List[Tuple[str, Callable[[], Topology]]] = [
    ("2x64x2 (256 CPUs, 8 NUMA, 16 L3)", lambda: generated(2, 64, 2, 4, 8)),
    ("4x32x2 (256 CPUs, 4 NUMA, 8 L3)", lambda: generated(4, 32, 2, 1, 2)),
]


def percentiles(samples: List[float]) -> Tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
