"""Allocation latency of the kubelet static policy's CPU choice (issue: p99 < 1 ms packed, < 10 ms distributed).

For each generated topology, request size (1, 4, 16, 64) and algorithm (packed best fit, NUMA-distributed),
times single allocations on two free sets: the whole node, and a fragmented node (every CPU free with
probability 1/2, fixed seed). The baseline is the naive choice (the first N free CPUs by id) in the same run;
"ratio" is our p50 over the baseline's p50. Peak memory is tracemalloc's peak in a separate pass after the timing
(one allocation of each kind), so tracing never slows the timed runs.

    python benchmarks/allocation.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import tracemalloc
from functools import partial

from _common import TOPOLOGIES, percentiles, timed

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpu_assignment import (
    take_by_topology_distributed, take_by_topology_packed)

TARGET_MS = {"packed": 1.0, "distributed": 10.0}


def _naive(free: frozenset, count: int) -> list:
    """The baseline: the first ``count`` free CPUs by id, no topology at all."""
    return sorted(free)[:count]


def _verdict(misses: list, quick: bool) -> str:
    if quick:
        return "not judged (a --quick run takes too few samples for a p99)"
    return "met" if not misses else "MISSED: " + "; ".join(misses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run for the test suite)")
    args = parser.parse_args()
    iterations = 5 if args.quick else 300
    rng = random.Random(42)
    misses = []
    runs = []
    header = ("topology", "algorithm", "free set", "CPUs", "p50 ms", "p99 ms", "naive p50 ms", "ratio")
    print("%-34s %-12s %-10s %5s %10s %10s %12s %7s" % header)
    for name, build in TOPOLOGIES:
        topo = build()
        everything = frozenset(topo.all_cpus.as_frozenset())
        fragmented = frozenset(c for c in everything if rng.random() < 0.5)
        for algorithm in ("packed", "distributed"):
            for label, free in (("whole", everything), ("fragmented", fragmented)):
                for count in (1, 4, 16, 64):
                    if algorithm == "packed":
                        run = partial(take_by_topology_packed, topo, free, count)
                    else:
                        run = partial(take_by_topology_distributed, topo, free, count, 1)
                    runs.append(run)
                    samples = [timed(run) for _i in range(iterations)]
                    naive = [timed(partial(_naive, free, count)) for _i in range(iterations)]
                    p50, p99 = percentiles(samples)
                    base, _p99 = percentiles(naive)
                    if p99 * 1000 >= TARGET_MS[algorithm]:
                        misses.append("%s %s %s %d: p99 %.3f ms" % (name, algorithm, label, count, p99 * 1000))
                    print("%-34s %-12s %-10s %5d %10.3f %10.3f %12.4f %7.0f" % (
                        name, algorithm, label, count, p50 * 1000, p99 * 1000, base * 1000, p50 / base))
    tracemalloc.start()  # memory in a separate, untimed pass: one allocation of every kind above
    for run in runs:
        run()
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print("\npeak memory (tracemalloc, separate untimed pass): %.2f MiB" % (peak / 2 ** 20))
    print("targets: p99 < %.0f ms packed, < %.0f ms distributed: %s" % (
        TARGET_MS["packed"], TARGET_MS["distributed"], _verdict(misses, args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
