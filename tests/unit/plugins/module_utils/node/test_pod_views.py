"""Pods from what the runtime shows: the newest attempt of each container, init containers by their order, the
request override of the allocate module, and finding a container by ID, prefix or pod and name."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerNotFoundError, PodSpecError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.pod_views import (allocate_running,
                                                                                         allocation_target, build_views,
                                                                                         find_container, running_pods)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (EXITED, RUNNING, ContainerInfo,
                                                                                        ListedContainer)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated


def pair(cid, name, created, *, uid="u1", attempt=0, state=RUNNING, exit_code=0, finished=0, qos="Guaranteed",
         milli=1000):
    listed = ListedContainer(cid, "sb", uid, "web", "prod", name, attempt, state, created)
    info = ContainerInfo(cid, uid, "web", "prod", name, attempt, qos, "/kubepods/pod%s/%s" % (uid, cid),
                         milli * 1024 // 1000, milli * 100, 100000, 0, exit_code, finished)
    return listed, info


PAIRS = [pair("init000001", "setup", 10, state=EXITED, finished=20),
         pair("app0000001", "app", 30, milli=2000),
         pair("app0000002", "app", 40, attempt=1, milli=2000),
         pair("side000001", "side", 31, qos="Guaranteed", milli=500),
         pair("other00001", "x", 5, uid="u2", qos="Burstable", milli=250)]


def test_the_newest_attempt_and_init_containers_by_order():
    views = build_views(PAIRS)
    web = views["u1"]
    assert {name: listed.id for name, (listed, _i) in web.latest.items()} == {
        "setup": "init000001", "app": "app0000002", "side": "side000001"}
    assert [c.name for c in web.model.init_containers] == ["setup"]
    assert [c.name for c in web.model.containers] == ["side", "app"]  # by creation of the newest attempts
    assert web.model.guaranteed_cpus("app") == 2 and web.model.guaranteed_cpus("side") == 0
    assert views["u2"].model.qos == "Burstable" and views["u2"].model.guaranteed_cpus("x") == 0


def test_a_failed_or_unfinished_exited_container_is_not_an_init_container():
    failed = [pair("init000001", "setup", 10, state=EXITED, exit_code=1, finished=20), pair("a000000001", "a", 30)]
    assert build_views(failed)["u1"].model.init_containers == ()
    early = [pair("init000001", "setup", 10, state=EXITED, finished=50), pair("a000000001", "a", 30)]
    assert build_views(early)["u1"].model.init_containers == ()  # its sibling started before it finished


def test_the_override_makes_the_container_guaranteed_with_that_request():
    views = build_views(PAIRS, ("u2", "x", 3))
    assert views["u2"].model.qos == "Guaranteed" and views["u2"].model.guaranteed_cpus("x") == 3


@pytest.mark.parametrize("cid, uid, name, found", [
    ("app0000001", None, None, "app0000001"), ("side00", None, None, "side000001"),  # a unique prefix of 6
    ("app000", None, None, None),  # two containers match
    ("side0", None, None, None),  # too short
    (None, "u1", "app", "app0000002"),  # the newest attempt
    (None, "u1", "gone", None),
])
def test_finding_a_container(cid, uid, name, found):
    target = find_container(PAIRS, cid, uid, name)
    assert (target.id if target else None) == found


def test_the_allocation_target():
    target, uid, name, model = allocation_target(PAIRS, None, "u1", "app", cpus=None, require_runtime_container=True)
    assert (target.id, uid, name, model.guaranteed_cpus("app")) == ("app0000002", "u1", "app", 2)
    target, uid, name, model = allocation_target(PAIRS, None, "u9", "new", cpus=4, require_runtime_container=False)
    assert target is None and (uid, name, model.guaranteed_cpus("new"), model.qos) == ("u9", "new", 4, "Guaranteed")
    with pytest.raises(ContainerNotFoundError, match="container new of pod u9 not found in the runtime"):
        allocation_target(PAIRS, None, "u9", "new", cpus=4, require_runtime_container=True)
    with pytest.raises(PodSpecError, match="give cpus to allocate for it"):
        allocation_target(PAIRS, None, "u9", "new", cpus=None, require_runtime_container=False)


def _allocate_all(pairs, held=()):
    policy = new_policy("static", generated(1, 4, 1), 1, CPUSet.parse("0"))
    state = CPUState("static")
    policy.start(state)
    for uid, name, cpus in held:
        state.set(uid, name, CPUSet.parse(cpus))
        state.default = state.default.difference(CPUSet.parse(cpus))
    plan = Plan(state.copy())
    allocate_running(plan, state, build_views(pairs), lambda model, name: policy.allocate(state, model, name))
    return state, plan


def test_a_running_pods_finished_init_container_is_allocated_first_and_its_cpus_reused():
    """(Issue 63, case 3.) The kubelet admits a pod's init containers before its app containers, which reuse their
    CPUs: a pod whose app containers hold no CPUs yet gets its finished init container's entry first (2 CPUs), and
    its app container takes those same CPUs. A pod already holding CPUs, or with nothing running, gets no entry for a
    finished init container."""
    pairs = [pair("init000001", "setup", 10, state=EXITED, finished=20, milli=2000), pair("app0000001", "app", 30,
                                                                                          milli=2000)]
    state, plan = _allocate_all(pairs)
    assert str(state.get("u1", "setup")) == "1-2" and str(state.get("u1", "app")) == "1-2"
    assert [(a.container, a.reason) for a in plan.actions] == [
        ("setup", "finished init container: its app containers reuse its CPUs"), ("app", "Guaranteed integral request")]
    held, _plan = _allocate_all(pairs, held=[("u1", "app", "3")])
    assert held.get("u1", "setup") is None
    done = [pairs[0], pair("app0000001", "app", 30, state=EXITED, exit_code=1, finished=40, milli=2000)]
    assert _allocate_all(done)[0].entries == {} and running_pods(build_views(done)) == []
    assert [p.uid for p in running_pods(build_views(pairs + [pair("b000000001", "b", 1, uid="u0")]))] == ["u0", "u1"]
