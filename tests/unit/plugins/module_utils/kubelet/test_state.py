"""The CPU manager state: assignments by pod and container, the shared set, copies and the user-facing view."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState


def state():
    return CPUState("static", CPUSet.parse("0,5-7"), {"pod-b": {"app": CPUSet.parse("3-4")},
                                                      "pod-a": {"side": CPUSet.parse("2"), "main": CPUSet.parse("1")}})


def test_assignments_are_sorted_by_pod_then_container():
    assert [(pod, name, str(cpus)) for pod, name, cpus in state().assignments()] == [
        ("pod-a", "main", "1"), ("pod-a", "side", "2"), ("pod-b", "app", "3-4")]
    assert str(state().assigned()) == "1-4"


@pytest.mark.parametrize("pod,name,remaining", [
    ("pod-a", "main", {"pod-a": ["side"], "pod-b": ["app"]}),
    ("pod-b", "app", {"pod-a": ["main", "side"]}),  # the pod's last container takes the pod with it
    ("pod-c", "app", {"pod-a": ["main", "side"], "pod-b": ["app"]}),  # unknown: nothing happens
    ("pod-a", "other", {"pod-a": ["main", "side"], "pod-b": ["app"]}),
])
def test_delete(pod, name, remaining):
    current = state()
    current.delete(pod, name)
    assert {uid: sorted(items) for uid, items in current.entries.items()} == remaining


def test_a_copy_is_independent_and_equal():
    original = state()
    copied = original.copy()
    assert copied == original
    copied.set("pod-a", "main", CPUSet.parse("6"))
    copied.pod_entries["pod-c"] = CPUSet.parse("7")
    assert original.get("pod-a", "main") == CPUSet.parse("1") and not original.pod_entries
    assert copied != original


def test_equality_ignores_whether_pod_entries_are_counted_and_states_are_not_hashable():
    assert CPUState("static", pod_level=True) == CPUState("static", pod_level=False)
    assert CPUState("static") != CPUState("none")
    with pytest.raises(TypeError):
        hash(CPUState("static"))


def test_pod_level_sets_are_kept_apart_from_container_assignments():
    current = CPUState("static", CPUSet.parse("0-1"), pod_entries={"p": CPUSet.parse("4-5"), "q": CPUSet.parse("7")})
    assert str(current.pod_assigned()) == "4-5,7" and current.assigned() == CPUSet()


def test_the_user_facing_view():
    assert state().to_dict() == {"policyName": "static", "defaultCpuSet": "0,5-7", "entries": {
        "pod-a": {"main": "1", "side": "2"}, "pod-b": {"app": "3-4"}}}
    full = CPUState("static", CPUSet.parse("0"), pod_entries={"p": CPUSet.parse("2-3")},
                    baselines={"p": {"app": "2"}})
    assert full.to_dict() == {"policyName": "static", "defaultCpuSet": "0", "entries": {},
                              "podEntries": {"p": "2-3"}, "baselines": {"p": {"app": "2"}}}
