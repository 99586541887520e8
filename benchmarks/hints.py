"""Topology hints and the Topology Manager merge (issue: hints p99 < 2 ms on a 256-CPU, 8-NUMA node; merge of CPU +
memory providers offering every NUMA combination, 255 x 255 hint pairs, p99 < 100 ms under each policy).

Hints: GetTopologyHints for requests of 1, 8, 32 and 96 CPUs on a 256-CPU node (2 sockets x 64 cores x 2 threads,
4 NUMA nodes per socket), on the whole node and on a fragmented one (each CPU free with probability 1/2, fixed
seed). The baseline is the kubelet's own formulation in Python (a CPU set built per NUMA combination).
Merge: two providers each offering all 255 combinations of 8 NUMA nodes (preferred when one node wide), merged
under each policy. The baseline folds the kubelet's compare over every one of the 65,025 permutations; ours folds
it over the distinct merged results. Both must agree; the ratio is ours over the baseline (p50).

    python benchmarks/hints.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import random

from functools import partial

from _common import percentiles, timed
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.hints import (
    TopologyHint, _Machine, container_hints, generate, iterate_masks)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import PolicyOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology_manager import (
    POLICIES, Candidate, TopologyManager, _filter_providers, mask_of)

MS = 1000.0


def naive_hints(topo, available, count):
    """generateCPUTopologyHints as the kubelet writes it: set operations per NUMA combination."""
    nodes = sorted(topo.numa_cpus)
    minimum, found = len(nodes), []
    for mask in iterate_masks(nodes):
        cpus = topo.cpus_in_numa_nodes(*mask)
        if len(cpus) >= count and len(mask) < minimum:
            minimum = len(mask)
        if len(available.intersection(cpus)) >= count:
            found.append(mask)
    return [TopologyHint(m, len(m) == minimum) for m in found]


def naive_merge(manager, providers):
    """Every permutation in order, mergePermutation then compare, as the kubelet iterates them."""
    lists = _filter_providers(providers)
    best_count = max(min(len(h.affinity) for h in hints if h.affinity) for hints in lists)
    best = None
    for permutation in itertools.product(*lists):
        merged, first, preferred = manager.default, None, True
        for hint in permutation:
            if hint.affinity is not None:
                mask = mask_of(hint.affinity)
                merged &= mask
                preferred = preferred and (first is None or first == mask)
                first = mask if first is None else first
            preferred = preferred and hint.preferred
        if manager._compare(best, Candidate(merged, preferred), best_count):
            best = Candidate(merged, preferred)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run for the test suite)")
    args = parser.parse_args()
    runs = 5 if args.quick else 200
    topo = generated(2, 64, 2, 4)
    assert topo.num_cpus == 256 and topo.num_numa == 8
    rng = random.Random(7)
    free_sets = {"whole": topo.all_cpus,
                 "fragmented": CPUSet(c for c in topo.all_cpus if rng.random() < 0.5)}
    machine = _Machine(topo)
    misses = []
    first = timed(partial(container_hints, topo, PolicyOptions(), topo.all_cpus, 1)) * MS
    print("0. first hints on this topology (builds its per-node table, once per topology): %.3f ms" % first)
    print("1. hints (GetTopologyHints) on 256 CPUs, 8 NUMA nodes, %d runs each" % runs)
    print("   %-11s %5s %9s %9s %14s %7s" % ("free set", "CPUs", "p50 ms", "p99 ms", "baseline p50", "ratio"))
    for label, free in free_sets.items():
        for count in (1, 8, 32, 96):
            ours = [timed(partial(container_hints, topo, PolicyOptions(), free, count)) for _run in range(runs)]
            base = [timed(partial(naive_hints, topo, free, count)) for _run in range(max(runs // 4, 3))]
            assert generate(topo, free, CPUSet(), count, machine=machine) == naive_hints(topo, free, count)
            p50, p99 = (v * MS for v in percentiles(ours))
            b50 = percentiles(base)[0] * MS
            print("   %-11s %5d %9.3f %9.3f %14.3f %7.2f" % (label, count, p50, p99, b50, p50 / b50))
            if p99 >= 2.0:
                misses.append("hints %s %d: p99 %.3f ms" % (label, count, p99))
    nodes = list(range(8))
    every = [TopologyHint(m, len(m) == 1) for m in iterate_masks(nodes)]
    providers = [{"cpu": every}, {"memory": every}]
    merge_runs = 3 if args.quick else 30
    print("2. merge of CPU + memory hints, every NUMA combination each (255 x 255 permutations), %d runs" % merge_runs)
    print("   %-17s %9s %9s %14s %7s  %s" % ("policy", "p50 ms", "p99 ms", "baseline p50", "ratio", "result"))
    for policy in POLICIES:
        manager = TopologyManager(policy, nodes)
        result = manager.merge(providers)
        ours = [timed(partial(manager.merge, providers)) for _run in range(merge_runs)]
        base = [timed(partial(naive_merge, manager, providers)) for _run in range(1 if args.quick else 3)]
        if policy in ("best-effort", "restricted"):
            expected = naive_merge(manager, providers)
            assert (expected.mask, expected.preferred) == (result.affinity, result.preferred), policy
        p50, p99 = (v * MS for v in percentiles(ours))
        b50 = percentiles(base)[0] * MS
        print("   %-17s %9.3f %9.3f %14.1f %7.4f  %s" % (policy, p50, p99, b50, p50 / b50, result.to_dict()))
        if p99 >= 100.0:
            misses.append("merge %s: p99 %.1f ms" % (policy, p99))
    verdict = "met" if not misses else "MISSED " + "; ".join(misses)
    if args.quick:
        verdict = "not judged (a --quick run takes too few samples for a p99)"
    print("targets: hints p99 < 2 ms, merge p99 < 100 ms: %s" % verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
