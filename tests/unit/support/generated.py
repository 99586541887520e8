"""Regular generated machines, numbered as Linux numbers them (thread t of global core g is CPU g + t * cores)."""

from __future__ import annotations

from typing import List

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import CPUInfo, Topology


def generated_cpus(sockets: int, cores: int, threads: int, numa_per_socket: int = 1,
                   l3_per_socket: int = 1) -> List[CPUInfo]:
    total = sockets * cores
    cpus = []
    for t in range(threads):
        for g in range(total):
            socket, local = divmod(g, cores)
            cpus.append(CPUInfo(cpu=g + t * total, core=g, socket=socket,
                                numa=socket * numa_per_socket + local * numa_per_socket // cores,
                                uncore=socket * l3_per_socket + local * l3_per_socket // cores))
    return cpus


def generated(sockets: int, cores: int, threads: int, numa_per_socket: int = 1, l3_per_socket: int = 1) -> Topology:
    return Topology(generated_cpus(sockets, cores, threads, numa_per_socket, l3_per_socket))
