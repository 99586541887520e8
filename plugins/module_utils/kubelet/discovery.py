# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Topology discovery: sysfs first, then ``lscpu -p``, then ``/proc/cpuinfo``.

Everything is read below a configurable root (``/`` on a node, a fake tree in tests). ``lscpu`` runs
through an injected command runner that takes an argument list (the Ansible module passes
``module.run_command``), never a shell string.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import CPUSetError, TopologyError
from .cpuset import EMPTY, CPUSet
from .topology import CPUInfo, Topology

CommandRunner = Callable[[Sequence[str]], Tuple[int, str, str]]
LSCPU_ARGV = ("lscpu", "-p=CPU,CORE,SOCKET,NODE,CACHE")
_CPU_DIR = re.compile(r"cpu([0-9]+)\Z")
_NODE_DIR = re.compile(r"node([0-9]+)\Z")


def run_command(argv: Sequence[str]) -> Tuple[int, str, str]:
    """Default runner: argument list, no shell, bounded time (subprocess imported here: sysfs needs none)."""
    import subprocess  # noqa: PLC0415

    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


class _Sys:
    """Reads files below the sysfs/procfs root."""

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def read(self, *parts: str) -> Optional[str]:
        try:
            with open(self.path(*parts), encoding="utf-8") as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None

    def read_int(self, *parts: str) -> Optional[int]:
        text = self.read(*parts)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            raise TopologyError("%s: expected an integer, got %r" % (self.path(*parts), text)) from None

    def read_cpuset(self, *parts: str) -> Optional[CPUSet]:
        text = self.read(*parts)
        if text is None:
            return None
        if text in ("", "(null)"):
            return EMPTY
        try:
            return CPUSet.parse(text)
        except CPUSetError as exc:
            raise TopologyError("%s: %s" % (self.path(*parts), exc)) from None

    def listdir(self, *parts: str) -> List[str]:
        try:
            return os.listdir(self.path(*parts))
        except OSError:
            return []


def _numa_map(fs: _Sys) -> Dict[int, int]:
    numa: Dict[int, int] = {}
    for name in fs.listdir("sys/devices/system/node"):
        match = _NODE_DIR.match(name)
        if not match:
            continue
        for cpu in fs.read_cpuset("sys/devices/system/node", name, "cpulist") or EMPTY:
            numa[cpu] = int(match.group(1))
    return numa


def _numa_distances(fs: _Sys) -> Optional[Dict[int, List[int]]]:
    """node<N>/distance rows (the kubelet's NUMA distances); None when sysfs has no node directory."""
    rows: Dict[int, List[int]] = {}
    for name in fs.listdir("sys/devices/system/node"):
        match = _NODE_DIR.match(name)
        text = fs.read("sys/devices/system/node", name, "distance") if match else None
        if match and text:
            try:
                rows[int(match.group(1))] = [int(d) for d in text.split()]
            except ValueError:
                continue  # an unreadable row: prefer-closest-numa-nodes will report it missing, as the kubelet does
    return rows or None


def _l3_id(fs: _Sys, cpu_dir: str) -> Optional[int]:
    """The L3 (level 3, Unified) cache id of a CPU; lowest CPU of shared_cpu_list when ids are missing."""
    for index in sorted(fs.listdir(cpu_dir, "cache")):
        if not index.startswith("index"):
            continue
        if fs.read(cpu_dir, "cache", index, "level") != "3" or fs.read(cpu_dir, "cache", index, "type") != "Unified":
            continue
        ident = fs.read_int(cpu_dir, "cache", index, "id")
        if ident is not None:
            return ident
        shared = fs.read_cpuset(cpu_dir, "cache", index, "shared_cpu_list")
        if shared:
            return min(shared)
    return None


def discover_sysfs(root: str = "/") -> Optional[Topology]:
    """Discover from sysfs; None when sysfs has no usable topology files."""
    fs = _Sys(root)
    base = "sys/devices/system/cpu"
    cpu_ids = sorted(int(m.group(1)) for m in (_CPU_DIR.match(n) for n in fs.listdir(base)) if m)
    if not cpu_ids:
        return None
    offline = set(fs.read_cpuset(base, "offline") or EMPTY)
    for cpu in cpu_ids:
        if fs.read(base, "cpu%d" % cpu, "online") == "0":
            offline.add(cpu)
    numa = _numa_map(fs)
    infos = []
    for cpu in cpu_ids:
        cpu_dir = os.path.join(base, "cpu%d" % cpu)
        socket = fs.read_int(cpu_dir, "topology", "physical_package_id")
        is_online = cpu not in offline
        if socket is None:
            if is_online:
                return None  # no topology files for an online CPU: this sysfs cannot be used
            socket = 0
        siblings = (fs.read_cpuset(cpu_dir, "topology", "core_cpus_list")
                    or fs.read_cpuset(cpu_dir, "topology", "thread_siblings_list"))
        core = min(siblings) if siblings else cpu
        die = fs.read_int(cpu_dir, "topology", "die_id")
        uncore = _l3_id(fs, cpu_dir)
        infos.append(CPUInfo(cpu=cpu, core=core, socket=socket, numa=numa.get(cpu, 0),
                             uncore=socket if uncore is None else uncore,
                             die=die if die is not None and die >= 0 else 0, online=is_online))
    return Topology(infos, isolated=fs.read_cpuset(base, "isolated") or EMPTY,
                    nohz_full=fs.read_cpuset(base, "nohz_full") or EMPTY, source="sysfs",
                    numa_distances=_numa_distances(fs))


def parse_lscpu(text: str) -> List[CPUInfo]:
    """Parse ``lscpu -p=CPU,CORE,SOCKET,NODE,CACHE`` (cache columns either ``:``- or ``,``-separated)."""
    header: List[str] = []
    rows: List[List[str]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            header = [col.strip() for col in line.lstrip("#").strip().replace(":", ",").split(",")]
        elif line.strip():
            rows.append([col.strip() for col in line.replace(":", ",").split(",")])
    if not rows or header[:4] != ["CPU", "Core", "Socket", "Node"]:
        raise TopologyError("lscpu output not understood (header %r)" % ",".join(header))
    l3 = header.index("L3") if "L3" in header else None
    parsed = []
    for row in rows:
        try:
            cpu, lcore, socket = int(row[0]), int(row[1]), int(row[2] or 0)
            node = int(row[3]) if row[3] else 0
            cache = int(row[l3]) if l3 is not None and l3 < len(row) and row[l3] else None
        except (ValueError, IndexError):
            raise TopologyError("lscpu output not understood (line %r)" % ",".join(row)) from None
        parsed.append((cpu, lcore, socket, node, cache))
    lowest: Dict[Tuple[int, int], int] = {}
    for cpu, lcore, socket, _node, _cache in parsed:
        key = (socket, lcore)
        lowest[key] = min(cpu, lowest.get(key, cpu))
    return [CPUInfo(cpu=cpu, core=lowest[(socket, lcore)], socket=socket, numa=node,
                    uncore=socket if cache is None else cache)
            for cpu, lcore, socket, node, cache in parsed]


def parse_cpuinfo(text: str) -> List[CPUInfo]:
    """Parse /proc/cpuinfo: processor, physical id, core id (NUMA 0, uncore = socket)."""
    blocks: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, _sep, value = line.partition(":")
        current[key.strip()] = value.strip()
    procs = []
    for block in blocks:
        if "processor" not in block:
            continue
        try:
            cpu = int(block["processor"])
            socket = int(block.get("physical id", "0"))
            core = int(block["core id"]) if "core id" in block else None
        except ValueError:
            raise TopologyError("/proc/cpuinfo not understood near processor %r" % block.get("processor")) from None
        procs.append((cpu, socket, core))
    if not procs:
        raise TopologyError("/proc/cpuinfo lists no processor")
    lowest: Dict[Tuple[int, int], int] = {}
    for cpu, socket, core in procs:
        core_key = (socket, cpu if core is None else core)
        lowest[core_key] = min(cpu, lowest.get(core_key, cpu))
    return [CPUInfo(cpu=cpu, core=lowest[(socket, cpu if core is None else core)], socket=socket, numa=0,
                    uncore=socket) for cpu, socket, core in procs]


def discover(root: str = "/", runner: Optional[CommandRunner] = None) -> Topology:
    """Discover the topology below ``root``: sysfs, else lscpu (only for root "/"), else /proc/cpuinfo."""
    topo = discover_sysfs(root)
    if topo is not None:
        return topo
    fs = _Sys(root)
    offline = fs.read_cpuset("sys/devices/system/cpu", "offline") or EMPTY
    isolated = fs.read_cpuset("sys/devices/system/cpu", "isolated") or EMPTY
    nohz = fs.read_cpuset("sys/devices/system/cpu", "nohz_full") or EMPTY
    reasons = ["sysfs below %s has no CPU topology files" % fs.path("sys/devices/system/cpu")]
    if os.path.realpath(root) == "/" or runner is not None:
        rc, out, err = (runner or run_command)(LSCPU_ARGV)
        if rc == 0:
            infos = parse_lscpu(out)
            return Topology(_mark_offline(infos, offline), isolated=isolated, nohz_full=nohz, source="lscpu")
        reasons.append("%s failed (rc=%d): %s" % (" ".join(LSCPU_ARGV), rc, err.strip()))
    text = fs.read("proc/cpuinfo")
    if text is not None:
        return Topology(_mark_offline(parse_cpuinfo(text), offline), isolated=isolated, nohz_full=nohz,
                        source="cpuinfo")
    reasons.append("%s is not readable" % fs.path("proc/cpuinfo"))
    raise TopologyError("cannot discover the CPU topology: " + "; ".join(reasons))


def _mark_offline(infos: List[CPUInfo], offline: CPUSet) -> List[CPUInfo]:
    return [i._replace(online=i.cpu not in offline) for i in infos]


def load_topology(topology_path: Optional[str] = None, sysfs_root: Optional[str] = None) -> Topology:
    """A topology file when one is named, else what this node (or the tree below ``sysfs_root``) shows."""
    if topology_path:
        return Topology.load(topology_path)
    return discover(sysfs_root or "/")
