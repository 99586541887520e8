"""What a real kubelet is given, for the tests inside the guest (kubelets.py) and the role's tests from the host
(tests/guest_host/test_kubelet_role.py): the node's own settings and a Guaranteed static pod's manifest."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

RELEASES = {"1.35": "1.35.4", "1.36": "1.36.3", "1.37": "1.37.2"}
# A node's own settings, the role's input: the role changes only the CPU manager's keys. No API server (no
# kubeconfig: standalone); its server on (a self-signed certificate, anyone allowed) for /configz only; nothing
# evicted or collected on the guest's small disk and memory.
BASE: Dict[str, Any] = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd",
    "failSwapOn": False, "enableServer": True, "readOnlyPort": 0,
    "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
    "authorization": {"mode": "AlwaysAllow"}, "imageGCHighThresholdPercent": 100,
    "imageGCLowThresholdPercent": 99, "evictionHard": {"memory.available": "1Mi"}}


SLEEP = ["/bin/sleep", "infinity"]


def static_pod(name: str, count: int, image: str, command: Sequence[str] = tuple(SLEEP)) -> Dict[str, Any]:
    """A Guaranteed static pod of one container ("app") with ``count`` CPUs running ``command`` (``guaranteed_pod``)."""
    return guaranteed_pod(name, image, (("app", count),), command=command)


def guaranteed_pod(name: str, image: str, containers: Sequence[Tuple[str, int]],
                   init: Sequence[Tuple[str, int]] = (), command: Sequence[str] = tuple(SLEEP)) -> Dict[str, Any]:
    """A Guaranteed static pod: ``containers`` (name, CPUs) running ``command``, after ``init`` containers (name,
    CPUs) that exit at once; its UID ``<name>-uid`` (the kubelet keeps a static pod's own UID). Removed, it is killed
    at once: its process is the container's first (``sleep``, which a SIGTERM does not end), and the kubelet's
    default 30 s of grace would be spent waiting."""
    def container(cname: str, count: int, argv: Sequence[str]) -> Dict[str, Any]:
        quantity = {"cpu": str(count), "memory": "32Mi"}
        return {"name": cname, "image": image, "imagePullPolicy": "Never", "command": list(argv),
                "resources": {"requests": quantity, "limits": quantity}}
    spec: Dict[str, Any] = {"hostNetwork": True, "terminationGracePeriodSeconds": 1,
                            "containers": [container(cname, count, command) for cname, count in containers]}
    if init:
        spec["initContainers"] = [container(cname, count, ["/bin/true"]) for cname, count in init]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": "%s-uid" % name}, "spec": spec}
