"""Pods: QoS classes, the exclusive CPU count per container, init containers and sidecars (ALGORITHM.md section 5)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PodSpecError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod


def _container(name, cpu_req=None, cpu_lim=None, mem_req=None, mem_lim=None, **extra):
    doc = {"name": name, "cpu_request": cpu_req, "cpu_limit": cpu_lim, "memory_request": mem_req,
           "memory_limit": mem_lim}
    doc.update(extra)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize("containers,inits,qos", [
    ([_container("a", "2", "2", "1G", "1G")], [], "Guaranteed"),
    ([_container("a", None, "2", None, "1G")], [], "Guaranteed"),  # requests default to limits
    ([_container("a", "1", "2", "1G", "1G")], [], "Burstable"),
    ([_container("a", "1")], [], "Burstable"),
    ([_container("a")], [], "BestEffort"),
    ([_container("a", "2", "2", "1G", "1G")], [_container("i", "1")], "Burstable"),  # init containers count
    ([_container("a", "2", "2", "1G", "1G")], [_container("i", "1", "1", "1G", "1G")], "Guaranteed"),
    ([_container("a", "2", "2", "1G", "1G"), _container("b", "1", "1")], [], "Burstable"),  # b lacks memory
])
def test_qos_class(containers, inits, qos):
    assert Pod.from_dict({"uid": "u", "containers": containers, "init_containers": inits}).qos_class() == qos


def test_guaranteed_cpus_and_sidecars():
    pod = Pod.from_dict({"uid": "u", "init_containers": [
        _container("sc", "1", "1", "1G", "1G", restart_policy="Always"), _container("i", "3", "3", "1G", "1G")],
        "containers": [_container("a", "2", "2", "1G", "1G"), _container("f", "1500m", "1500m", "1G", "1G")]})
    assert [pod.guaranteed_cpus(n) for n in ("sc", "i", "a", "f")] == [1, 3, 2, 0]
    assert pod.container("sc").restartable_init and not pod.container("i").restartable_init


@pytest.mark.parametrize("doc,message", [
    ([], "a JSON object is expected"),
    ({"containers": [{"name": "a"}]}, '"uid" must be a non-empty string'),
    ({"uid": "u", "containers": []}, "at least one container"),
    ({"uid": "u", "containers": [{"name": "a"}, {"name": "a"}]}, 'container name "a" is used twice'),
    ({"uid": "u", "containers": [{"name": "a", "cpu_request": "lots"}]}, '"cpu_request": quantity "lots"'),
    ({"uid": "u", "containers": [{"name": "a", "cpu_request": "-1"}]}, "must not be negative"),
    ({"uid": "u", "containers": [{"name": "a", "restart_policy": "Sometimes"}]}, '"restart_policy" must be one of'),
    ({"uid": "u", "containers": [{"cpu_request": "1"}]}, '"name" must be a non-empty string'),
])
def test_bad_pods(doc, message):
    with pytest.raises(PodSpecError, match=message):
        Pod.from_dict(doc)


def test_unknown_container_is_named():
    pod = Pod.from_dict({"uid": "u", "name": "web", "namespace": "prod", "containers": [{"name": "a"}]})
    with pytest.raises(PodSpecError, match='pod prod/web \\(uid u\\) has no container "b"'):
        pod.container("b")
