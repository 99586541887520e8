"""Per-pod power on a real kernel (docs/HOUSEKEEPING.md, section 5): the guest's kernel exposes each CPU's
``pm_qos_resume_latency_us``, so the C-state limit is read back from sysfs before, while and after a pod holds its
CPUs, and after the agent is killed. The guest's CPUs have no cpufreq driver (QEMU): a governor asked is reported per
CPU there, and proven on a modelled tree (tests/unit/plugins/module_utils/node/test_power.py).

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import os

from conftest import Pinner, cpus, guaranteed, kubecpu, node_flags, wait_for

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet

CPU_DIR = "/sys/devices/system/cpu"


def latency(cpu):
    with open(os.path.join(CPU_DIR, "cpu%d" % cpu, "power", "pm_qos_resume_latency_us"), encoding="ascii") as handle:
        return handle.read().strip()


def latencies():
    return {cpu: latency(cpu) for cpu in range(8)}


def governor(cpu):
    """The CPU's cpufreq governor, or None where it has no cpufreq."""
    try:
        with open(os.path.join(CPU_DIR, "cpu%d" % cpu, "cpufreq", "scaling_governor"), encoding="ascii") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return None


def test_the_agent_limits_an_annotated_pods_c_states_and_gives_them_back(tmp_path, lab21):
    before = latencies()
    directory = str(tmp_path / "agent")
    agent = Pinner(lab21, directory, "agent", ["--reserved-cpus", "0", "--cpu-power"])
    agent.start()
    calm = lab21.run_pod("calm", "Guaranteed", guaranteed(2),
                         annotations={"cpu-c-states.kubecpu.io": "max_latency:20"})
    still = lab21.run_pod("still", "Guaranteed", guaranteed(2),
                          annotations={"cpu-c-states.crio.io": "disable", "cpu-freq-governor.crio.io": "performance"})
    web = lab21.run_pod("web", "Burstable", [{"name": "app", "cpu": 250}],
                        annotations={"cpu-c-states.kubecpu.io": "disable"})
    restarted = None
    try:
        wait_for(lambda: {calm["uid"], still["uid"]} <= set(agent.entries()), 180, "both pods in the state")
        held_calm = cpus(agent.entries()[calm["uid"]]["app"])
        held_still = cpus(agent.entries()[still["uid"]]["app"])
        want = dict(before)
        want.update({cpu: "20" for cpu in held_calm})
        want.update({cpu: "n/a" for cpu in held_still})
        wait_for(lambda: latencies() == want, 120, "pm_qos_resume_latency_us of %s at 20 and of %s at n/a (have %s)"
                 % (sorted(held_calm), sorted(held_still), latencies()))
        print("before %s; during (calm %s, still %s) %s" % (before, sorted(held_calm), sorted(held_still),
                                                            latencies()))
        assert os.path.exists(agent.state + ".power.json")
        wait_for(lambda: agent.metric("kubecpu_cpu_power_cpus") == 4, 60, "the power gauge at 4 CPUs")
        plan = kubecpu("reconcile", "--check", "--reserved-cpus", "0", "--cpu-power", *node_flags(lab21, agent.state))
        errors = [error["error"] for error in plan["errors"]]
        assert plan["power"]["cpus"] == str(CPUSet(held_calm | held_still)) and plan["power"]["updated"] == []
        assert ("pod lab/web (Burstable) is annotated cpu-c-states.kubecpu.io: disable but holds no exclusive CPUs "
                "(only the containers of a Guaranteed pod that ask whole CPUs get them): no power setting applied"
                in errors)
        for cpu in held_still:
            if governor(cpu) is None:  # this guest: no frequency driver, said per CPU
                assert any(error.startswith("cpu%d has no cpufreq" % cpu) for error in errors), errors
            else:
                assert governor(cpu) == "performance"
        print("check: power %s; errors %s" % (plan["power"], errors))
        lab21.remove_pod(calm)
        wait_for(lambda: calm["uid"] not in agent.entries(), 180, "calm released")
        wait_for(lambda: {c: latency(c) for c in held_calm} == {c: before[c] for c in held_calm}, 60,
                 "calm's CPUs given back")
        print("calm released: %s" % latencies())
        # killed while still's CPUs are set, the pod removed meanwhile, the option off at the restart: the record
        # left by the killed agent gives every file back
        agent.proc.kill()
        agent.proc.wait(timeout=60)
        agent.proc = None
        lab21.remove_pod(still)
        assert {c: latency(c) for c in held_still} == {c: "n/a" for c in held_still}
        restarted = Pinner(lab21, directory, "agent", ["--reserved-cpus", "0"])
        restarted.start()
        wait_for(lambda: latencies() == before, 120, "every CPU's limit as before (have %s)" % latencies())
        wait_for(lambda: not os.path.exists(agent.state + ".power.json"), 60, "the record removed")
        print("after the kill and the restart without --cpu-power: %s" % latencies())
    finally:
        for pod in (calm, still, web):
            lab21.remove_pod(pod)
        agent.stop()
        if restarted is not None:
            restarted.stop()
