"""Fail-closed pinning on real runtimes: ``bin/kubecpu hook`` installed as an OCI createRuntime hook through the CRI
runtime handler's ``base_runtime_spec`` (the spec ``ctr oci spec`` prints, with the hook), on containerd 1.6 (no NRI)
and containerd 1.7.24 with NRI enabled, the NRI plugin down and then up.

Each container's first command prints its ``Cpus_allowed_list``: what it ran its first instruction on. The hook runs
through a wrapper that logs what it answered and the state file's identity before and after (support/hook_spec.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cri_grpc import CRIRuntime
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import EXITED
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import hook_spec
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.waits import until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
FIRST_LINE = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep 100000"]


class HookedLab:
    """A containerd whose every container starts through the hook; the hook's state and log in ``directory``."""

    def __init__(self, lab_module, directory, python, binaries=None, nri=False, flags=()):
        self.dir = directory
        self.state = os.path.join(directory, "state")
        self.log = os.path.join(directory, "hook.log")
        lab_dir = os.path.join(directory, "lab")  # its socket known before it starts: the hook asks it for a pod
        os.makedirs(lab_dir)
        argv = [python, KUBECPU, "hook", "--state", self.state, "--reserved-cpus", "0", "--kubelet-state",
                os.path.join(directory, "no-kubelet-state"), "--runtime", "cri", "--runtime-endpoint",
                "unix://" + os.path.join(lab_dir, "containerd.sock"), *flags]
        base = hook_spec.base_spec(os.path.join(binaries, "ctr") if binaries else "ctr", python, argv, self.state,
                                   self.log, directory)
        self.lab = lab_module.Lab(lab_dir, binaries=binaries, nri=nri, base_spec=base)
        self.made = []

    def pod(self, name, qos, millicpu, **options):
        made = self.lab.run_pod(name, qos, [{"name": "app", "cpu": millicpu, "command": FIRST_LINE}], **options)
        self.made.append(made)
        return made

    def refused(self, name, qos, millicpu, **options):
        """The runtime's error for a pod whose container the hook refuses (the sandbox is removed again)."""
        before = {p.id for p in self.lab.cri.list_pods()}
        with pytest.raises(Exception) as failure:  # the CRI client's error, whatever its class
            self.lab.run_pod(name, qos, [{"name": "app", "cpu": millicpu, "command": FIRST_LINE}], **options)
        for item in self.lab.cri.list_pods():
            if item.id not in before:
                self.lab.cri.remove_pod_sandbox(item.id)
        return str(failure.value)

    def answers(self):
        return hook_spec.answers(self.log)

    def reconcile(self):
        """One pass of the agent on the same state (what the event-driven loop does next)."""
        done = subprocess.run([sys.executable, KUBECPU, "reconcile", "--runtime", "cri", "--runtime-endpoint",
                               self.lab.endpoint, "--state", self.state, "--reserved-cpus", "0", "--kubelet-state",
                               os.path.join(self.dir, "no-kubelet-state")], capture_output=True, text=True,
                              check=False, env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def clean(self):
        for item in self.made:
            self.lab.remove_pod(item)
        self.made = []
        for name in os.listdir(self.dir):
            if name.startswith("state"):
                subprocess.run(["rm", "-rf", os.path.join(self.dir, name)], check=True)
        if os.path.exists(self.log):
            os.unlink(self.log)


def hooked_lab(tmp_path_factory, python, nri):
    """containerd 1.6 (Debian's), or 1.7.24 with NRI enabled, every container started through the hook."""
    import lab as lab_module  # conftest put scripts/ on the path

    binaries = None
    if nri:
        binaries = subprocess.run(["bash", os.path.join(ROOT, "scripts", "containerd-nri.sh")], capture_output=True,
                                  text=True, check=True, timeout=600).stdout.strip().splitlines()[-1]
    return HookedLab(lab_module, str(tmp_path_factory.mktemp("hook")), python, binaries, nri)


@pytest.fixture(scope="module", params=["containerd 1.6", "containerd 1.7.24 NRI"])
def hooked(request, tmp_path_factory, bare_python):
    made = hooked_lab(tmp_path_factory, bare_python, request.param.endswith("NRI"))
    with made.lab:
        yield made


@pytest.fixture
def node(hooked):
    yield hooked
    hooked.clean()


@pytest.fixture
def nri_node(tmp_path_factory, bare_python):
    """containerd 1.7.24 with NRI, for the plugin's own pass before the hook (1.6 has no NRI)."""
    made = hooked_lab(tmp_path_factory, bare_python, True)
    with made.lab:
        yield made
        made.clean()


def first_line(pod, timeout=20):
    path = os.path.join(pod["sandbox"]["log_directory"], "app", "0.log")

    def line():
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                text = handle.readline()
            if text.endswith("\n"):
                return text.split(" F ", 1)[1].split(":", 1)[1].strip()
        return None
    return until(line, "%s printed its CPUs" % pod["name"], timeout)


def test_without_a_plugin_every_container_starts_on_the_cpus_it_may_use(node):
    """No plugin (containerd 1.6 has no NRI; on 1.7.24 none is registered): the Burstable container started first
    runs on every CPU; the Guaranteed one's first instruction is on its exclusive CPU, and the Burstable one is moved
    off it before that; a later Burstable one starts on the shared pool left."""
    web = node.pod("web", "Burstable", 250)
    assert first_line(web) == "0-1"  # nothing is exclusive yet
    app = node.pod("app", "Guaranteed", 1000)
    assert first_line(app) == "1"
    assert node.lab.allowed_cpus(web["containers"]["app"]) == "0"  # moved before app ran
    late = node.pod("late", "Burstable", 500)
    assert first_line(late) == "0"
    answers = [json.loads(a["out"]) for a in node.answers()]
    assert [a["action"] for a in answers] == ["passed", "allocated", "set"]
    assert answers[1]["cpus"] == "1" and answers[2]["cpus"] == "0"
    assert answers[1]["moved"] == 3  # web's container and the two pods' sandboxes (pause) were on CPU 1 too


def test_an_app_container_reuses_its_finished_init_containers_cpu(node):
    """Issue 62, finding 1, on the real runtime: 2 CPUs, CPU 0 reserved, a pod of init 1 CPU then app 1 CPU, charged
    1. The hook allocates the app container in its pod as containerd lists it, so it reuses the finished init
    container's CPU 1 (before, it was allocated alone, found no free CPU and was refused)."""
    pod = node.lab.run_pod("init-reuse", "Guaranteed", [{"name": "init", "cpu": 1000, "command": ["/bin/sh", "-c",
                                                                                                  "exit 0"]}])
    node.made.append(pod)
    runtime = CRIRuntime(node.lab.endpoint, 5.0)
    until(lambda: any(c.name == "init" and c.state == EXITED for c in runtime.list_containers()),
          "the init container exited", 30)
    pod["containers"]["app"] = node.lab.run_container(pod, {"name": "app", "cpu": 1000, "command": FIRST_LINE})
    assert first_line(pod) == "1"
    entries = json.load(open(node.state, encoding="utf-8"))["entries"][pod["uid"]]
    assert entries == {"init": "1", "app": "1"}
    assert [json.loads(a["out"])["action"] for a in node.answers()][-1] == "allocated"


def test_the_next_agent_pass_brings_the_runtimes_record_in_line(node):
    app = node.pod("app", "Guaranteed", 1000)
    assert first_line(app) == "1"
    cid = app["containers"]["app"]
    plan = node.reconcile()
    updates = [a for a in plan["actions"] if a["action"] == "update" and a["container_id"] == cid]
    assert [a["reason"] for a in updates] == ["the runtime's record of what the OCI hook set"]
    spec = node.lab.cri.status_info(cid)["runtimeSpec"]["linux"]["resources"]["cpu"]
    assert spec["cpus"] == "1" and os.listdir(node.state + ".hooked") == []
    assert [a for a in node.reconcile()["actions"] if a["action"] == "update"] == []  # once


def test_no_free_cpu_refuses_the_container_until_one_is_released(node):
    first = node.pod("first", "Guaranteed", 1000)
    assert first_line(first) == "1"
    error = node.refused("second", "Guaranteed", 1000)
    assert "not created: no exclusive CPUs" in error and "lab/second/app" in error, error
    node.lab.remove_pod(first)
    node.made.remove(first)
    node.reconcile()  # the loop's pass releases the removed pod's CPU
    again = node.pod("second", "Guaranteed", 1000)
    assert first_line(again) == "1"


def test_a_corrupt_state_refuses_creation_and_is_kept(node):
    node.pod("app", "Guaranteed", 1000)
    with open(node.state, "w", encoding="utf-8") as handle:
        handle.write('{"policyName": "static", "defaultCpuSet": "0", "checksum": 12')
    before = open(node.state, "rb").read()
    error = node.refused("web", "Burstable", 250)
    assert "not created" in error and node.state in error, error
    assert open(node.state, "rb").read() == before


def test_with_the_plugin_up_the_hook_only_checks(nri_node, bare_python, tmp_path):
    node = nri_node
    argv = [KUBECPU, "nri", "--socket", node.lab.nri_socket, "--state", node.state, "--reserved-cpus", "0",
            "--kubelet-state", os.path.join(node.dir, "no-kubelet-state"), "--metrics-path", str(tmp_path / "m.prom")]
    plugin = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, KUBECPU_PYTHON=bare_python))
    try:
        until(lambda: os.path.exists(tmp_path / "m.prom"), "the plugin registered and synchronized", 30)
        app = node.pod("app", "Guaranteed", 1000)
        assert first_line(app) == "1"
        answer = node.answers()[-1]
        assert json.loads(answer["out"])["action"] == "checked"  # the plugin had placed it
        assert answer["before"] is not None and answer["before"] == answer["after"]  # and the hook wrote nothing
        assert os.path.exists(node.state + ".hookview")  # the next checks read the view, not the checkpoint
        web = node.pod("web", "Burstable", 250)  # the plugin put it on the shared pool: checked from the view
        assert first_line(web) == "0" and json.loads(node.answers()[-1]["out"])["action"] == "checked"
    finally:
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(timeout=30)


@pytest.fixture(params=[("exclusive Burstable", ("--exclusive-burstable",)),
                        ("system partition", ("--system-partition", "--system-namespaces", "kube-system"))],
                ids=lambda param: param[0])
def hooked_24(request, tmp_path_factory, bare_python):
    """containerd 2.4.2 (its base runtime spec carries the hook) with one of issue 66's options on the hook."""
    import lab as lab_module  # conftest put scripts/ on the path
    from runtimes import runtime_binaries

    name, flags = request.param
    made = HookedLab(lab_module, str(tmp_path_factory.mktemp("hook-24")), bare_python,
                     runtime_binaries("containerd 2.4.2"), flags=flags)
    made.option = name
    with made.lab:
        yield made
        made.clean()


def test_issue_66s_options_hold_from_the_first_instruction_through_the_hook_on_containerd_2(hooked_24):
    """Fail-closed with issue 66's features 1 and 3 (docs/HOUSEKEEPING.md): the container a Burstable pod's
    ``cpu-exclusive.kubecpu.io`` names runs on CPU 1 from its first instruction and a named container of 1500m is not
    created, with the reason; with the system partition a kube-system pod runs on the reserved CPU 0 and any other
    shared container on CPU 1."""
    if hooked_24.option == "exclusive Burstable":
        named = hooked_24.pod("burst", "Burstable", 1000, annotations={"cpu-exclusive.kubecpu.io": "app"})
        assert first_line(named) == "1" and hooked_24.lab.cgroup_cpus(named, named["containers"]["app"]) == "1"
        said = hooked_24.refused("half", "Burstable", 1500, annotations={"cpu-exclusive.kubecpu.io": "app"})
        assert "its CPU request 1500m is not a whole number of CPUs" in said, (said, hooked_24.answers())
    else:
        system = hooked_24.pod("node-agent", "Burstable", 100, namespace="kube-system")
        web = hooked_24.pod("web", "Burstable", 250)
        assert (first_line(system), first_line(web)) == ("0", "1"), hooked_24.answers()
