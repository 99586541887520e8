"""Exclusive CPUs for chosen containers of a Burstable pod (node/exclusive.py): the annotation read by its rules, each
refusal named, the pod model's mark honoured by ``guaranteed_cpus`` for a Burstable pod only (unmarked, the kubelet's
rule exactly), and a pass's marks and errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PodSpecError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node import exclusive
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (
    EXITED, MAX_NAMES_BYTES, RUNNING, ContainerInfo, ListedContainer, kubecpu_annotations)

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_quota, milli_to_shares

KEY = "cpu-exclusive.kubecpu.io"


@pytest.mark.parametrize("text, names", [
    ("app", {"app"}),
    ("app,db", {"app", "db"}),
    (" app , db ", {"app", "db"}),
    ("a-1,b2,c", {"a-1", "b2", "c"}),
    ("x" * 63, {"x" * 63}),
])
def test_good_annotations_name_their_containers(text, names):
    assert exclusive.parse_names(text) == frozenset(names)


@pytest.mark.parametrize("text, why", [
    ("", "is empty: it names no container"),
    ("   ", "is empty: it names no container"),
    ("app,", 'has an empty name'),
    ("app,,db", 'has an empty name'),
    ("App", 'names "App", which is not a container name'),
    ("app_1", 'names "app_1", which is not a container name'),
    ("-app", 'names "-app", which is not a container name'),
    ("app-", 'names "app-", which is not a container name'),
    ("x" * 64, "which is not a container name"),
    ("app;db", 'names "app;db", which is not a container name'),
    ("app db", 'names "app db", which is not a container name'),
    ("app,app", 'names "app" twice'),
    ("a," * 600, "is longer than %d bytes" % MAX_NAMES_BYTES),
])
def test_bad_annotations_are_refused_saying_what_is_wrong(text, why):
    with pytest.raises(PodSpecError, match=r"cpu-exclusive\.kubecpu\.io") as caught:
        exclusive.parse_names(text)
    assert why in str(caught.value)


def test_a_value_past_the_limit_is_kept_cut_so_that_it_is_refused_not_unseen():
    kept = kubecpu_annotations({KEY: "a," * 2000})[KEY]
    assert len(kept) == MAX_NAMES_BYTES + 1
    with pytest.raises(PodSpecError, match="longer than"):
        exclusive.parse_names(kept)


def info(name="app", qos="Burstable", milli=2000, limit=None, notes=None, namespace="lab", pod="p1"):
    limit = milli if limit is None and qos == "Guaranteed" else (limit or 0)
    return ContainerInfo("c-" + name, pod, "web", namespace, name, 0, qos, "/kubepods/pod/" + name,
                         milli_to_shares(milli), milli_to_quota(limit) or -1, 100000, 0,
                         annotations={KEY: "app"} if notes is None else notes)


@pytest.mark.parametrize("facts, why", [
    (info(), ""),
    (info(limit=2000), ""),
    (info(milli=1000), ""),
    (info(milli=1500), "its CPU request 1500m is not a whole number of CPUs"),
    (info(milli=250), "its CPU request 250m is not a whole number of CPUs"),
    (info(milli=0), "it has no CPU request"),
    (info(limit=3000), "its CPU limit 3000m is not its request 2000m (the limit must be absent or equal)"),
    (info(qos="Guaranteed"), "its pod is Guaranteed: the static policy already pins"),
    (info(qos="BestEffort", milli=0), "its pod is BestEffort: it has no CPU request to pin"),
    (info(qos=""), "its QoS class is unknown"),
])
def test_a_named_container_may_be_pinned_only_with_a_whole_request_in_a_burstable_pod(facts, why):
    assert exclusive.refusal(facts).startswith(why) and (why or exclusive.refusal(facts) == "")


def burstable_pod(*containers, qos="Burstable"):
    return Pod("p1", "web", "lab", (), tuple(containers), qos=qos)


def test_guaranteed_cpus_honours_the_mark_in_a_burstable_pod_only():
    two = Fraction(2)
    marked, plain = Container("app", two, None, exclusive=True), Container("side", two, None)
    assert burstable_pod(marked, plain).guaranteed_cpus("app") == 2
    assert burstable_pod(marked, plain).guaranteed_cpus("side") == 0  # the kubelet's rule: Burstable, none
    assert burstable_pod(marked._replace(cpu_request=Fraction(3, 2))).guaranteed_cpus("app") == 0  # not whole
    assert burstable_pod(marked, qos="BestEffort").guaranteed_cpus("app") == 0
    assert burstable_pod(marked, plain).guaranteed_pod_cpus() == 2
    unmarked = burstable_pod(marked._replace(exclusive=False), plain)
    assert unmarked.guaranteed_cpus("app") == 0 and unmarked.guaranteed_pod_cpus() == 0


def pair(facts, state=RUNNING, created=1_000):
    return ListedContainer(facts.id, "sb", facts.pod_uid, facts.pod_name, facts.pod_namespace, facts.name, 0, state,
                           created), facts


def test_a_pass_marks_the_named_containers_and_says_why_of_each_it_cannot_pin():
    notes = {KEY: "app,db,cache"}
    pairs = [pair(info("app", notes=notes)), pair(info("db", milli=1500, notes=notes)),
             pair(info("side", milli=500, notes=notes)), pair(info("cache", notes=notes), state=EXITED)]
    plan = Plan(CPUState("static"))
    assert exclusive.marked(plan, pairs, True, now_ns=2_000) == {("p1", "app")}
    assert [(e["container"], e["kind"]) for e in plan.errors] == [("db", "exclusive")]
    assert plan.errors[0]["error"] == ("container db of pod lab/web is named by cpu-exclusive.kubecpu.io but its CPU "
                                       "request 1500m is not a whole number of CPUs: it stays in the shared pool")
    assert exclusive.refused_in(plan.errors, "c-db") == plan.errors[0]["error"]
    assert exclusive.refused_in(plan.errors, "c-app") is None


def test_switched_off_nothing_is_marked_and_nothing_is_said():
    plan = Plan(CPUState("static"))
    assert exclusive.marked(plan, [pair(info(milli=1500))], False) == frozenset()
    assert plan.errors == []


def test_an_unreadable_annotation_refuses_every_container_of_its_pod():
    notes = {KEY: "App"}
    plan = Plan(CPUState("static"))
    assert exclusive.marked(plan, [pair(info("app", notes=notes)), pair(info("side", notes=notes))], True) == set()
    assert [e["container"] for e in plan.errors if e["kind"] == "exclusive"] == ["app", "side"]
    assert "cannot be read, so which containers it names is not known" in plan.errors[0]["error"]


def test_a_name_the_pod_lacks_is_reported_once_its_pod_has_settled_not_while_it_starts():
    notes = {KEY: "app,dbb"}
    pairs = [pair(info("app", notes=notes), created=10)]
    starting = Plan(CPUState("static"))
    exclusive.marked(starting, pairs, True, now_ns=10 + exclusive.SETTLED_NS - 1)
    assert starting.errors == []
    settled = Plan(CPUState("static"))
    assert exclusive.marked(settled, pairs, True, now_ns=10 + exclusive.SETTLED_NS) == {("p1", "app")}
    assert settled.errors == [{"error": "pod lab/web: cpu-exclusive.kubecpu.io names dbb, which the pod does not have "
                                        "(its containers: app)", "kind": "annotation", "pod": "lab/web"}]


@pytest.mark.parametrize("facts, on, follows", [
    (info(limit=2000), True, True),
    (info(limit=2000), False, False),
    (info(), True, False),  # no limit: a resize shows as a weight only
    (info(limit=3000), True, False),
    (info(qos="Guaranteed"), True, False),  # the Guaranteed rule is the kubelet's own (node/targets.py)
])
def test_a_resize_is_seen_in_the_quota_of_a_burstable_container_whose_limit_is_its_request(facts, on, follows):
    assert exclusive.follows_limit(facts, on) is follows


def test_the_request_of_a_burstable_container_follows_its_new_limit():
    resized = exclusive.with_quota(info(limit=2000), 300000, 100000)
    assert (resized.cpu_limit_milli, resized.cpu_request_milli) == (3000, 3000)
    assert exclusive.refusal(resized) == ""
