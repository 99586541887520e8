# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Pods as the policy sees them: containers with CPU/memory requests and limits, the QoS class and the
number of exclusive CPUs a container gets (ALGORITHM.md section 5)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from ..errors import PodSpecError, QuantityError
from .qos import BEST_EFFORT, BURSTABLE, GUARANTEED
from .quantity import integral_cpus, parse_quantity

_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_QUANTITY_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


class Container(NamedTuple):
    """A container's compute resources (requests already defaulted to limits, as the API server does)."""

    name: str
    cpu_request: Optional[Fraction] = None
    cpu_limit: Optional[Fraction] = None
    memory_request: Optional[Fraction] = None
    memory_limit: Optional[Fraction] = None
    restart_policy: Optional[str] = None
    init: bool = False
    # Beyond the kubelet: a Burstable pod's container that kubecpu's cpu-exclusive.kubecpu.io annotation names and
    # that may have exclusive CPUs (node/exclusive.py). Never set on a path that decides for a kubelet.
    exclusive: bool = False

    @property
    def restartable_init(self) -> bool:
        """A sidecar: an init container with restartPolicy Always."""
        return self.init and self.restart_policy == "Always"


class Pod(NamedTuple):
    uid: str
    name: str
    namespace: str
    init_containers: Tuple[Container, ...]
    containers: Tuple[Container, ...]
    qos: str = ""  # the QoS class as the runtime reports it (pod cgroup parent); "" derives it from the containers

    @property
    def ref(self) -> str:
        """How messages name the pod: namespace/name (uid)."""
        return "%s/%s (uid %s)" % (self.namespace or "default", self.name or "?", self.uid)

    def all_containers(self) -> Tuple[Container, ...]:
        return self.init_containers + self.containers

    def container(self, name: str) -> Container:
        for item in self.all_containers():
            if item.name == name:
                return item
        raise PodSpecError('pod %s has no container "%s" (containers: %s)'
                           % (self.ref, name, ", ".join(c.name for c in self.all_containers()) or "none"))

    def qos_class(self) -> str:
        """The Kubernetes QoS class from all containers (init containers included), or as the runtime told."""
        if self.qos:
            return self.qos
        requests: Dict[str, Fraction] = {}
        limits: Dict[str, Fraction] = {}
        guaranteed = True
        for item in self.all_containers():
            for resource, value in (("cpu", item.cpu_request), ("memory", item.memory_request)):
                if value is not None and value > 0:
                    requests[resource] = requests.get(resource, Fraction(0)) + value
            found = set()
            for resource, value in (("cpu", item.cpu_limit), ("memory", item.memory_limit)):
                if value is not None and value > 0:
                    found.add(resource)
                    limits[resource] = limits.get(resource, Fraction(0)) + value
            if found != {"cpu", "memory"}:
                guaranteed = False
        if not requests and not limits:
            return BEST_EFFORT
        if guaranteed:
            for resource, value in requests.items():
                if limits.get(resource) != value:
                    guaranteed = False
        if guaranteed and len(requests) == len(limits):
            return GUARANTEED
        return BURSTABLE

    def guaranteed_cpus(self, name: str) -> int:
        """guaranteedCPUs: the integral CPU request of a container of a Guaranteed pod, else 0. Beyond the kubelet, a
        container marked ``exclusive`` of a Burstable pod counts as a Guaranteed pod's would (unmarked, as everywhere
        a kubelet's decision is reproduced, this is the kubelet's rule exactly)."""
        item = self.container(name)
        qos = self.qos_class()
        if item.cpu_request is None or (qos != GUARANTEED and not (item.exclusive and qos == BURSTABLE)):
            return 0
        return integral_cpus(item.cpu_request)

    def guaranteed_pod_cpus(self) -> int:
        """podGuaranteedCPUs: what the pod needs at its peak, the larger of its long-running containers (apps and
        sidecars) and the largest init container started after the sidecars before it."""
        by_init = by_sidecars = 0
        for item in self.init_containers:
            cpus = self.guaranteed_cpus(item.name)
            if item.restartable_init:
                by_sidecars += cpus
            elif by_sidecars + cpus > by_init:
                by_init = by_sidecars + cpus
        long_running = sum(self.guaranteed_cpus(item.name) for item in self.containers) + by_sidecars
        return max(by_init, long_running)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "pod") -> Pod:
        if not isinstance(doc, dict):
            raise PodSpecError("%s: a JSON object is expected" % where)
        uid = doc.get("uid")
        if not isinstance(uid, str) or not uid:
            raise PodSpecError('%s: "uid" must be a non-empty string' % where)
        name = _optional_str(doc, "name", where)
        namespace = _optional_str(doc, "namespace", where)
        inits = _containers(doc, "init_containers", where, True)
        apps = _containers(doc, "containers", where, False)
        if not apps:
            raise PodSpecError('%s: "containers" must list at least one container' % where)
        seen = set()
        for item in inits + apps:
            if item.name in seen:
                raise PodSpecError('%s: container name "%s" is used twice' % (where, item.name))
            seen.add(item.name)
        return cls(uid=uid, name=name, namespace=namespace, init_containers=inits, containers=apps)


def _optional_str(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PodSpecError('%s: "%s" must be a string, got %r' % (where, key, value))
    return value


def _containers(doc: Mapping[str, Any], key: str, where: str, init: bool) -> Tuple[Container, ...]:
    items = doc.get(key) or []
    if not isinstance(items, list):
        raise PodSpecError('%s: "%s" must be a list' % (where, key))
    return tuple(_container(item, "%s: %s[%d]" % (where, key, n), init) for n, item in enumerate(items))


def _container(item: Any, where: str, init: bool) -> Container:
    if not isinstance(item, dict):
        raise PodSpecError("%s: a JSON object is expected" % where)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError('%s: "name" must be a non-empty string' % where)
    where = '%s ("%s")' % (where, name)
    values: Dict[str, Optional[Fraction]] = {}
    for key in _QUANTITY_KEYS:
        raw = item.get(key)
        if raw is None:
            values[key] = None
            continue
        try:
            value = parse_quantity(raw)
        except QuantityError as exc:
            raise PodSpecError('%s: "%s": %s' % (where, key, exc)) from None
        if value < 0:
            raise PodSpecError('%s: "%s" must not be negative, got "%s"' % (where, key, raw))
        values[key] = value
    for resource in ("cpu", "memory"):
        if values[resource + "_request"] is None:
            values[resource + "_request"] = values[resource + "_limit"]
    policy = item.get("restart_policy")
    if policy is not None and policy not in _RESTART_POLICIES:
        raise PodSpecError('%s: "restart_policy" must be one of %s, got %r'
                           % (where, ", ".join(_RESTART_POLICIES), policy))
    return Container(name=name, cpu_request=values["cpu_request"], cpu_limit=values["cpu_limit"],
                     memory_request=values["memory_request"], memory_limit=values["memory_limit"],
                     restart_policy=policy, init=init)
