"""Fail-closed pinning beside a real kubelet whose policy is none (kubelet 1.37.2, standalone, on containerd 2.1.9
with the systemd cgroup driver): the kubelet does not pin, kubecpu does. Its OCI hook is in the runtime's base spec
(``bin/kubecpu hook``, through a wrapper that records each answer: tests/unit/support/hook_spec.py) and its agent
runs beside it (``reconcile --loop``, woken by the CRI event stream), on one state file.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7; CPU 0 reserved."""

from __future__ import annotations

import os

from conftest import CONTAINERD_2, KUBECPU, Pinner, cpus, lab_module, local_copy
from kubelets import START_TIMEOUT, Kubelet, all_running, planned, remove_static_pods, wait_on

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import hook_spec
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired

MINOR = "1.37"
FIRST_LINE = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep infinity"]
PYTHON = "/usr/bin/python3"  # the node's own, as the agent role installs the hook
REFUSED = "no exclusive CPUs"  # the hook's words when every exclusive CPU is taken
# The kubelet's longest wait before it starts a refused container again (its back-off doubles from 10 s up to 300 s by
# default): a node that relies on the hook's refusals wants its retries soon, and the test must not depend on how many
# refusals the guest's load allowed before CPUs were free (the next try after 5 refusals would come 160 s later)
RETRY = {"maxContainerRestartPeriod": "10s"}


def test_a_container_the_hook_refuses_is_retried_by_the_kubelet_and_runs_once_cpus_are_free(
        kubelet_binaries, tmp_path):
    """Static pods of 4 and 2 CPUs leave one exclusive CPU (CPU 0 is kubecpu's reserved one; the kubelet reserves
    none and admits pods up to its 8 CPUs); each container's first instruction runs on its own exclusive CPUs. A
    third pod of 2 CPUs: the kubelet admits it, the hook refuses its container (no exclusive CPUs), and the kubelet,
    which knows nothing of CPUs under policy none, tries again and again. The pod of 4 CPUs goes; the agent gives its
    CPUs back, and the kubelet's next try runs the container on 2 free ones. No container ever ran on
    another's exclusive CPUs: every first instruction, and every cpuset at the end, keeps to its own. The kubelet's
    own checkpoint stays that of policy none."""
    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir()
    agent_dir = tmp_path / "kubecpu"
    agent_dir.mkdir()
    state, log = str(agent_dir / "state"), str(agent_dir / "hook.log")
    checkpoint = str(kubelet_dir / "root" / "cpu_manager_state")
    binaries = local_copy(CONTAINERD_2)
    argv = [PYTHON, KUBECPU, "hook", "--state", state, "--reserved-cpus", "0", "--kubelet-state", checkpoint]
    base = hook_spec.base_spec(os.path.join(binaries, "ctr"), PYTHON, argv, state, log, str(agent_dir), timeout=120)
    lab = lab_module.Lab(binaries=binaries, systemd=True, slow=True, base_spec=base)
    with lab:
        agent = Pinner(lab, str(agent_dir), "agent", ["--reserved-cpus", "0", "--kubelet-state", checkpoint])
        agent.start()
        _change, config = planned(Desired(policy="none"), MINOR, tmp_path, lab)
        kubelet = Kubelet(kubelet_binaries[MINOR], str(kubelet_dir), dict(config, crashLoopBackOff=RETRY))
        kubelet.start()
        try:
            kubelet.up(MINOR)
            first = {}
            for order, (name, count) in enumerate((("big", 4), ("mid", 2))):
                uid = kubelet.add(name, count, order, command=FIRST_LINE)
                first[name] = first_cpus(kubelet, uid, name)
                assert len(first[name]) == count and 0 not in first[name], first
            assert not first["big"] & first["mid"]

            late = kubelet.add("late", 2, 2, command=FIRST_LINE)
            refusals = wait_on(lambda: [a for a in hook_spec.answers(log) if a["rc"] != 0 and REFUSED in a["err"]],
                               START_TIMEOUT, "the hook refusing late's container")
            assert all_running(lab, [late]) is None
            print("the hook refused late: %s" % refusals[0]["err"].strip())
            kubelet.remove("big", 0)
            try:
                first["late"] = first_cpus(kubelet, late, "late, once big is gone,")
            except AssertionError:  # what the guest's temporary directory holds goes with the guest: say it here
                print("the hook's last answers: %s" % hook_spec.answers(log)[-5:])
                print("the agent's state: %s" % (open(state, encoding="utf-8").read() if os.path.exists(state)
                                                 else "none"))
                print("the kubelet's log, its end:\n%s" % kubelet.log(8000))
                raise
            tries = len([a for a in hook_spec.answers(log) if a["rc"] != 0 and REFUSED in a["err"]])
            print("first instructions: %s; late refused %d times" % (
                {name: sorted(c) for name, c in first.items()}, tries))
            assert len(first["late"]) == 2 and 0 not in first["late"] and not first["late"] & first["mid"]
            running = wait_on(lambda: all_running(lab, ["mid-uid", late]), START_TIMEOUT,
                              "the runtime saying late runs")  # it may print before containerd says so
            for uid, name in (("mid-uid", "mid"), (late, "late")):
                assert cpus(lab.allowed_cpus(running[uid])) == first[name]
            assert kubelet.state().get("policyName") == "none" and not kubelet.state().get("entries")
        finally:
            kubelet.stop()
            remove_static_pods(lab)
            agent.stop()


def first_cpus(kubelet, uid, what):
    """The CPUs the pod's container ran its first instruction on (the line FIRST_LINE prints)."""
    line = wait_on(lambda: kubelet.first_line(uid), START_TIMEOUT, "%s printing its CPUs" % what)
    return cpus(line.split(":", 1)[1].strip())
