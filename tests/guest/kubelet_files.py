"""What a real kubelet is given, for the tests inside the guest (kubelets.py) and the role's tests from the host
(tests/guest_host/test_kubelet_role.py): the node's own settings and a Guaranteed static pod's manifest."""

from __future__ import annotations

from typing import Any, Dict, Sequence

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
    """A Guaranteed static pod of one container ("app") with ``count`` CPUs running ``command``; its UID
    ``<name>-uid`` (the kubelet keeps a static pod's own UID). Removed, it is killed at once: its process is the
    container's first (``sleep``, which a SIGTERM does not end), and the kubelet's default 30 s of grace would be
    spent waiting."""
    quantity = {"cpu": str(count), "memory": "32Mi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": "%s-uid" % name},
            "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "Never", "command": list(command),
                "resources": {"requests": quantity, "limits": quantity}}]}}
