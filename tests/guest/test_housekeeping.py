"""Interrupts kept off exclusive CPUs on a real server (docs/HOUSEKEEPING.md): the guest's /proc/irq is writable,
its virtio queues are managed interrupts the kernel refuses to move (EIO), and irqbalance 1.9.2 is installed (not
started at boot). Every figure is read back from /proc/irq, /proc/interrupts and irqbalance's own answer.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import os
import signal
import subprocess

from checkpoints import checkpoint_file
from conftest import (KUBECPU, Pinner, affinities, cpus, default_affinity, guaranteed, on, record_of, settle,
                      wait_for)

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import ENV_FILE, ENV_NAME, IrqBalance


def interrupt_counts():
    """IRQ -> how often it has fired (every CPU's column of /proc/interrupts)."""
    counts = {}
    with open("/proc/interrupts", encoding="ascii") as handle:
        width = len(handle.readline().split())
        for line in handle:
            name, _colon, rest = line.partition(":")
            if name.strip().isdigit():
                counts[int(name)] = sum(int(v) for v in rest.split()[:width] if v.isdigit())
    return counts


def busy():
    """Interrupts on the devices that take a new affinity: reads over the 9p shares, a disk flush."""
    for root, _dirs, files in os.walk("/src/plugins/module_utils/kubelet"):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                handle.read()
    os.sync()


def banned_or_none(balance, path):
    """What the daemon says it bans, or None while it does not answer yet (it opens its socket before its loop runs)."""
    try:
        return balance.banned(path)
    except HousekeepingError:
        return None


def env_setting():
    """irqbalance's banned CPUs for its next start, as its environment file sets them (None: not set)."""
    with open(ENV_FILE, encoding="utf-8") as handle:
        return next((line.strip() for line in handle if line.startswith(ENV_NAME + "=")), None)


def idle_levels(lab, cid):
    """``cpu.idle`` of a container's cgroup, its pod's and its QoS cgroup's (cgroup v2)."""
    container = lab.cgroup_dir(cid, "cpu")
    levels = (os.path.dirname(os.path.dirname(container)), os.path.dirname(container), container)
    values = []
    for path in levels:
        with open(os.path.join(path, "cpu.idle"), encoding="ascii") as handle:
            values.append(handle.read().strip())
    return values


def test_the_agent_moves_interrupts_off_a_pinned_container_and_back(tmp_path, lab21, irqbalance_stopped):
    """And with --besteffort-idle, a BestEffort pod's cgroup gets cpu.idle = 1, its QoS cgroup and its container stay 0:
    this kernel refuses a cgroup's cpu.weight while it is idle, and the runtime writes the container's with every
    update (the BestEffort container is moved off the pinned CPUs below, through the runtime)."""
    before, default_before = affinities(), default_affinity()
    agent = Pinner(lab21, str(tmp_path / "agent"), "agent", ["--reserved-cpus", "0", "--irq-isolation", "exclusive",
                                                             "--besteffort-idle"])
    agent.start()
    batch = lab21.run_pod("batch", "BestEffort", [{"name": "app", "cpu": None}])
    try:
        cid = batch["containers"]["app"]
        wait_for(lambda: idle_levels(lab21, cid) == ["0", "1", "0"], 120, "cpu.idle of the BestEffort cgroups")
        print("BestEffort cpu.idle (QoS, pod, container): %s" % idle_levels(lab21, cid))
        pod = lab21.run_pod("quiet", "Guaranteed", guaranteed(2))
        wait_for(lambda: pod["uid"] in agent.entries(), 180, "the pod in the state")
        held = settle(lab21, pod, cpus(agent.entries()[pod["uid"]]["app"]))
        wait_for(lambda: not cpus(lab21.cgroup_cpus(batch, cid)) & held, 120,
                 "the BestEffort container off %s (the runtime's update, its cpu.weight with it)" % sorted(held))
        record = wait_for(lambda: os.path.exists(agent.state + ".irq.json") and record_of(agent.state), 60, "record")
        refused = set(record["refused"])
        shown = {i: sorted(c) for i, c in before.items()}
        print("before: %s default %s; held %s" % (shown, sorted(default_before), sorted(held)))
        wait_for(lambda: not on(held, affinities(), refused), 60, "smp_affinity_list of every movable interrupt off "
                 "CPUs %s (still on: %s)" % (sorted(held), on(held, affinities(), refused)))
        during = affinities()
        print("during: %s default %s; refused (managed) %s" % ({i: sorted(c) for i, c in during.items()},
                                                               sorted(default_affinity()), sorted(refused)))
        assert set(on(held, during)) == refused and refused  # the virtio queues pinned to a held CPU, only those
        assert all(during[irq] == before[irq] for irq in refused)  # left as they were
        assert not default_affinity() & held
        assert agent.metric("kubecpu_irq_affinity_refused") == len(refused)
        assert agent.metric("kubecpu_irq_affinity_updates_total") >= len(on(held, before, refused)) + 1
        # delivery follows once an interrupt fires again: those that fired are delivered off the held CPUs
        counts = interrupt_counts()

        def fired():
            busy()
            return {irq for irq, n in interrupt_counts().items() if n > counts.get(irq, 0) and irq not in refused}

        def delivered_off():
            busy()
            return not on(held, {i: c for i, c in affinities("effective_affinity_list").items() if i in fired()})

        assert wait_for(fired, 60, "interrupts firing")
        wait_for(delivered_off, 60, "fired interrupts delivered off %s" % held)
        effective = {i: sorted(c) for i, c in affinities("effective_affinity_list").items()}
        print("fired since: %s; effective now %s" % (sorted(fired()), effective))
        lab21.remove_pod(pod)
        wait_for(lambda: pod["uid"] not in agent.entries(), 180, "the pod released")
        wait_for(lambda: affinities() == before, 60, "every affinity back (differ: %s)" % {
            i: (sorted(before.get(i, ())), sorted(c)) for i, c in affinities().items() if c != before.get(i)})
        assert default_affinity() == default_before
        print("after release: every smp_affinity_list and the default as before")
    finally:
        lab21.remove_pod(batch)
        agent.stop()


def test_the_plugin_tells_a_running_irqbalance_and_never_restarts_it(tmp_path, lab17):
    subprocess.run(["systemctl", "start", "irqbalance"], check=True)
    try:
        balance = IrqBalance(timeout=30)  # a guest vCPU is 25-30x slower: its main loop may take a while to answer
        daemon = wait_for(balance.running, 60, "irqbalance's socket")
        wait_for(lambda: banned_or_none(balance, daemon[1]) is not None, 120, "irqbalance answering on its socket")
        plugin = Pinner(lab17, str(tmp_path / "nri"), "nri", ["--reserved-cpus", "0", "--irq-isolation", "exclusive"])
        plugin.start()
        made, holds = [], {}
        try:
            for name in ("first", "second"):
                made.append(lab17.run_pod(name, "Guaranteed", guaranteed(2)))
                wait_for(lambda: made[-1]["uid"] in plugin.entries(), 180, "%s in the state" % name)
                holds[name] = cpus(plugin.entries()[made[-1]["uid"]]["app"])
                held = set().union(*holds.values())
                wait_for(lambda: balance.banned(daemon[1]) == CPUSet(held), 60, "irqbalance banning %s" % held)
                refused = set(record_of(plugin.state)["refused"])
                wait_for(lambda: not on(held, affinities(), refused), 60, "interrupts off %s" % held)
                print("%s: irqbalance (pid %d) bans %s; %s says %s"
                      % (name, daemon[0], balance.banned(daemon[1]), ENV_FILE, env_setting()))
                assert env_setting() == "%s=%s" % (ENV_NAME, CPUSet(held))
            for pod in made:
                lab17.remove_pod(pod)
                wait_for(lambda pod=pod: pod["uid"] not in plugin.entries(), 180, "%s released" % pod["name"])
                del holds[pod["name"]]
                rest = CPUSet(set().union(*holds.values()))
                wait_for(lambda rest=rest: balance.banned(daemon[1]) == rest, 60, "irqbalance banning %s" % rest)
                print("%s released: irqbalance (pid %d) bans %s" % (pod["name"], daemon[0], rest))
            assert env_setting() is None
            assert balance.running() == daemon  # the same process all along
            assert plugin.proc.poll() is None
        finally:
            for pod in made:
                lab17.remove_pod(pod)
            plugin.stop()
    finally:
        subprocess.run(["systemctl", "stop", "irqbalance"], check=True)


def test_beside_a_kubelet_that_pins_interrupts_follow_its_checkpoint(tmp_path, irqbalance_stopped):
    """The kubelet's checkpoint alone (no runtime): ``bin/kubecpu housekeeping --loop`` reads it every second."""
    checkpoint, state = str(tmp_path / "cpu_manager_state"), str(tmp_path / "kubecpu" / "state")
    os.makedirs(os.path.dirname(state))
    before = affinities()

    def kubelet_writes(default, entries):
        with open(checkpoint + ".tmp", "wb") as handle:
            handle.write(checkpoint_file(default, entries))
        os.replace(checkpoint + ".tmp", checkpoint)

    kubelet_writes("0-5", {"pod-a": {"app": "6-7"}})
    log = open(str(tmp_path / "housekeeping.log"), "ab")
    proc = subprocess.Popen([KUBECPU, "housekeeping", "--loop", "--period", "1s", "--kubelet-state", checkpoint,
                             "--state", state, "--metrics-path", state + ".prom"], stdout=log, stderr=log)
    try:
        for default, entries, held in (("0-5", {"pod-a": {"app": "6-7"}}, {6, 7}),
                                       ("0-1,4-5", {"pod-a": {"app": "6-7"}, "pod-b": {"app": "2-3"}}, {2, 3, 6, 7}),
                                       ("0-7", {}, set())):
            kubelet_writes(default, entries)
            if held:
                wait_for(lambda held=held: os.path.exists(state + ".irq.json") and not on(
                    held, affinities(), set(record_of(state)["refused"])), 120, "interrupts off %s" % held)
                assert not default_affinity() & held
                print("kubelet holds %s: %s" % (sorted(held), {i: sorted(c) for i, c in affinities().items()}))
        wait_for(lambda: affinities() == before, 120, "every affinity back once the kubelet holds nothing")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log.close()


def test_annotated_pods_keep_interrupts_off_and_a_burstable_pod_bursts(tmp_path, lab21, irqbalance_stopped):
    """--irq-isolation annotated: only the annotated pod's CPUs lose their interrupts; --cpu-burst: a Burstable pod
    annotated cpu-burst.kubecpu.io gets cpu.max.burst, at most its quota. The annotations come over the CRI
    (PodSandboxStatus)."""
    before = affinities()
    agent = Pinner(lab21, str(tmp_path / "agent"), "agent", ["--reserved-cpus", "0", "--irq-isolation", "annotated",
                                                             "--cpu-burst"])
    agent.start()
    quiet = lab21.run_pod("quiet", "Guaranteed", guaranteed(2), annotations={"irq-load-balancing.kubecpu.io": "disable"})
    loud = lab21.run_pod("loud", "Guaranteed", guaranteed(2))
    burst = lab21.run_pod("bursty", "Burstable", [{"name": "app", "cpu": 250, "limit": 500}],
                          annotations={"cpu-burst.kubecpu.io": "80ms"})
    try:
        wait_for(lambda: {quiet["uid"], loud["uid"]} <= set(agent.entries()), 180, "both pods in the state")
        held_quiet = cpus(agent.entries()[quiet["uid"]]["app"])
        held_loud = cpus(agent.entries()[loud["uid"]]["app"])
        wait_for(lambda: os.path.exists(agent.state + ".irq.json") and not on(
            held_quiet, affinities(), set(record_of(agent.state)["refused"])), 120, "interrupts off %s" % held_quiet)
        assert cpus(record_of(agent.state)["kept_off"]) == held_quiet
        now = affinities()
        loud_irqs = on(held_loud, now)
        assert loud_irqs and all(before[irq] & held_loud <= now[irq] for irq in now)  # the other pod's CPUs: kept
        print("annotated %s: interrupts off it; not annotated %s: %d interrupts still may use it"
              % (sorted(held_quiet), sorted(held_loud), len(loud_irqs)))
        cid = burst["containers"]["app"]
        wait_for(lambda: lab21.cgroup_file(cid, "cpu.max.burst", "cpu") == "50000", 120,
                 "cpu.max.burst at the quota (80ms asked, 50000 µs quota)")
        print("Burstable cpu.max %s, cpu.max.burst %s" % (lab21.cgroup_file(cid, "cpu.max", "cpu"),
                                                          lab21.cgroup_file(cid, "cpu.max.burst", "cpu")))
    finally:
        for pod in (quiet, loud, burst):
            lab21.remove_pod(pod)
        agent.stop()
