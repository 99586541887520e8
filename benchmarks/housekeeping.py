"""Interrupt isolation's cost in a pass: what keeping device interrupts off exclusive CPUs adds to a reconcile pass.

A node of 256 CPUs (2 sockets x 64 cores x 2 threads) with 50 Guaranteed 2-CPU containers on the fake runtime; a
/proc/irq-shaped tree of 64, 512 and 2,048 interrupts (each on every CPU, as at boot) in a temporary directory.
Baseline: the same pass without isolation. Figures: a pass whose held set is unchanged (procfs not read: one read
of the record), and a pass that pins one more container (every interrupt read, each moved, the record written
durably), p50 / p99 over the samples. Then this machine's real /proc/irq read in full, changing nothing.

    python benchmarks/housekeeping.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from _common import percentiles, timed
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import proc_irq

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import IrqIsolation
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irq import IrqFS


def node(directory, irqs, mode):
    topo = generated(2, 64, 2, 4, 8)
    runtime = FakeRuntime(os.path.join(directory, "cgroup"), str(topo.all_cpus), "0-7")
    machine = os.path.join(directory, "machine")
    proc_irq(os.path.join(machine, "proc", "irq"), {n: str(topo.all_cpus) for n in range(irqs)},
             default="ffffffff," * 7 + "ffffffff")
    manager = NodeManager(topo, new_policy("static", topo, 2), StateStore(os.path.join(directory, "state"), "static"),
                          runtime, cgroups=CgroupFS(os.path.join(directory, "cgroup")),
                          options=ManagerOptions(irq_isolation=mode), sysfs_root=machine)
    for n in range(50):
        runtime.add("pod-%d" % n, "app", "Guaranteed", 2000)
    manager.reconcile()
    return manager, runtime


def passes(irqs, mode, samples):
    """(steady p50, p99), (one more pinned p50, p99) in ms."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as directory:
        manager, runtime = node(directory, irqs, mode)
        steady = [timed(manager.reconcile) * 1000 for _sample in range(samples)]
        pinning = []
        for n in range(samples):
            runtime.add("extra-%d" % n, "app", "Guaranteed", 2000)
            pinning.append(timed(manager.reconcile) * 1000)
            runtime.remove_pod("extra-%d" % n)
            manager.reconcile()
        return percentiles(steady), percentiles(pinning)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few samples (a smoke run for the test suite)")
    args = parser.parse_args()
    samples = 5 if args.quick else 60
    print("reconcile pass, 256 CPUs, 50 pinned containers (ms, p50 / p99)")
    print("%-26s %-22s %-22s" % ("", "steady", "one more pinned"))
    base = passes(64, "off", samples)
    print("%-26s %6.2f / %6.2f        %6.2f / %6.2f" % ("baseline (isolation off)", *base[0], *base[1]))
    for irqs in (64, 512) if args.quick else (64, 512, 2048):
        steady, pinning = passes(irqs, "exclusive", samples)
        print("%-26s %6.2f / %6.2f (x%.2f) %6.2f / %6.2f (x%.2f)" % (
            "exclusive, %d interrupts" % irqs, *steady, steady[0] / base[0][0], *pinning, pinning[0] / base[1][0]))
    irqs = IrqFS()
    listed = irqs.irqs()
    if listed:
        with tempfile.TemporaryDirectory() as directory:
            online = CPUSet(os.sched_getaffinity(0))
            isolation = IrqIsolation(online, os.path.join(directory, "r.json"), irqs)
            held = CPUSet([max(online)]) if len(online) > 1 else CPUSet()
            scans = [timed(lambda: isolation.apply(held, apply=False)) * 1000 for _sample in range(samples)]
            print("this machine's /proc/irq, %d interrupts read in full (check mode): p50 %.3f ms, p99 %.3f ms"
                  % (len(listed), *percentiles(scans)))


if __name__ == "__main__":
    main()
