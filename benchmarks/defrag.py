"""Defragmentation: how close each planner gets to the best packing, with how many moves, in how much time.

1. Random 16-32-CPU nodes (2 NUMA nodes x 4, 6 or 8 cores x 2 threads, core 0 reserved, 1-3-CPU containers on
   random free CPUs until 50-85% of the allocatable CPUs are taken, no options). The best packing any set of moves
   can reach while every moved container lands on one NUMA node is found here by exhaustive search, on real CPU
   sets (every set of containers that stay, every split of the others between the two nodes, each node filled
   half-used cores first), independently of the planners. Printed per planner: the share of nodes where it
   reaches the best packing (the largest single-NUMA whole-core request and then the free whole cores), its
   attainment (its largest single-NUMA whole-core request over the best, mean), its moves and time.
2. 256 CPUs (2 sockets x 64 cores x 2 threads, 8 NUMA nodes; CPUs 0 and 128 reserved) with 100 exclusive
   containers of 1 to 4 CPUs on random free CPUs: both planners on the same nodes, and the static policy
   admitting the same 100 containers on the empty node as the baseline for time.

    python benchmarks/defrag.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import random
from fractions import Fraction

from _common import percentiles, timed
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import parse_options
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import GUARANTEED, Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import plan_defrag, plan_greedy

TOPO = generated(2, 64, 2, 4, 8)
RESERVED = CPUSet.parse("0,128")
NO_OPTIONS = parse_options(None)
PLANNERS = (("exact (plan_defrag)", plan_defrag), ("greedy (plan_greedy)", plan_greedy))


def fragmented(seed):
    rng = random.Random(seed)
    free = sorted(set(TOPO.all_cpus) - set(RESERVED))
    rng.shuffle(free)
    state, sizes = CPUState("static"), []
    for n in range(100):
        size = rng.choice([1, 1, 2, 2, 3, 4])
        taken, free = free[:size], free[size:]
        state.set("pod-%03d" % n, "app", CPUSet(taken))
        sizes.append(size)
    state.default = CPUSet(free).union(RESERVED)
    return state, sizes


def small_node(seed):
    """A random fragmented 2-NUMA node: its topology, reserved CPUs, state and containers' CPU sets."""
    rng = random.Random(seed)
    cores = rng.choice([4, 6, 8])
    topo = generated(2, cores, 2)
    reserved = CPUSet([0, 2 * cores])
    free = sorted(set(topo.all_cpus) - set(reserved))
    rng.shuffle(free)
    goal = len(free) * (1 - rng.uniform(0.50, 0.85))
    state, units = CPUState("static"), []
    while len(free) > goal:
        size = min(rng.choice([1, 2, 3]), len(free))
        taken, free = frozenset(free[:size]), free[size:]
        state.set("pod-%02d" % len(units), "app", CPUSet(taken))
        units.append(taken)
    state.default = CPUSet(free).union(reserved)
    return topo, reserved, state, units


def _whole_after(topo, node_cpus, avail, incoming):
    """Free whole cores of a NUMA node whose free CPUs are ``avail`` once ``incoming`` CPUs are placed on it,
    half-used cores first (on real CPU sets); None when they do not fit."""
    if incoming > len(avail):
        return None
    cores = {}
    for cpu in node_cpus:
        cores.setdefault(topo.loc[cpu][0], set()).add(cpu)
    whole = sorted(core for core, cpus in cores.items() if cpus <= avail)
    partial = [cpu for core, cpus in cores.items() if core not in whole for cpu in cpus & avail]
    left = set(avail)
    take = partial[:incoming] + [cpu for core in whole for cpu in sorted(cores[core])][:max(0, incoming - len(partial))]
    left.difference_update(take)
    return sum(1 for cpus in cores.values() if cpus <= left)


def best_packing(topo, reserved, units):
    """(best score, fewest containers moved at it) by exhaustive search: score = (most free whole cores on one
    NUMA node, free whole cores)."""
    nodes = [set(topo.numa_cpus[n]) for n in sorted(topo.numa_cpus)]
    allocatable = [cpus - set(reserved) for cpus in nodes]
    best, fewest = None, None
    for stays in itertools.product((True, False), repeat=len(units)):
        held = set().union(*(u for u, stay in zip(units, stays) if stay))
        lifted = [len(u) for u, stay in zip(units, stays) if not stay]
        sums = {0}
        for size in lifted:
            sums |= {s + size for s in sums}
        volume = sum(lifted)
        for to_first in sums:
            wholes = [_whole_after(topo, nodes[i], allocatable[i] - held, amount)
                      for i, amount in enumerate((to_first, volume - to_first))]
            if None in wholes:
                continue
            score = (max(wholes), sum(wholes))
            if best is None or score > best or (score == best and len(lifted) < fewest):
                best, fewest = score, len(lifted)
    return best, fewest


def _score(found, threads=2):
    return found.after["largest_single_numa_whole_cores"] // threads, found.after["free_whole_cores"]


def random_nodes(samples):
    print("1. random 16-32-CPU nodes (2 NUMA, 4/6/8 cores x 2 threads, core 0 reserved, 1-3-CPU containers), "
          "%d nodes, the best packing by exhaustive search:" % samples)
    cases = [small_node(seed) for seed in range(samples)]
    references = [best_packing(topo, reserved, units) for topo, reserved, _state, units in cases]
    results = {}
    for name, planner in PLANNERS:
        rows = []
        for (topo, reserved, state, _units), (best, fewest) in zip(cases, references):
            found = None

            def run(topo=topo, reserved=reserved, state=state, planner=planner):
                nonlocal found
                found = planner(topo, NO_OPTIONS, state, reserved)
            seconds = timed(run)
            rows.append((found, best, fewest, seconds))
        results[name] = rows
        at_best = sum(1 for found, best, _f, _s in rows if _score(found) == best)
        attainment = sum(_score(found)[0] / best[0] if best[0] else 1.0 for found, best, _f, _s in rows) / len(rows)
        minimal = sum(1 for found, best, fewest, _s in rows
                      if _score(found) == best and len({m.pod_uid for m in found.moves}) == fewest)
        proven = sum(1 for found, *_rest in rows if found.proven_best)
        p50, p99 = percentiles([row[3] for row in rows])
        print("   %-21s best packing on %5.1f%% of nodes (target >= 99%% for exact)  attainment %.3f  moves mean %.2f "
              "(fewest containers at the best on %d of %d)  proven best %d  p50 %6.1f ms  p99 %6.1f ms"
              % (name, 100.0 * at_best / len(rows), attainment, sum(len(row[0].moves) for row in rows) / len(rows),
                 minimal, at_best, proven, p50 * 1000, p99 * 1000))
    exact, greedy = (results[name] for name, _planner in PLANNERS)
    same = [(e[0], g[0]) for e, g in zip(exact, greedy) if _score(e[0]) == _score(g[0])]
    print("   where both reach the same score (%d nodes): exact's moves <= greedy's on %d, exact's mean %.2f, greedy's "
          "%.2f" % (len(same), sum(1 for e, g in same if len(e.moves) <= len(g.moves)),
                    sum(len(e.moves) for e, _g in same) / max(1, len(same)),
                    sum(len(g.moves) for _e, g in same) / max(1, len(same))))


def admit_all(sizes):
    policy = new_policy("static", TOPO, len(RESERVED), RESERVED)
    state = CPUState("static")
    policy.start(state)
    for n, size in enumerate(sizes):
        cpus = Fraction(size)
        pod = Pod("pod-%03d" % n, "", "", (), (Container("app", cpus, cpus, Fraction(1), Fraction(1)),), GUARANTEED)
        policy.allocate(state, pod, "app")


def big_nodes(samples):
    print("2. 256 CPUs (8 NUMA), 100 containers, %d fragmented nodes:" % samples)
    found = {name: [] for name, _planner in PLANNERS}
    times = {name: [] for name, _planner in PLANNERS}
    baseline = []
    for seed in range(samples):
        state, sizes = fragmented(seed)
        for name, planner in PLANNERS:
            def run(planner=planner, state=state, name=name):
                found[name].append(planner(TOPO, NO_OPTIONS, state, RESERVED))
            times[name].append(timed(run))
        baseline.append(timed(lambda sizes=sizes: admit_all(sizes)))
    b50, _b99 = percentiles(baseline)
    for name, _planner in PLANNERS:
        p50, p99 = percentiles(times[name])
        plans = found[name]
        largest = sorted(p.after["largest_single_numa_whole_cores"] for p in plans)
        before = sorted(p.before["largest_single_numa_whole_cores"] for p in plans)
        print("   %-21s p50 %6.1f ms  p99 %6.1f ms (target p99 < 1000 ms; %.1fx admitting the 100, p50 %.1f ms)  "
              "largest single-NUMA whole-core request p50 %d -> %d CPUs  free whole cores p50 %d  moves p50 %d  "
              "proven best %d" % (name, p50 * 1000, p99 * 1000, p50 / b50, b50 * 1000, before[len(before) // 2],
                                  largest[len(largest) // 2],
                                  sorted(p.after["free_whole_cores"] for p in plans)[len(plans) // 2],
                                  sorted(len(p.moves) for p in plans)[len(plans) // 2],
                                  sum(1 for p in plans if p.proven_best)))
    exact, greedy = (found[name] for name, _planner in PLANNERS)
    pairs = [(e.after["largest_single_numa_whole_cores"], g.after["largest_single_numa_whole_cores"])
             for e, g in zip(exact, greedy)]
    figures = (sum(1 for e, g in pairs if e >= g), len(pairs), sum(1 for e, g in pairs if e > g),
               sum(e for e, _g in pairs) / len(pairs), sum(g for _e, g in pairs) / len(pairs))
    print("   exact's largest single-NUMA whole-core request >= greedy's on %d of %d nodes (target: all), higher on %d "
          "(target: most); mean %.1f against %.1f CPUs" % figures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few samples (a smoke run for the test suite)")
    args = parser.parse_args()
    random_nodes(20 if args.quick else 300)
    big_nodes(3 if args.quick else 40)


if __name__ == "__main__":
    main()
