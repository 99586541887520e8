"""Exclusive CPUs for chosen containers of a Burstable pod (issue 66, feature 1; node/exclusive.py), through each mode
in which kubecpu is the node's CPU manager: the agent's passes, the fail-closed OCI hook and the NRI plugin. A pod
annotated ``cpu-exclusive.kubecpu.io: "app"`` is created, resized, defragmented and removed; bad annotations and
containers that may not be pinned are refused at creation (hook, NRI) or reported (agent), each naming the container
and why; the entry never reaches a checkpoint written for a kubelet; switched off, every CPU goes back.

The runtime is the fake in memory on a fake cgroupfs and sysfs (1 socket x 4 cores x 2 threads: core g = {g, g + 4};
CPU 0 reserved); the hook reads the OCI state and config.json containerd writes.
"""

from __future__ import annotations

import io
import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HookRefusal, KubeletPinsError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.what_if import adopt
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import defrag_node
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.rebuild import rebuild_state
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import PLUGIN_SERVICE, schema
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import Hook
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.nri_plugin import NRIPlugin, NRIView

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_quota
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import POD, Node

KEY = "cpu-exclusive.kubecpu.io"
ON = ManagerOptions(exclusive_burstable=True)
PB = schema()


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path, False)  # cgroup v1: where the fake runtime writes too


def agent(node, runtime, options=ON, **changes):
    return build_manager(node.config(options=options, **changes), with_runtime=True, runtime=runtime)


def limited(runtime, cid, milli):
    """The container's CPU limit set to ``milli`` (the kubelet's CFS quota), as an in-place resize leaves it."""
    runtime.infos[cid] = runtime.infos[cid]._replace(cpu_quota=milli_to_quota(milli))
    runtime.write("cpu", runtime.infos[cid].cgroup_path, "cpu.cfs_quota_us", str(milli_to_quota(milli)))


def entries(node):
    return {uid: {name: str(cpus) for name, cpus in containers.items()}
            for uid, containers in node.saved().entries.items()}


# --- the agent ----------------------------------------------------------------------------------------------------
def test_the_agent_pins_the_named_containers_created_resized_defragmented_and_removed(node):
    runtime = FakeRuntime(str(node.cgroup))
    uid = POD % 1
    other = runtime.add(POD % 2, "db", "Guaranteed", 1000)
    app = runtime.add(uid, "app", "Burstable", 2000, annotations={KEY: "app"})
    limited(runtime, app, 2000)
    side = runtime.add(uid, "side", "Burstable", 500)
    manager = agent(node, runtime)
    plan = manager.reconcile()
    assert entries(node) == {POD % 2: {"db": "4"}, uid: {"app": "1,5"}}  # a whole core, as the policy packs
    assert [a.reason for a in plan.actions if a.action == "allocate" and a.container == "app"] == [
        "a Burstable pod's container named by cpu-exclusive.kubecpu.io"]
    assert (runtime.read(app), runtime.read(side), runtime.read(other)) == ("1,5", "0,2-3,6-7", "4")
    limited(runtime, app, 3000)  # resized in place to 3 CPUs, its limit still its request
    plan = manager.reconcile()
    assert [(a.action, a.cpus) for a in plan.actions if a.container == "app"][:1] == [("resize", "1-2,5")]
    assert runtime.read(app) == "1-2,5" and runtime.read(side) == "0,3,6-7"
    runtime.remove_pod(POD % 2)  # CPU 4 is free: app's third CPU can join its core, and core 2 is whole again
    manager.reconcile()
    done = defrag_node(manager)
    assert [(a.container, a.cpus) for a in done.actions if a.action == "move"] == [("app", "1,4-5")]
    assert entries(node)[uid] == {"app": "1,4-5"} and runtime.read(app) == "1,4-5"
    assert runtime.read(side) == "0,2-3,6-7" and done.result["after"]["free_whole_cores"] == 2
    runtime.remove_pod(uid)
    plan = manager.reconcile()
    assert [(a.action, a.container) for a in plan.actions if a.action == "release"] == [("release", "app")]
    assert node.saved().entries == {} and str(node.saved().default) == "0-7"


def test_the_agent_reports_each_named_container_it_cannot_pin_and_leaves_it_shared(node):
    runtime = FakeRuntime(str(node.cgroup))
    uid = POD % 1
    runtime.add(uid, "app", "Burstable", 1500, annotations={KEY: "app,web,db"})
    runtime.add(uid, "web", "Burstable", 0)
    runtime.add(POD % 2, "db", "Guaranteed", 1000, annotations={KEY: "db"})
    plan = agent(node, runtime).reconcile()
    errors = sorted((e["container"], e["kind"], e["error"].split(" but ")[1]) for e in plan.errors
                    if e["kind"] == "exclusive")
    assert errors == [
        ("app", "exclusive", "its CPU request 1500m is not a whole number of CPUs: it stays in the shared pool"),
        ("db", "exclusive", "its pod is Guaranteed: the static policy already pins its containers with a whole "
                            "number of CPUs, and cpu-exclusive.kubecpu.io is for Burstable pods: it stays in the "
                            "shared pool"),
        ("web", "exclusive", "it has no CPU request (exclusive CPUs need a request of a whole number of CPUs): it "
                             "stays in the shared pool"),
    ]
    assert entries(node) == {POD % 2: {"db": "4"}}  # the Guaranteed pod is pinned as the kubelet pins it
    assert [e["error"] for e in plan.errors if e["kind"] == "annotation"] == [
        "pod default/%s: cpu-exclusive.kubecpu.io names db, which the pod does not have (its containers: app, web)"
        % uid]


def test_switched_off_every_named_container_goes_back_to_the_shared_pool(node):
    runtime = FakeRuntime(str(node.cgroup))
    app = runtime.add(POD % 1, "app", "Burstable", 2000, annotations={KEY: "app"})
    agent(node, runtime).reconcile()
    assert runtime.read(app) == "1,5"
    plan = agent(node, runtime, options=ManagerOptions()).reconcile()
    assert [a.reason for a in plan.actions if a.action == "release"] == [
        "a Burstable pod's container no longer marked by cpu-exclusive.kubecpu.io (exclusive_burstable off, or its "
        "request no longer whole CPUs): back to the shared pool"]
    assert node.saved().entries == {} and runtime.read(app) == "0-7"


def test_the_annotation_is_ignored_while_the_option_is_off(node):
    runtime = FakeRuntime(str(node.cgroup))
    runtime.add(POD % 1, "app", "Burstable", 1500, annotations={KEY: "App,,"})
    plan = agent(node, runtime, options=ManagerOptions()).reconcile()
    assert node.saved().entries == {} and plan.errors == [] and "inspect_pod" not in runtime.calls


def test_no_checkpoint_written_for_a_kubelet_holds_a_burstable_container(node):
    """The rebuild from cgroupfs and the adoption (none to static) are the kubelet's decisions: a Burstable
    container that kubecpu pinned is not in the checkpoints they make, although its cgroup holds exactly its
    request."""
    runtime = FakeRuntime(str(node.cgroup))
    runtime.add(POD % 1, "app", "Burstable", 2000, annotations={KEY: "app"})
    runtime.add(POD % 2, "db", "Guaranteed", 1000)
    manager = agent(node, runtime)
    manager.reconcile()
    assert set(node.saved().entries) == {POD % 1, POD % 2}
    rebuilt = rebuild_state(manager.policy, manager.cgroups, manager.observe(Plan(CPUState("static"))),
                            Plan(CPUState("static")))
    assert set(rebuilt.entries) == {POD % 2}
    fresh = CPUState("static")
    manager.policy.start(fresh)
    adopt(manager, fresh)
    assert set(fresh.entries) == {POD % 2}


def test_beside_a_kubelet_that_pins_the_option_is_refused_even_with_force(node):
    runtime = FakeRuntime(str(node.cgroup))
    runtime.add(POD % 1, "app", "Burstable", 2000, annotations={KEY: "app"})
    node.kubelet_pins()
    manager = build_manager(node.config(options=ON, force=True), with_runtime=True, runtime=runtime, service=True)
    with pytest.raises(KubeletPinsError, match="exclusive_burstable changes who holds which CPU, and the kubelet "
                                               "pins CPUs on this node itself"):
        manager.reconcile()
    assert node.saved() is None
    made = node.container("Burstable", 2000, name="app", pod_annotations={KEY: "app"})
    result = node.hook(options=ON, force=True).run(io.BytesIO(made["stdin"]))
    assert result.action == "passed" and "exclusive_burstable changes who holds which CPU" in result.note


# --- the OCI hook --------------------------------------------------------------------------------------------------
def hook(node, runtime=None, options=ON):
    return Hook(node.config(options=options), lock_timeout=0.3, runtime=lambda: runtime)


def test_the_hook_pins_a_named_container_before_its_first_instruction_and_the_agent_keeps_it(node):
    runtime = FakeRuntime(str(node.cgroup))
    web = node.container("Burstable", 500, name="web")
    app = node.container("Burstable", 2000, name="app", pod_annotations={KEY: "app"})
    result = hook(node).run(io.BytesIO(app["stdin"]))
    assert result.action == "allocated" and node.cpus(app) == CPUSet.parse("1,5") == node.saved().get(app["uid"], "app")
    assert node.cpus(web) == CPUSet.parse("0,2-4,6-7")  # moved off the new exclusive CPUs
    assert runtime.calls == {}  # the spec had the pod's annotation (CRI-O, or containerd's pod_annotations)
    runtime.add(app["uid"], "app", "Burstable", 2000, cid=app["id"], cgroup_path=app["path"],
                annotations={KEY: "app"})
    limited(runtime, app["id"], 2000)
    agent(node, runtime).reconcile()
    assert node.saved().get(app["uid"], "app") == CPUSet.parse("1,5")


def test_on_containerd_without_the_annotation_in_the_spec_the_hook_asks_the_runtime_once(node):
    runtime = FakeRuntime(str(node.cgroup))
    uid = POD % 7
    runtime.pod_notes["sb-" + uid] = {KEY: "app"}
    app = node.container("Burstable", 2000, name="app", uid=uid)
    assert hook(node, runtime).run(io.BytesIO(app["stdin"])).action == "allocated"
    assert runtime.calls == {"inspect_pod": 1} and len(node.saved().get(uid, "app")) == 2
    web = node.container("Burstable", 500, name="web", uid=POD % 8)  # a pod without it: shared, asked too
    runtime.pod_notes["sb-" + POD % 8] = {}
    assert hook(node, runtime).run(io.BytesIO(web["stdin"])).action in ("checked", "set")
    guaranteed = node.container("Guaranteed", 1000, name="db")  # not Burstable: never asked
    hook(node, runtime).run(io.BytesIO(guaranteed["stdin"]))
    assert runtime.calls == {"inspect_pod": 2}


def test_when_the_runtime_cannot_show_the_pod_the_hook_refuses_rather_than_guess(node):
    runtime = FakeRuntime(str(node.cgroup))
    runtime.down = True
    app = node.container("Burstable", 2000, name="app")
    with pytest.raises(HookRefusal, match=r"not created: kubecpu needs its pod's annotations "
                                          r"\(cpu-exclusive.kubecpu.io\) and the runtime could not show them"):
        hook(node, runtime).run(io.BytesIO(app["stdin"]))
    assert node.saved() is None


@pytest.mark.parametrize("qos, milli, limit, annotation, why", [
    ("Burstable", 1500, True, "app", "its CPU request 1500m is not a whole number of CPUs"),
    ("Burstable", 2000, False, "app", None),  # no limit: pinned
    ("Guaranteed", 2000, True, "app", "its pod is Guaranteed"),
    ("BestEffort", 0, True, "app", "its pod is BestEffort"),
    ("Burstable", 2000, True, "App", 'names "App", which is not a container name'),
    ("Burstable", 2000, True, "app,", "has an empty name"),
    ("Burstable", 2000, True, "", "is empty: it names no container"),
    ("Burstable", 1500, True, "db", None),  # not named: shared, whatever its request
])
def test_the_hook_refuses_a_named_container_it_cannot_pin_naming_it_and_why(node, qos, milli, limit, annotation,
                                                                            why):
    made = node.container(qos, milli, name="app", pod_annotations={KEY: annotation}, limit=limit)
    if why is None:
        assert hook(node).run(io.BytesIO(made["stdin"])).action in ("allocated", "passed")
        return
    with pytest.raises(HookRefusal) as caught:
        hook(node).run(io.BytesIO(made["stdin"]))
    assert str(caught.value).startswith("container lab/pod-%d/app (%s) not created: container app of pod lab/pod-%d is "
                                        "named by cpu-exclusive.kubecpu.io but " % (
                                            int(made["uid"][:8], 16), made["id"][:12], int(made["uid"][:8], 16)))
    assert why in str(caught.value)
    assert node.saved() is None or node.saved().entries == {}


def test_the_hooks_quick_path_leaves_a_burstable_container_to_the_full_hook_when_the_option_is_on(node):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook_check import quick_check

    node.run(node.container("Guaranteed", 1000, name="db"))  # a state and its view
    web = node.container("Burstable", 500, name="web", cpus=node.saved().default)
    assert quick_check(web["stdin"], node.state, str(node.cgroup), node.kubelet_state)["action"] == "checked"
    assert quick_check(web["stdin"], node.state, str(node.cgroup), node.kubelet_state,
                       exclusive_burstable=True) is None


# --- the NRI plugin ------------------------------------------------------------------------------------------------
def nri(node):
    view = NRIView()
    return NRIPlugin(agent(node, view), view, io.StringIO())


def nri_pod(uid, qos="Burstable", notes=None):
    message = PB.PodSandbox(id="sb-" + uid, name="p-" + uid, uid=uid, namespace="ns", annotations=notes or {})
    message.linux.cgroup_parent = ("/kubepods/burstable/pod%s" if qos == "Burstable" else "/kubepods/pod%s") % uid
    return message


def nri_container(uid, name, milli, qos="Burstable", limit=0):
    message = PB.Container(id="%s-%s" % (uid, name), pod_sandbox_id="sb-" + uid, name=name, state=3,
                           labels={"io.kubernetes.container.name": name})
    message.linux.cgroups_path = ("/kubepods/burstable/pod%s/%s-%s" if qos == "Burstable"
                                  else "/kubepods/pod%s/%s-%s") % (uid, uid, name)
    message.linux.resources.cpu.shares.value = max(2, milli * 1024 // 1000)
    message.linux.resources.cpu.period.value = 100000
    if limit:
        message.linux.resources.cpu.quota.value = limit * 100
    return message


def nri_create(plugin, uid, name, milli, notes, limit=0):
    request = PB.CreateContainerRequest(pod=nri_pod(uid, notes=notes), container=nri_container(uid, name, milli,
                                                                                               limit=limit))
    return plugin.handle(PLUGIN_SERVICE, "CreateContainer", request.SerializeToString(), 0)


def test_the_nri_plugin_pins_a_named_container_in_its_adjustment_resizes_and_releases_it(node):
    plugin = nri(node)
    notes = {KEY: "app"}
    code, _text, payload = nri_create(plugin, "b", "web", 500, notes)
    assert code == 0
    code, text, payload = nri_create(plugin, "b", "app", 2000, notes, limit=2000)
    reply = PB.CreateContainerResponse.FromString(payload)
    assert code == 0 and reply.adjust.linux.resources.cpu.cpus == "1,5"
    assert {u.container_id: u.linux.resources.cpu.cpus for u in reply.update} == {"b-web": "0,2-4,6-7"}
    resources = PB.LinuxResources()
    resources.cpu.shares.value, resources.cpu.quota.value, resources.cpu.period.value = 3072, 300000, 100000
    update = PB.UpdateContainerRequest(pod=nri_pod("b", notes=notes), container=nri_container("b", "app", 2000),
                                       linux_resources=resources)
    code, text, payload = plugin.handle(PLUGIN_SERVICE, "UpdateContainer", update.SerializeToString(), 0)
    assert code == 0, text
    assert entries(node) == {"b": {"app": "1,4-5"}}
    removed = PB.StateChangeEvent(event=11, pod=nri_pod("b", notes=notes), container=nri_container("b", "app", 3000))
    plugin.handle(PLUGIN_SERVICE, "StateChange", removed.SerializeToString(), 0)
    assert node.saved().entries == {}


@pytest.mark.parametrize("milli, limit, annotation, why", [
    (1500, 0, "app", "its CPU request 1500m is not a whole number of CPUs: not created"),
    (0, 0, "app", "it has no CPU request"),
    (2000, 3000, "app", "its CPU limit 3000m is not its request 2000m"),
    (2000, 0, "app,App", 'names "App", which is not a container name'),
])
def test_the_nri_plugin_refuses_the_creation_of_a_named_container_it_cannot_pin(node, milli, limit, annotation, why):
    plugin = nri(node)
    code, text, _payload = nri_create(plugin, "b", "app", milli, {KEY: annotation}, limit=limit)
    assert code != 0 and text.startswith("container app of pod ns/p-b is named by cpu-exclusive.kubecpu.io but ")
    assert why in text
    assert "b-app" not in plugin.view.known and (node.saved() is None or node.saved().entries == {})
    said = [json.loads(line) for line in plugin.log.getvalue().splitlines()]
    assert any(why in line["msg"] for line in said)
