"""The container model: what a container's resources say of its request (CRI's shares, quota and period inverted,
exact for Guaranteed pods), the cache's round trip, container IDs, and describe's sandbox fallback."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (ContainerNotFoundError,
                                                                                 RuntimeOutputError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (MAX_ANNOTATION_BYTES,
                                                                                        ContainerInfo, ListedContainer,
                                                                                        RuntimeBase, check_container_id,
                                                                                        kubecpu_annotations,
                                                                                        quota_to_milli, shares_to_milli)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_quota, milli_to_shares
from hypothesis import given
from hypothesis import strategies as st


def info(qos="Guaranteed", shares=2048, quota=200000, period=100000, path="/kubepods/pod1/abc"):
    return ContainerInfo("abc", "1", "p", "ns", "c", 0, qos, path, shares, quota, period, 0)


@given(st.integers(min_value=1, max_value=256000))
def test_the_quota_gives_back_the_exact_limit(milli):
    assert quota_to_milli(milli_to_quota(milli), 100000) == max(milli, 10)


@given(st.integers(min_value=2, max_value=256000))
def test_shares_give_back_the_smallest_request_with_those_shares(milli):
    found = shares_to_milli(milli_to_shares(milli))
    assert milli_to_shares(found) == milli_to_shares(milli) and found <= milli


@pytest.mark.parametrize("qos, shares, quota, want", [
    ("Guaranteed", 2048, 200000, 2000), ("Guaranteed", 1536, 150000, 1500), ("Guaranteed", 1024, -1, 1000),
    ("Burstable", 256, 0, 250), ("BestEffort", 2, 0, 0), ("", 1024, 100000, 1000),
])
def test_the_request(qos, shares, quota, want):
    assert info(qos, shares, quota).requested_milli() == want


@pytest.mark.parametrize("path, pod", [("/kubepods/pod1/abc", "/kubepods/pod1"), ("/abc", ""), ("", "")])
def test_the_pod_cgroup_is_the_parent(path, pod):
    assert info(path=path).pod_cgroup_path == pod


def test_the_cache_round_trip_and_its_checks():
    known = info()
    assert ContainerInfo.from_dict(known.to_dict()) == known
    for bad in ({"id": "abc"}, dict(known.to_dict(), cpu_shares="2048"), dict(known.to_dict(), id="a b"),
                dict(known.to_dict(), extra=1, qos=None)):
        with pytest.raises(RuntimeOutputError, match=r"bad cached container entry|invalid container ID"):
            ContainerInfo.from_dict(bad)


@pytest.mark.parametrize("value, ok", [("abc", True), ("a" * 128, True), ("a.b_c-d", True), ("", False),
                                       ("a" * 129, False), ("-x", False), ("a b", False), ("../x", False),
                                       ("a;b", False), (None, False)])
def test_container_ids_are_checked(value, ok):
    if ok:
        assert check_container_id(value) == value
    else:
        with pytest.raises(RuntimeOutputError, match="invalid container ID"):
            check_container_id(value)


class Backend(RuntimeBase):
    def __init__(self, status_qos, parent=None):
        super().__init__()
        self.status_qos = status_qos
        self.parent = parent

    def inspect(self, container_id):
        self.count("inspect")
        return info(qos=self.status_qos)

    def pod_cgroup_parent(self, sandbox_id):
        self.count("inspect_pod")
        if self.parent is None:
            raise ContainerNotFoundError("gone")
        return self.parent


LISTED = ListedContainer("abc", "sb1", "1", "p", "ns", "c", 0, "CONTAINER_RUNNING", 1)


@pytest.mark.parametrize("status_qos, parent, qos, calls", [
    ("Burstable", "/kubepods/pod1", "Burstable", {"inspect": 1}),  # the status said: no more calls
    ("", "/kubepods.slice/kubepods-pod1.slice", "Guaranteed", {"inspect": 1, "inspect_pod": 1}),
    ("", None, "", {"inspect": 1, "inspect_pod": 1}),  # the sandbox is gone too: unknown, not an error
])
def test_describe_asks_the_sandbox_only_when_the_status_names_no_pod_cgroup(status_qos, parent, qos, calls):
    backend = Backend(status_qos, parent)
    assert backend.describe(LISTED).qos == qos and backend.calls == calls


@pytest.mark.parametrize("given, kept", [
    ({"irq-load-balancing.kubecpu.io": "disable", "other": "x"}, {"irq-load-balancing.kubecpu.io": "disable"}),
    ({"irq-load-balancing.crio.io": "disable", "cpu-burst.kubecpu.io": "20ms"},
     {"irq-load-balancing.crio.io": "disable", "cpu-burst.kubecpu.io": "20ms"}),
    ({"cpu-burst.kubecpu.io": "x" * (MAX_ANNOTATION_BYTES + 1)}, {}),  # too long to be one of kubecpu's
    ({"cpu-burst.kubecpu.io": 7}, {}),  # not a string
    ({}, {}),
])
def test_only_the_annotations_kubecpu_reads_are_kept(given, kept):
    assert kubecpu_annotations(given) == kept


class Annotated(Backend):
    def pod_annotations(self, sandbox_id):
        self.count("inspect_pod")
        return {"cpu-burst.kubecpu.io": "10ms", "team": "a"}


def test_annotations_are_asked_once_per_pod_and_only_when_wanted():
    backend = Annotated("Burstable")
    assert backend.describe(LISTED).annotations is None  # not wanted: not asked
    backend.want_annotations = True
    for _attempt in range(3):
        assert backend.describe(LISTED).annotations == {"cpu-burst.kubecpu.io": "10ms"}
    assert backend.calls == {"inspect": 4, "inspect_pod": 1}


@pytest.mark.parametrize("annotations, good", [(None, True), ({"a": "b"}, True), ({"a": 1}, False), ([], False)])
def test_cached_annotations_are_checked(annotations, good):
    doc = dict(info(qos="Burstable").to_dict(), annotations=annotations)
    if good:
        assert ContainerInfo.from_dict(doc).annotations == annotations
    else:
        with pytest.raises(RuntimeOutputError, match="annotations"):
            ContainerInfo.from_dict(doc)
