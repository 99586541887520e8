"""Builds fake sysfs trees (the files TOPOLOGY.md names) for discovery tests."""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, NamedTuple, Optional


class FakeCPU(NamedTuple):
    cpu: int
    core: int  # lowest CPU id of the core (what discovery must report)
    socket: int
    numa: int = 0
    l3: Optional[int] = 0  # L3 id; None: no L3 cache entry
    die: Optional[int] = 0  # None: no die_id file; -1 as some kernels report


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def _cpulist(cpus: Iterable[int]) -> str:
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
    return str(CPUSet(cpus))


def build(root: str, cpus: List[FakeCPU], offline: Iterable[int] = (), isolated: str = "",
          nohz_full: Optional[str] = None, caches: bool = True, l3_ids: bool = True, numa_dirs: bool = True,
          siblings_file: str = "core_cpus_list") -> str:
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    offline = set(offline)
    online = [c.cpu for c in cpus if c.cpu not in offline]
    _write(os.path.join(base, "online"), _cpulist(online))
    _write(os.path.join(base, "offline"), _cpulist(offline))
    _write(os.path.join(base, "isolated"), isolated)
    if nohz_full is not None:
        _write(os.path.join(base, "nohz_full"), nohz_full)
    cores: Dict[int, List[int]] = {}
    l3s: Dict[int, List[int]] = {}
    for c in cpus:
        if c.cpu not in offline:
            cores.setdefault(c.core, []).append(c.cpu)
            if c.l3 is not None:
                l3s.setdefault(c.l3, []).append(c.cpu)
    for c in cpus:
        cpu_dir = os.path.join(base, "cpu%d" % c.cpu)
        if c.cpu in offline:
            _write(os.path.join(cpu_dir, "online"), "0")
            continue  # the kernel drops topology/ and cache/ of offline CPUs
        if c.cpu != 0:
            _write(os.path.join(cpu_dir, "online"), "1")
        topo = os.path.join(cpu_dir, "topology")
        _write(os.path.join(topo, "physical_package_id"), str(c.socket))
        _write(os.path.join(topo, "core_id"), str(c.core % 100))  # repeats across packages, as on real machines
        _write(os.path.join(topo, siblings_file), _cpulist(cores[c.core]))
        if c.die is not None:
            _write(os.path.join(topo, "die_id"), str(c.die))
        if caches:
            for index, (level, kind) in enumerate([(1, "Data"), (1, "Instruction"), (2, "Unified"), (3, "Unified")]):
                if level == 3 and c.l3 is None:
                    continue
                cache = os.path.join(cpu_dir, "cache", "index%d" % index)
                _write(os.path.join(cache, "level"), str(level))
                _write(os.path.join(cache, "type"), kind)
                ident = c.l3 if level == 3 else c.core
                shared = l3s[c.l3] if level == 3 else cores[c.core]
                if level != 3 or l3_ids:
                    _write(os.path.join(cache, "id"), str(ident))
                _write(os.path.join(cache, "shared_cpu_list"), _cpulist(shared))
    if numa_dirs:
        nodes: Dict[int, List[int]] = {}
        for c in cpus:
            if c.cpu not in offline:
                nodes.setdefault(c.numa, []).append(c.cpu)
        for node, members in nodes.items():
            _write(os.path.join(root, "sys", "devices", "system", "node", "node%d" % node, "cpulist"),
                   _cpulist(members))
    return root


def machine(sockets: int, cores_per_socket: int, threads: int, numa_per_socket: int = 1,
            l3_per_socket: int = 1) -> List[FakeCPU]:
    """A regular machine, Linux-numbered (see generated.py), as fake sysfs CPUs."""
    from .generated import generated_cpus
    return [FakeCPU(cpu=i.cpu, core=i.core, socket=i.socket, numa=i.numa, l3=i.uncore)
            for i in generated_cpus(sockets, cores_per_socket, threads, numa_per_socket, l3_per_socket)]


INTEL_PSTATE = "performance powersave"  # intel_pstate (active mode) offers these two
ACPI_CPUFREQ = "conservative ondemand userspace powersave performance schedutil"  # acpi-cpufreq, every governor built


def power(root: str, cpus: Iterable[int], *, latency: str = "0", governor: Optional[str] = "powersave",
          governors: str = INTEL_PSTATE, policies: Optional[Dict[int, List[int]]] = None,
          without_cpufreq: Iterable[int] = ()) -> str:
    """The power files of ``cpus`` as Linux shows them (drivers/base/power/sysfs.c, drivers/cpufreq/cpufreq.c):
    ``cpuN/power/pm_qos_resume_latency_us`` (``0``: no limit), and with a cpufreq driver (``governor`` not None)
    ``cpufreq/policyK/`` with ``scaling_governor``, ``scaling_available_governors``, ``affected_cpus`` and
    ``related_cpus``, each CPU's ``cpufreq`` a relative link to its policy. ``policies``: policy K -> its CPUs (default
    one per CPU, as intel_pstate and acpi-cpufreq make them); ``without_cpufreq``: CPUs that have none."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    cpus = list(cpus)
    for cpu in cpus:
        _write(os.path.join(base, "cpu%d" % cpu, "power", "pm_qos_resume_latency_us"), latency)
        _write(os.path.join(base, "cpu%d" % cpu, "power", "control"), "auto")
    if governor is None:
        return root
    skip = set(without_cpufreq)
    for policy, members in (policies or {cpu: [cpu] for cpu in cpus if cpu not in skip}).items():
        directory = os.path.join(base, "cpufreq", "policy%d" % policy)
        _write(os.path.join(directory, "scaling_governor"), governor)
        _write(os.path.join(directory, "scaling_available_governors"), governors)
        _write(os.path.join(directory, "scaling_driver"), "intel_pstate" if governors == INTEL_PSTATE else "acpi-cpufreq")
        _write(os.path.join(directory, "affected_cpus"), " ".join(str(cpu) for cpu in members))
        _write(os.path.join(directory, "related_cpus"), " ".join(str(cpu) for cpu in members))
        for cpu in members:
            if cpu not in skip:
                os.makedirs(os.path.join(base, "cpu%d" % cpu), exist_ok=True)
                os.symlink(os.path.join("..", "cpufreq", "policy%d" % policy), os.path.join(base, "cpu%d" % cpu, "cpufreq"))
    return root
