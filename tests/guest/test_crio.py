"""CRI-O 1.36.3 on the real server (cgroup v2, the systemd cgroup driver, NRI on; live defragmentation over its CRI
is in test_defrag.py): kubecpu's NRI plugin pins at the first instruction, and CRI-O's own high-performance hooks
for interrupts (``irq-load-balancing.crio.io: disable`` on a pod whose RuntimeClass's handler allows it) meet kubecpu's interrupt
isolation (docs/HOUSEKEEPING.md, "Beside CRI-O's high-performance hooks"). irqbalance is installed and not running,
as CRI-O finds it on most nodes: CRI-O then runs ``irqbalance --oneshot`` with the CPUs it bans (``systemctl
is-enabled irqbalance`` says no).

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import os

import pytest
from conftest import (CRIO_IRQ, Pinner, affinities, cpus, default_affinity, guaranteed, on, record_of, settle,
                      wait_for)

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError

ANNOTATED = {CRIO_IRQ: "disable"}
HANDLER = "high-performance"  # the RuntimeClass's handler that allows the annotation (conftest's crio)


def refused_interrupts():
    """The interrupts this kernel refuses to move (its managed virtio queues, the timer, the cascade): a write of
    their own affinity back fails."""
    refused = set()
    for irq, had in affinities().items():
        try:
            with open("/proc/irq/%d/smp_affinity_list" % irq, "w", encoding="ascii") as handle:
                handle.write(",".join(map(str, sorted(had))))
        except OSError:
            refused.add(irq)
    return refused


@pytest.fixture
def pods(crio):
    """The pods a test made, removed after it whatever happened (a pod left running holds its CPUs in the next)."""
    made = []
    yield made
    for pod in made:
        crio.remove_pod(pod)


def shown(table):
    return {irq: sorted(where) for irq, where in table.items()}


def test_crio_s_hooks_take_the_cpus_kubecpu_s_plugin_gave_at_creation(tmp_path, crio, pods, irqbalance_stopped):
    """kubecpu pins (its interrupt isolation off), CRI-O's hooks alone keep the default affinity of interrupts to come
    off the container's CPUs (the plugin's cpuset is in the spec CRI-O starts the container from) and give it back
    when the container stops. Interrupts that exist already are left to ``irqbalance --oneshot``: what it leaves on
    the container's CPUs is printed (docs/HOUSEKEEPING.md quotes it)."""
    default_before, refused = default_affinity(), refused_interrupts()
    plugin = Pinner(crio, str(tmp_path / "plugin"), "nri", ["--reserved-cpus", "0"])
    plugin.start()
    try:
        pods.append(crio.run_pod("hooked", "Guaranteed", guaranteed(2), annotations=ANNOTATED, handler=HANDLER))
        held = settle(crio, pods[0], cpus(plugin.entries()[pods[0]["uid"]]["app"]))
        assert len(held) == 2 and 0 not in held
        assert default_affinity() == default_before - held  # CRI-O's PreStart, from the spec kubecpu adjusted
        print("CRI-O alone: held %s, default %s; still on the held CPUs after irqbalance --oneshot: %s (of %d "
              "interrupts; %s refuse any move)" % (sorted(held), sorted(default_affinity()),
                                                   on(held, affinities()), len(affinities()), sorted(refused)))
        assert not os.path.exists(plugin.state + ".irq.json")  # kubecpu moved nothing
        crio.remove_pod(pods.pop())
        assert default_affinity() == default_before  # CRI-O's PostStop, before RemovePodSandbox returned
    finally:
        plugin.stop()


def test_without_a_cpuset_at_creation_crio_refuses_to_start_an_annotated_container(crio):
    """kubecpu's agent pins after the start (the kubelet's policy none puts no cpuset in the request): CRI-O's
    hooks then find no CPUs in the spec and refuse to start the container. On CRI-O, an annotated pod of a handler
    that allows the annotation needs the plugin (or the kubelet's static policy)."""
    with pytest.raises(ContainerRuntimeError, match=r"set IRQ load balancing: find container \w+ CPUs"):
        crio.run_pod("unpinned", "Guaranteed", guaranteed(2), annotations=ANNOTATED, handler=HANDLER)
    for item in crio.cri.list_pods():  # the sandbox that ran (its container never started): removed
        if item.name == "unpinned":
            crio.cri.remove_pod_sandbox(item.id)


def test_kubecpu_s_isolation_and_crio_s_hooks_together_agree(tmp_path, crio, pods, irqbalance_stopped):
    """Both on (kubecpu's mode annotated reads CRI-O's annotation): the default affinity is the same narrowing from
    either, kubecpu moves every interrupt that can move off the held CPUs (irqbalance's one pass leaves some), and
    after the pod is gone CRI-O has given the default back and kubecpu every interrupt it moved: its record is
    empty, nothing is left narrowed."""
    before, default_before, refused = affinities(), default_affinity(), refused_interrupts()
    plugin = Pinner(crio, str(tmp_path / "plugin"), "nri", ["--reserved-cpus", "0", "--irq-isolation", "annotated"])
    plugin.start()
    try:
        pods.append(crio.run_pod("both", "Guaranteed", guaranteed(2), annotations=ANNOTATED, handler=HANDLER))
        held = settle(crio, pods[0], cpus(plugin.entries()[pods[0]["uid"]]["app"]))
        wait_for(lambda: not on(held, affinities(), refused), 120, "every movable interrupt off %s (still on: %s)"
                 % (sorted(held), on(held, affinities(), refused)))
        assert default_affinity() == default_before - held
        moved = record_of(plugin.state)
        print("both: held %s, default %s, interrupts %s, kubecpu moved %s" % (
            sorted(held), sorted(default_affinity()), shown(affinities()), sorted(moved["originals"])))
        crio.remove_pod(pods.pop())
        wait_for(lambda: not record_of(plugin.state).get("originals"), 120,
                 "kubecpu giving back what it moved (record: %s)" % record_of(plugin.state).get("originals"))
        assert default_affinity() == default_before
        after = affinities()
        print("both, after: default %s, interrupts %s (before: %s)"
              % (sorted(default_affinity()), shown(after), shown(before)))
        for key, original in moved["originals"].items():  # none left where kubecpu put it: given back, or irqbalance's
            if key != "default" and int(key) in after and int(key) not in refused:
                assert after[int(key)] == cpus(original) or after[int(key)] != cpus(moved["wrote"][key]), key
    finally:
        plugin.stop()
