"""A plan: changed when the state moved or an action was planned, counts by action, errors per container, and the
document the modules and the CLI print."""

from __future__ import annotations

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Action, Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import RUNNING, ListedContainer


def test_an_untouched_plan_is_not_a_change():
    plan = Plan(CPUState("static", CPUSet.parse("0-3")))
    doc = plan.to_dict()
    assert not plan.changed and doc["counts"] == {"allocate": 0, "resize": 0, "update": 0, "release": 0, "quota": 0, "errors": 0}
    assert doc["state_before"] == doc["state_after"] and doc["applied"] is False


def test_actions_state_and_errors_make_the_document():
    before = CPUState("static", CPUSet.parse("0-3"))
    plan = Plan(before)
    after = before.copy()
    after.set("u", "c", CPUSet.parse("1"))
    after.default = CPUSet.parse("0,2-3")
    plan.after = after
    plan.actions += [Action("allocate", "id", "ns/p", "u", "c", "1", "why"),
                     Action("quota", "", "ns/p", "u", "", "", "pod-level CFS quota", quota=-1, period=100000,
                            cgroup="/kubepods/podu")]
    plan.error(ListedContainer("id2", "sb", "u2", "q", "ns", "d", 0, RUNNING, 1), "no room", "allocation")
    plan.result = {"cpus": "1"}
    doc = plan.to_dict()
    assert plan.changed and doc["cpus"] == "1"
    assert doc["counts"] == {"allocate": 1, "resize": 0, "update": 0, "release": 0, "quota": 1, "errors": 1}
    assert doc["actions"][0] == {"action": "allocate", "container_id": "id", "pod": "ns/p", "pod_uid": "u",
                                 "container": "c", "cpus": "1", "reason": "why"}
    assert doc["actions"][1] == {"action": "quota", "container_id": "", "pod": "ns/p", "pod_uid": "u", "cpus": "",
                                 "reason": "pod-level CFS quota", "quota": -1, "period": 100000,
                                 "cgroup": "/kubepods/podu"}
    assert doc["errors"] == [{"error": "no room", "kind": "allocation", "container_id": "id2", "pod": "ns/q",
                              "container": "d"}]
    assert doc["state_after"]["entries"] == {"u": {"c": "1"}}
