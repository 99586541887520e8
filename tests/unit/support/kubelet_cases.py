"""Loads ../shared/kubelet-cases (the kubelet's own unit-test cases as data) for the tests."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any, Dict, List

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import CPUInfo, Counters, Topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
SHARED = os.environ.get("KUBECPU_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
CASES = os.path.join(SHARED, "kubelet-cases")


def collections_path() -> str:
    """The directory holding ansible_collections/: what a child process needs on PYTHONPATH to import the collection."""
    import ansible_collections.kubecpu.cpu_manager as collection  # a namespace package: its directory is its path

    return os.path.abspath(os.path.join(next(iter(collection.__path__)), os.pardir, os.pardir, os.pardir))


@cache
def load(name: str) -> Any:
    with open(os.path.join(CASES, name), encoding="utf-8") as handle:
        return json.load(handle)


def cases(name: str, **match: Any) -> List[Dict[str, Any]]:
    return [c for c in load(name)["cases"] if all(c.get(k) == v for k, v in match.items())]


@cache
def fixture(name: str) -> Topology:
    """A kubelet test fixture with its declared counters (uncore null = uncore cache 0, as Go sees it)."""
    spec = load("topologies.json")[name]
    if spec.get("missing"):
        raise LookupError("fixture %s is not part of kubelet-cases" % name)
    cpus = [CPUInfo(cpu=c["cpu"], core=c["core"], socket=c["socket"], numa=c["numa"],
                    uncore=c["uncore"] or 0) for c in spec["cpus"]]
    counters = Counters(spec["num_cpus"], spec["num_cores"], spec["num_sockets"], spec["num_numa"],
                        spec["num_uncore_cache"])
    return Topology(cpus, counters=counters)


def fixture_as_document(name: str) -> Dict[str, Any]:
    """The fixture in the TOPOLOGY.md format: counters are derived from the map, and a null uncore is written
    as 0 because that is the uncore cache the kubelet sees (a missing one would mean "same as socket")."""
    spec = load("topologies.json")[name]
    return {"format": "kubecpu.topology/v1", "source": "file",
            "cpus": [dict(c, uncore=c["uncore"] or 0) for c in spec["cpus"]]}


def ids(items: List[Dict[str, Any]]) -> List[str]:
    return [c["id"] for c in items]
