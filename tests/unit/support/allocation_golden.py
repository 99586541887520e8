"""Frozen choices of the 1.35 allocation (``allocation_golden_135.json``): seeded random requests on generated
topologies, every option combination the kubelet accepts, with and without a NUMA hint, and what
kubecpu chose for each before the 1.37 and 1.38 rules existed. ``python -m ...allocation_golden OUT`` writes it again
(run it against the code whose choices are to be frozen)."""

from __future__ import annotations

import json
import random
import sys
from itertools import combinations
from typing import Any, Dict, List

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubecpuError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import ALL_OPTIONS, parse_options
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import allocate_cpus
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

TOPOLOGIES = {"gen-2x4x2-2numa": lambda: generated(2, 4, 2, 2), "gen-2x8x2-4numa": lambda: generated(2, 8, 2, 4, 4),
              "gen-4x4x1": lambda: generated(4, 4, 1), "gen-1x8x2-2l3": lambda: generated(1, 8, 2, 1, 2),
              "gen-2x6x2": lambda: generated(2, 6, 2)}


def cases(count: int = 2000, seed: int = 135) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    option_sets = [dict.fromkeys(names, "true") for size in range(3) for names in combinations(ALL_OPTIONS, size)]
    out = []
    while len(out) < count:
        name = rng.choice(sorted(TOPOLOGIES))
        topo = TOPOLOGIES[name]()
        cpus = sorted(topo.all_cpus)
        available = sorted(rng.sample(cpus, rng.randint(1, len(cpus))))
        nodes = sorted(topo.numa_cpus)
        affinity = sorted(rng.sample(nodes, rng.randint(1, len(nodes)))) if rng.random() < 0.4 else None
        options = rng.choice(option_sets)
        out.append({"topology": name, "available": available, "count": rng.randint(1, len(available)),
                    "options": options, "numa_affinity": affinity})
    return out


def choose(case: Dict[str, Any]) -> str:
    topo = TOPOLOGIES[case["topology"]]()
    try:
        options = parse_options(case["options"])
        return str(allocate_cpus(topo, options, frozenset(case["available"]), case["count"], case["numa_affinity"]))
    except KubecpuError as exc:
        return "error: %s" % type(exc).__name__


if __name__ == "__main__":
    frozen = [dict(case, chosen=choose(case)) for case in cases()]
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(frozen, handle, separators=(",", ":"))
