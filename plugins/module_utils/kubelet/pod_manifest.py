# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A Kubernetes ``kind: Pod`` object (``kubectl get pod NAME -o json``, or its YAML already loaded) as kubecpu's pod
document (``Pod.from_dict``): the uid from ``metadata.uid``, the containers and init containers with their cpu and
memory requests and limits, an init container with ``restartPolicy: Always`` as a sidecar. The QoS class is then
computed from them as the kubelet computes it (``Pod.qos_class``); ``status.qosClass`` is not trusted.

What kubecpu does not model is refused, not ignored: pod-level resources (``spec.resources``) decide the QoS class and
the CPUs under the ``PodLevelResources`` gate, and ephemeral containers never get exclusive CPUs but would be
silently dropped."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ..errors import PodSpecError

KIND = "Pod"
RESOURCES = ("cpu", "memory")


def is_manifest(doc: Any) -> bool:
    """Whether ``doc`` is a Kubernetes object (it has ``kind`` or ``apiVersion``), not kubecpu's pod document."""
    return isinstance(doc, dict) and ("kind" in doc or "apiVersion" in doc)


def pod_document(doc: Mapping[str, Any], where: str = "pod") -> Dict[str, Any]:
    """The ``kind: Pod`` object ``doc`` as kubecpu's pod document; PodSpecError naming the field otherwise."""
    kind = doc.get("kind")
    if kind != KIND:
        raise PodSpecError('%s: kind is %s: a Pod is expected (kind: Pod), or kubecpu\'s pod document (no kind)'
                           % (where, _show(kind)))
    metadata = _mapping(doc, "metadata", where)
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        raise PodSpecError("%s: a Pod manifest needs metadata.uid (a pod the API server created has one: kubectl get "
                           "pod NAME -o json)" % where)
    spec = _mapping(doc, "spec", where)
    if spec.get("resources"):
        raise PodSpecError("%s: spec.resources (pod-level resources) is not modelled by kubecpu: the QoS class and "
                           "the CPUs would not be the kubelet's" % where)
    if spec.get("ephemeralContainers"):
        raise PodSpecError("%s: spec.ephemeralContainers is not modelled by kubecpu" % where)
    result: Dict[str, Any] = {"uid": uid, "name": metadata.get("name", ""), "namespace": metadata.get("namespace", ""),
                              "containers": _containers(spec, "containers", where),
                              "init_containers": _containers(spec, "initContainers", where)}
    return result


def _show(value: Any) -> str:
    return "missing" if value is None else repr(value)


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodSpecError("%s: %s must be an object, got %r" % (where, key, value))
    return value


def _containers(spec: Mapping[str, Any], key: str, where: str) -> List[Dict[str, Any]]:
    items = spec.get(key) or []
    if not isinstance(items, list):
        raise PodSpecError("%s: spec.%s must be a list" % (where, key))
    return [_container(item, "%s: spec.%s[%d]" % (where, key, n)) for n, item in enumerate(items)]


def _container(item: Any, where: str) -> Dict[str, Any]:
    if not isinstance(item, dict):
        raise PodSpecError("%s: an object is expected" % where)
    container: Dict[str, Any] = {"name": item.get("name")}
    resources = _mapping(item, "resources", where)
    for section, suffix in (("requests", "request"), ("limits", "limit")):
        values = _mapping(resources, section, "%s: resources" % where)
        for resource in RESOURCES:
            if values.get(resource) is not None:
                container["%s_%s" % (resource, suffix)] = _quantity(values[resource], "%s: resources.%s.%s"
                                                                    % (where, section, resource))
    if item.get("restartPolicy") is not None:
        container["restart_policy"] = item["restartPolicy"]
    return container


def _quantity(value: Any, where: str) -> str:
    """A quantity as the API accepts it: a string, or a number (YAML's ``cpu: 2``)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PodSpecError("%s: a quantity is expected, got %r" % (where, value))
    return value if isinstance(value, str) else repr(value)
