"""Defragmentation search time (issue: p99 < 1 s for a 256-CPU node with 100 containers).

Each sample is a fragmented 256-CPU node (2 sockets x 64 cores x 2 threads, 4 NUMA nodes per socket; CPUs 0 and
128 reserved) holding 100 exclusive containers of 1 to 4 CPUs on random free CPUs (a fixed seed per sample), and the
time of ``plan_defrag`` on it. The baseline, measured in the same run on the same nodes, is the static policy
allocating the same 100 containers on the empty node (one admission each): the ratio says what a defragmentation
search costs next to admitting the node's pods. Also printed: moves per node and what they win (the largest
whole-core request on one NUMA node, free whole cores), before -> after, p50.

    python benchmarks/defrag.py [--quick]
"""

from __future__ import annotations

import argparse
import random
from fractions import Fraction

from _common import percentiles, timed
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import plan_defrag
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import GUARANTEED, Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState

TOPO = generated(2, 64, 2, 4, 8)
RESERVED = CPUSet.parse("0,128")


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


def admit_all(sizes):
    policy = new_policy("static", TOPO, len(RESERVED), RESERVED)
    state = CPUState("static")
    policy.start(state)
    for n, size in enumerate(sizes):
        cpus = Fraction(size)
        pod = Pod("pod-%03d" % n, "", "", (), (Container("app", cpus, cpus, Fraction(1), Fraction(1)),), GUARANTEED)
        policy.allocate(state, pod, "app")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few samples (a smoke run for the test suite)")
    args = parser.parse_args()
    options = new_policy("static", TOPO, len(RESERVED), RESERVED).options
    samples = 5 if args.quick else 40
    ours, baseline, moves, wins = [], [], [], []
    for seed in range(samples):
        state, sizes = fragmented(seed)
        found = None

        def search(state=state):
            nonlocal found
            found = plan_defrag(TOPO, options, state, RESERVED)
        ours.append(timed(search))
        baseline.append(timed(lambda sizes=sizes: admit_all(sizes)))
        moves.append(len(found.moves))
        wins.append((found.before["largest_single_numa_whole_cores"], found.after["largest_single_numa_whole_cores"],
                     found.before["free_whole_cores"], found.after["free_whole_cores"]))
    p50, p99 = percentiles(ours)
    b50, _b99 = percentiles(baseline)
    mid = sorted(wins)[len(wins) // 2]
    print("defrag search, 256 CPUs (8 NUMA), 100 containers, %d fragmented nodes:" % samples)
    print("   plan_defrag             p50 %7.1f ms  p99 %7.1f ms (target p99 < 1000 ms)" % (p50 * 1000, p99 * 1000))
    print("   baseline: admit the 100 p50 %7.1f ms  ratio search / admission %.2fx" % (b50 * 1000, p50 / b50))
    print("   moves per node p50 %d (max %d); largest single-NUMA whole-core request %d -> %d CPUs, free whole cores "
          "%d -> %d (median node)" % (sorted(moves)[len(moves) // 2], max(moves), *mid))


if __name__ == "__main__":
    main()
