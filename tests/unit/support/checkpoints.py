"""Checkpoint files for tests, written from CPU lists as the kubelet writes them."""

from __future__ import annotations

from typing import Mapping

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState


def checkpoint_file(default: str, entries: Mapping[str, Mapping[str, str]], policy: str = "static") -> bytes:
    """The V2 file with this shared pool and these {pod UID: {container: CPU list}} entries."""
    state = CPUState(policy, CPUSet.parse(default))
    for pod, containers in entries.items():
        for name, cpus in containers.items():
            state.set(pod, name, CPUSet.parse(cpus))
    return encode(state)
