"""Several Guaranteed containers pinned at once on a real 2-socket SMT NUMA node (cgroup v2), by the agent (woken by
cgroup events and the CRI event stream, containerd 2.1.9) and by the NRI plugin (containerd 1.7.24), under both cgroup drivers: whole cores
with full-pcpus-only, 2 + 2 over the NUMA nodes with distribute-cpus-across-numa, memory nodes with --align-memory,
align-by-socket, the Topology Manager's single-numa-node refusal, strict reservation keeping shared containers off
the reserved CPUs. Every figure is read back from /proc (the container's first process) and from cgroupfs.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = socket 0 = CPUs 0-3, node 1 = socket 1 = CPUs 4-7."""

from __future__ import annotations

import os

import pytest
from conftest import ALL, NUMA, SHARED, SIBLINGS, Pinner, cpus, guaranteed, proc_status, settle, wait_for


@pytest.fixture
def pods():
    made = []

    def make(lab, name, qos, containers):
        made.append((lab, lab.run_pod(name, qos, containers)))
        return made[-1][1]

    yield make
    for lab, pod in made:
        lab.remove_pod(pod)


@pytest.fixture
def pinner(tmp_path):
    running = []

    def start(lab, mode, *flags):
        running.append(Pinner(lab, str(tmp_path / ("%s-%d" % (mode, len(running)))), mode, flags))
        running[-1].start()
        return running[-1]

    yield start
    for item in running:
        item.stop()


def whole_cores(cpu_set):
    return all(SIBLINGS[cpu] in cpu_set for cpu in cpu_set)


# One agent, four options: reserved CPUs 0 and 4 leave three free CPUs on each NUMA node and one whole core each.
COMBINED = ["--reserved-cpus", "0,4", "--option", "full-pcpus-only", "--option", "distribute-cpus-across-numa",
            "--option", "strict-cpu-reservation", "--align-memory"]


def _combined(lab, mode, pods, pinner):
    """Four CPUs as whole cores over both NUMA nodes (2 + 2: no node has four free), their memory on both nodes; one
    CPU refused by full-pcpus-only (it stays shared); shared containers off the reserved and the exclusive CPUs."""
    running = pinner(lab, mode, *COMBINED)
    spread = pods(lab, "spread", "Guaranteed", guaranteed(4))
    odd = pods(lab, "odd", "Guaranteed", guaranteed(1))
    web = pods(lab, "web", "Burstable", SHARED)
    wait_for(lambda: spread["uid"] in running.entries(), 180, "the 4-CPU pod in the state")
    four = settle(lab, spread, cpus(running.entries()[spread["uid"]]["app"]))
    assert four == {2, 3, 6, 7} and whole_cores(four) and sorted(NUMA[c] for c in four) == [0, 0, 1, 1]
    assert proc_status(lab, spread["containers"]["app"], "Mems_allowed_list") == "0-1"
    for pod in (web, odd):  # odd: refused (SMT alignment), so shared; neither on 0, 4 (strict) nor on the four
        settle(lab, pod, {1, 5})
        assert proc_status(lab, pod["containers"]["app"], "Mems_allowed_list") == "0-1"
    assert odd["uid"] not in running.entries()


def test_the_agent_with_four_options_on_containerd_2_1_systemd_driver(lab21, pods, pinner):
    _combined(lab21, "agent", pods, pinner)


def test_the_agent_with_four_options_on_containerd_1_7_cgroupfs_driver(lab17, pods, pinner):
    _combined(lab17, "agent", pods, pinner)


def test_align_by_socket_and_the_single_numa_node_refusal(lab17, pods, pinner):
    running = pinner(lab17, "agent", "--reserved-cpus", "0", "--option", "align-by-socket",
                     "--topology-manager-policy", "single-numa-node")
    three = pods(lab17, "three", "Guaranteed", guaranteed(3))
    five = pods(lab17, "five", "Guaranteed", guaranteed(5))  # no NUMA node holds five CPUs
    wait_for(lambda: three["uid"] in running.entries(), 180, "the 3-CPU pod in the state")
    got = settle(lab17, three, cpus(running.entries()[three["uid"]]["app"]))
    assert len({NUMA[c] for c in got}) == 1 and 0 not in got  # one socket (here one NUMA node)
    settle(lab17, five, ALL - got)  # refused: it runs in the shared pool
    assert five["uid"] not in running.entries()
    # the kubelet's text, in what this agent logged (a pass writes the cpusets first, then its log lines)
    wait_for(lambda: "Topology locality" in running.output(), 120, "the refusal's text in the agent's log")


def test_the_plugin_pins_several_containers_before_their_first_instruction(lab17, pods, pinner):
    """Three 2-CPU containers created at once, each printing its Cpus_allowed_list as its first act: whole cores of
    their own, from the plugin's answer to CreateContainer (before they ran); a shared one prints the rest."""
    running = pinner(lab17, "nri", "--reserved-cpus", "0-1", "--option", "full-pcpus-only")
    show = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; sleep 3600"]
    made = [pods(lab17, "first-%d" % n, "Guaranteed", guaranteed(2, show)) for n in range(3)]
    shared = pods(lab17, "web", "Burstable", [dict(SHARED[0], command=show)])
    wait_for(lambda: all(p["uid"] in running.entries() for p in made), 180, "three pods in the state")
    seen = set()
    for pod in made:
        held = cpus(running.entries()[pod["uid"]]["app"])
        line = wait_for(lambda pod=pod: _first_line(pod), 120, "%s printed its first line" % pod["name"])
        assert cpus(line) == held and len(held) == 2 and whole_cores(held) and not held & (seen | {0, 1})
        seen |= held
        settle(lab17, pod, held)
    assert cpus(wait_for(lambda: _first_line(shared), 120, "the shared pod printed")) == ALL - seen


def _first_line(pod):
    path = os.path.join(pod["sandbox"]["log_directory"], "app", "0.log")
    try:
        with open(path, encoding="utf-8") as handle:
            line = handle.readline()
    except OSError:
        return None
    if not line.endswith("\n") or "Cpus_allowed_list" not in line:
        return None
    return line.split(" F ", 1)[1].split(":", 1)[1].strip()  # <time> stdout F Cpus_allowed_list:\t<cpus>
