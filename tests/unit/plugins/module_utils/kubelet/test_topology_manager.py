"""The Topology Manager's merge and admission (HINTS.md): every case of kubelet-cases/topology_manager.json through
``kubecpu merge``, and the merge's properties."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.hints import TopologyHint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology_manager import (POLICIES,
                                                                                                   TopologyManager,
                                                                                                   TopologyManagerError,
                                                                                                   bits, mask_of)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ids, load
from hypothesis import given, settings
from hypothesis import strategies as st

TM = load("topology_manager.json")
MERGE_CASES = TM["cases"]


def numa(case):
    if "numa_info" in case:
        info = TM["numa_infos"][case["numa_info"]]
        return info["nodes"], info["distances"]
    return case["numa_nodes"], case.get("numa_distances")


def merge_argv(case, tmp_path):
    nodes, distances = numa(case)
    hints = tmp_path / "hints.json"
    hints.write_text(json.dumps(case["providers"]))
    argv = ["merge", "--policy", case["policy"], "--numa-nodes", ",".join(map(str, nodes)), "--hints", str(hints)]
    if distances is not None:
        path = tmp_path / "distances.json"
        path.write_text(json.dumps(distances))
        argv += ["--numa-distances", str(path)]
    for name, value in sorted(case["options"].items()):
        argv += ["--option", "%s=%s" % (name, value)]
    return argv


@pytest.mark.parametrize("case", MERGE_CASES, ids=ids(MERGE_CASES))
def test_topology_manager_cases(case, tmp_path):
    code, out, err = run(merge_argv(case, tmp_path))
    expected = dict(case.get("not_asserted") or {}, **case["expected"])
    if "error" in expected:
        assert code == 2 and expected["error"] in err and out == ""
        return
    assert code == 0, err
    result = json.loads(out)
    expected.pop("ok", None)
    for key, value in expected.items():
        assert result[key] == value, key


NODES = [0, 1, 2, 3]


masks = st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True).map(lambda n: tuple(sorted(n)))


hint = st.builds(TopologyHint, st.one_of(st.none(), masks), st.booleans())


resource_hints = st.one_of(st.none(), st.lists(hint, max_size=4))


providers = st.lists(st.one_of(st.none(), st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), resource_hints,
                                                          max_size=2)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(providers=providers, policy=st.sampled_from(POLICIES))
def test_merged_affinity_within_default(providers, policy):
    merged = TopologyManager(policy, NODES).merge(providers)
    if merged.affinity is not None:
        assert merged.affinity and set(bits(merged.affinity)) <= set(NODES)
    if policy == "none":
        assert merged.admit and merged.affinity is None and not merged.preferred
    if policy == "best-effort":
        assert merged.admit
    if policy in ("restricted", "single-numa-node"):
        assert merged.admit == merged.preferred


@settings(max_examples=200, deadline=None)
@given(node=st.sampled_from(NODES), others=providers)
def test_preferred_single_numa_is_admitted_by_every_policy(node, others):
    """Every resource prefers the same single node (or has no preference): every policy admits it there."""
    agreeing = [{"cpu": [TopologyHint((node,), True)]}, {"memory": [TopologyHint((node,), True)]}, None, {"x": None}]
    for policy in POLICIES:
        merged = TopologyManager(policy, NODES).merge(agreeing)
        assert merged.admit
        if policy != "none":
            assert merged.preferred and merged.affinity == mask_of([node])


def test_distances_missing_for_prefer_closest():
    with pytest.raises(TopologyManagerError, match="error getting NUMA distances from cadvisor"):
        TopologyManager("best-effort", [0, 1], {"prefer-closest-numa-nodes": "true"}, {0: [10, 11]})
