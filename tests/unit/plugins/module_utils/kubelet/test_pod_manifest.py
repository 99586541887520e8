"""A Kubernetes ``kind: Pod`` as kubecpu's pod: the uid, containers, init containers and sidecars, requests and limits,
and the QoS class the kubelet computes (GetPodQOS, pkg/apis/core/helper/qos); what kubecpu does not model refused."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PodSpecError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod_manifest import is_manifest, pod_document


def _resources(cpu=None, memory=None, requests=None):
    limits = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    found = {"limits": limits} if limits else {}
    if requests:
        found["requests"] = requests
    return found


def _manifest(containers, inits=(), **spec):
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"uid": "u", "name": "p", "namespace": "n"},
            "spec": dict(spec, containers=[dict(name="c%d" % n, resources=r) for n, r in enumerate(containers)],
                         initContainers=[dict(name="i%d" % n, resources=r) for n, r in enumerate(inits)])}


def _pod(doc):
    return Pod.from_dict(pod_document(doc, "pod file p.json"), "pod file p.json")


@pytest.mark.parametrize("containers,inits,qos", [
    ([_resources("2", "1Gi")], [], "Guaranteed"),  # requests default to limits
    ([_resources("2", "1Gi", {"cpu": "2", "memory": "1Gi"})], [], "Guaranteed"),
    ([_resources(2, "1Gi")], [], "Guaranteed"),  # YAML's cpu: 2
    ([_resources("2", "1Gi", {"cpu": "1"})], [], "Burstable"),  # a request below its limit
    ([_resources("2")], [], "Burstable"),  # no memory limit
    ([{}], [], "BestEffort"),
    ([_resources(requests={"cpu": "0", "memory": "0"})], [], "BestEffort"),  # zero requests do not count
    ([_resources("2", "1Gi")], [{}], "Burstable"),  # an init container without limits counts
    ([_resources("2", "1Gi")], [_resources("1", "64Mi")], "Guaranteed"),
    ([_resources("2", "1Gi"), {"requests": {"memory": "1Gi"}}], [], "Burstable"),
])
def test_the_qos_class_is_the_kubelets(containers, inits, qos):
    assert _pod(_manifest(containers, inits)).qos_class() == qos


def test_a_manifest_becomes_the_pod_kubecpus_document_describes():
    doc = _manifest([_resources("2", "1Gi"), _resources("500m", "64Mi")],
                    [_resources(1, "64Mi"), _resources("2", "1Gi")])
    doc["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    doc["status"] = {"qosClass": "BestEffort"}  # not trusted: computed from the containers
    same = Pod.from_dict({"uid": "u", "name": "p", "namespace": "n", "containers": [
        {"name": "c0", "cpu_limit": "2", "memory_limit": "1Gi"}, {"name": "c1", "cpu_limit": "500m",
                                                                  "memory_limit": "64Mi"}],
        "init_containers": [{"name": "i0", "cpu_limit": "1", "memory_limit": "64Mi", "restart_policy": "Always"},
                            {"name": "i1", "cpu_limit": "2", "memory_limit": "1Gi"}]})
    pod = _pod(doc)
    assert pod == same and pod.qos_class() == "Guaranteed"
    assert pod.container("i0").restartable_init and pod.guaranteed_pod_cpus() == 3  # the sidecar 1 + the app 2


@pytest.mark.parametrize("doc,message", [
    ({"uid": "u", "containers": []}, None),  # kubecpu's own document: not a manifest
    ({"kind": "Deployment"}, "kind is 'Deployment': a Pod is expected"),
    ({"apiVersion": "v1"}, "kind is missing: a Pod is expected"),
    ({"kind": "Pod", "metadata": {"name": "web"}}, "a Pod manifest needs metadata.uid"),
    ({"kind": "Pod", "metadata": {"uid": ""}}, "a Pod manifest needs metadata.uid"),
    ({"kind": "Pod", "metadata": ["u"]}, "metadata must be an object"),
    (_manifest([{}], resources={"limits": {"cpu": "4"}}), "spec.resources (pod-level resources) is not modelled"),
    (_manifest([{}], ephemeralContainers=[{"name": "debug"}]), "spec.ephemeralContainers is not modelled"),
    (_manifest([{"limits": {"cpu": True}}]), "spec.containers[0]: resources.limits.cpu: a quantity is expected"),
    (_manifest([{"limits": {"cpu": ["1"]}}]), "a quantity is expected, got ['1']"),
    (_manifest([{"limits": "2"}]), "resources: limits must be an object"),
    (dict(_manifest([]), spec={"containers": {"name": "a"}}), "spec.containers must be a list"),
    (dict(_manifest([]), spec={"containers": ["a"]}), "spec.containers[0]: an object is expected"),
])
def test_what_cannot_be_read_as_the_kubelet_reads_it_is_refused(doc, message):
    if message is None:
        assert not is_manifest(doc)
        return
    assert is_manifest(doc)
    with pytest.raises(PodSpecError) as caught:
        pod_document(doc, "pod file p.json")
    assert str(caught.value).startswith("pod file p.json: ") and message in str(caught.value)
