"""bin/kubecpu nri against real runtimes: Debian 13's containerd 1.7.24 with NRI enabled, Debian unstable's 2.1.9 and
2.4.2 built from its module, where NRI is on by default, and CRI-O 1.36.3 (scripts/runtimes.sh); cgroup v1, cgroupfs
driver. A container's command prints its Cpus_allowed_list before anything else, so its log's first line is what it
saw from its first instruction.

These machines have 2 CPUs: one reserved, CPU 1 is the only one that can become exclusive.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from runtimes import runtime_lab
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.waits import (
    EVENT_PASS_WITHIN, EVENT_TEST_PERIOD, metric, until)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
FIRST_LINE = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep 100000"]


@pytest.fixture(scope="module", params=["containerd 1.7.24", "containerd 2.1.9", "containerd 2.4.2", "cri-o 1.36.3"])
def nri_lab(request):
    """A runtime with NRI: containerd 1.7 with it enabled; containerd 2 (Debian's 2.1.9, 2.4.2 built), where it is on
    by default, told only where its socket goes; CRI-O with it enabled."""
    import lab as lab_module

    problems = lab_module.missing_requirements()
    if problems:
        if os.environ.get("CI"):
            pytest.fail("the NRI tests need a real containerd: " + "; ".join(problems))
        pytest.skip("no real containerd here: " + "; ".join(problems))
    with runtime_lab(request.param, nri=True) as running:
        yield running


class Plugin:
    """bin/kubecpu nri as a process, its log in a file."""

    def __init__(self, lab, directory, python):
        self.lab = lab
        self.python = python  # a bare python3: the plugin needs no package
        self.state = os.path.join(directory, "kubecpu", "state")
        os.makedirs(os.path.dirname(self.state), exist_ok=True)  # kubecpu makes no directory it was not asked for
        self.log_path = os.path.join(directory, "plugin.log")
        self.proc = None
        self.flags = []  # more of its options

    def start(self):
        argv = [KUBECPU, "nri", "--socket", self.lab.nri_socket, "--state", self.state, "--num-reserved", "1",
                "--kubelet-state", self.state + ".kubelet", "--metrics-path", self.state + ".prom", *self.flags]
        log = open(self.log_path, "a")  # the process keeps it open
        with contextlib.suppress(FileNotFoundError):  # a restarted plugin counts its passes from zero again
            os.unlink(self.state + ".prom")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=dict(os.environ, KUBECPU_PYTHON=self.python))
        self.until(lambda: self.passes() > 0, "registered and synchronized (a pass in its metrics)")

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
        self.proc = None

    def events(self):
        with open(self.log_path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.startswith("{")]

    def passes(self):
        """Its passes so far, as its metrics file says (written once each reply is sent)."""
        return metric(self.state + ".prom", "kubecpu_reconcile_passes_total{")

    def until(self, condition, what, timeout=20):
        """A condition on the node, not a log line, with a deadline; the plugin's log when it does not come."""
        try:
            until(condition, what, timeout)
        except AssertionError as exc:
            raise AssertionError("%s; the plugin's log:\n%s" % (exc, open(self.log_path).read()[-4000:])) from None

    def entries(self):
        with open(self.state, encoding="utf-8") as handle:
            return json.load(handle).get("entries", {})


@pytest.fixture
def plugin(nri_lab, tmp_path, bare_python):
    running = Plugin(nri_lab, str(tmp_path), bare_python)
    running.start()
    made = []

    def pod(*args, **kwargs):
        made.append(nri_lab.run_pod(*args, **kwargs))
        return made[-1]
    running.pod = pod
    yield running
    for item in made:
        nri_lab.remove_pod(item)
    running.stop()


def first_line(pod, name, timeout=10):
    path = os.path.join(pod["sandbox"]["log_directory"], name, "0.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                line = handle.readline()
            if line.endswith("\n"):
                return line.split(" F ", 1)[1].split(":", 1)[1].strip()
        time.sleep(0.05)
    raise AssertionError("%s printed nothing" % name)


def test_a_guaranteed_container_runs_on_its_cpus_from_its_first_instruction(nri_lab, plugin):
    guaranteed = plugin.pod("fwd", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    shared = plugin.pod("api", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
    assert first_line(guaranteed, "main") == "1"  # the exclusive CPU, before any update could have come
    assert first_line(shared, "app") == "0"  # the shared pool: CPU 1 was already taken
    assert nri_lab.cgroup_cpus(guaranteed, guaranteed["containers"]["main"]) == "1"
    assert plugin.entries() == {guaranteed["uid"]: {"main": "1"}}
    created = [e for e in plugin.events() if e["msg"] == "create"]
    assert [a["action"] for a in created[0]["actions"]] == ["allocate", "update"]


def test_removal_releases_and_the_shared_pool_grows_for_the_rest(nri_lab, plugin):
    shared = plugin.pod("api", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
    guaranteed = plugin.pod("fwd", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    assert first_line(shared, "app") == "0-1" and first_line(guaranteed, "main") == "1"
    assert nri_lab.cgroup_cpus(shared, shared["containers"]["app"]) == "0"  # shrunk in the same reply
    nri_lab.remove_pod(guaranteed)
    plugin.until(lambda: nri_lab.cgroup_cpus(shared, shared["containers"]["app"]) == "0-1",
                 "the shared container back on 0-1", timeout=10)  # pushed unsolicited
    assert plugin.entries() == {}


def test_restarted_plugin_keeps_its_state_and_synchronize_adopts_what_started_meanwhile(nri_lab, plugin):
    first = plugin.pod("one", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    assert first_line(first, "main") == "1"
    plugin.stop(signal.SIGKILL)
    nri_lab.remove_pod(first)  # the plugin does not see this one go
    later = plugin.pod("two", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    assert first_line(later, "main") == "0-1"  # no plugin: created unpinned
    plugin.start()
    plugin.until(lambda: nri_lab.cgroup_cpus(later, later["containers"]["main"]) == "1",
                 "the container started meanwhile pinned")  # adopted on synchronize, applied by the runtime
    assert plugin.entries() == {later["uid"]: {"main": "1"}}  # the gone pod's CPU released


def test_the_plugin_reconnects_when_the_runtime_restarts(nri_lab, plugin):
    passes = plugin.passes()
    nri_lab.stop_daemon()
    nri_lab.start_daemon()
    plugin.until(lambda: plugin.passes() > passes, "registered again (synchronized: a pass)", timeout=30)
    pod = plugin.pod("after", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    assert first_line(pod, "main") == "1"


def test_a_reply_after_the_runtimes_timeout_leaves_no_cpu_held_twice(nri_lab, plugin):
    """(The fail-closed hook 1, the NRI-late case.) The plugin is stopped while containerd waits for its answer to a
    Guaranteed container's CreateContainer; containerd gives up after its request timeout (2 s) and goes on. The
    plugin, continued, handles the request it got and saves the entry; its answer is too late (containerd 1.7 has
    closed the connection; a runtime that keeps it and sends its deadline gets no answer at all). Then, whether
    containerd created the container or failed it (and the kubelet's retry creates it again), the container ends on
    its exclusive CPU and the shared one off it: no CPU stays held by both."""
    spec = {"name": "main", "cpu": 1000, "command": FIRST_LINE}
    shared = plugin.pod("api", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
    late = plugin.pod("late", "Guaranteed", [])  # the sandbox while the plugin answers
    created = {}

    def create():
        try:
            created["cid"] = nri_lab.run_container(late, spec)
        except Exception as exc:  # pylint: disable=broad-except  # what containerd said is looked at below
            created["error"] = exc

    plugin.proc.send_signal(signal.SIGSTOP)
    try:
        worker = threading.Thread(target=create)
        worker.start()
        worker.join(timeout=60)  # containerd's answer: it waits 2 s for the plugin, then goes on
        assert not worker.is_alive(), "containerd still waits for the stopped plugin after 60 s"
    finally:
        plugin.proc.send_signal(signal.SIGCONT)
    plugin.until(lambda: late["uid"] in plugin.entries(), "the late request handled: its entry saved", timeout=30)
    if "cid" not in created:  # containerd failed the creation: the kubelet creates the container again
        created["cid"] = nri_lab.run_container(late, spec, attempt=1)
    late["containers"]["main"] = created["cid"]
    plugin.until(lambda: (nri_lab.cgroup_cpus(late, created["cid"]), nri_lab.cgroup_cpus(
        shared, shared["containers"]["app"])) == ("1", "0"), "the late container on CPU 1, the shared one off it",
        timeout=30)
    assert plugin.entries() == {late["uid"]: {"main": "1"}}
    # containerd 1.7 closes a plugin's connection when it does not answer in time (and creates the container): the
    # plugin's reply finds the pipe broken, it registers again, and its synchronize puts the container on its CPU
    assert plugin.proc.poll() is None
    assert [e["msg"] for e in plugin.events()].count("registered with the runtime") >= 2 or any(
        "answered after the runtime's request timeout" in e["msg"] for e in plugin.events())


def allowed(nri_lab, cid, want, timeout=5):
    deadline = time.monotonic() + timeout
    while nri_lab.allowed_cpus(cid) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return nri_lab.allowed_cpus(cid)


def test_in_place_resize_through_update_container_resources(nri_lab, plugin):
    """The kubelet's resize (UpdateContainerResources, same container) from the test itself: up (infeasible on two
    CPUs: kept, reported), to a fractional request (back to the shared pool) and back (exclusive again)."""
    pod = plugin.pod("resized", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
    cid = pod["containers"]["main"]
    assert first_line(pod, "main") == "1"
    nri_lab.cri.update(cid, cpu_quota=200000, cpu_period=100000)  # 2 CPUs: only CPU 1 can be exclusive
    plugin.until(lambda: "kubecpu_resize_errors_total 1" in open(plugin.state + ".prom").read(), "the resize counted")
    assert allowed(nri_lab, cid, "1") == "1" and plugin.entries() == {pod["uid"]: {"main": "1"}}
    assert any(e["error"].startswith("resize infeasible") for event in plugin.events() if event["msg"] == "update"
               for e in event["errors"])
    nri_lab.cri.update(cid, cpu_quota=50000, cpu_period=100000)  # 500m: no exclusive CPUs
    plugin.until(lambda: plugin.entries() == {}, "released by the resize")
    assert allowed(nri_lab, cid, "0-1") == "0-1"
    nri_lab.cri.update(cid, cpu_quota=100000, cpu_period=100000)  # 1 CPU again
    plugin.until(lambda: plugin.entries() == {pod["uid"]: {"main": "1"}}, "pinned again by the resize")
    assert allowed(nri_lab, cid, "1") == "1"
    with open(plugin.state + ".prom", encoding="utf-8") as handle:
        assert "kubecpu_resize_errors_total 1" in handle.read()


def test_a_burstable_containers_exclusive_cpus_from_its_first_instruction_resized_and_refused(nri_lab, plugin):
    """Issue 66, feature 1, at creation: the container ``cpu-exclusive.kubecpu.io`` names runs on CPU 1 from its first
    instruction, its unnamed helper on the shared CPU 0; resized in place to a fractional request it goes back to the
    shared pool; a named container whose request is not whole CPUs is not created, the runtime saying why."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError

    plugin.stop()
    plugin.flags = ["--exclusive-burstable"]
    plugin.start()
    named = {"cpu-exclusive.kubecpu.io": "app"}
    pod = plugin.pod("burst", "Burstable", [{"name": "app", "cpu": 1000, "limit": 1000, "command": FIRST_LINE},
                                            {"name": "side", "cpu": 100, "command": FIRST_LINE}], annotations=named)
    assert (first_line(pod, "app"), first_line(pod, "side")) == ("1", "0")
    assert plugin.entries() == {pod["uid"]: {"app": "1"}}
    nri_lab.cri.resize(pod["containers"]["app"], 500, 500)  # the kubelet's in-place resize: no whole CPU any more
    plugin.until(lambda: plugin.entries() == {}, "released by the resize")
    assert allowed(nri_lab, pod["containers"]["app"], "0-1") == "0-1"
    with pytest.raises(ContainerRuntimeError) as refused:
        plugin.pod("half", "Burstable", [{"name": "app", "cpu": 1500, "limit": 1500}], annotations=named)
    assert "its CPU request 1500m is not a whole number of CPUs" in str(refused.value)


def test_the_system_partition_from_the_first_instruction(nri_lab, plugin):
    """Issue 66, feature 3, at creation: a kube-system pod runs on the reserved CPU 0 from its first instruction, and
    every other shared container off it."""
    plugin.stop()
    plugin.flags = ["--system-partition", "--system-namespaces", "kube-system"]
    plugin.start()
    system = plugin.pod("node-agent", "Burstable", [{"name": "app", "cpu": 100, "command": FIRST_LINE}],
                        namespace="kube-system")
    web = plugin.pod("web", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
    assert (first_line(system, "app"), first_line(web, "app")) == ("0", "1")


def test_the_agent_also_wakes_on_the_cri_event_stream_of_containerd_1_7(nri_lab, tmp_path):
    """The loop agent over CRI against containerd 1.7, which streams container events (1.6 does not): a new pod
    pinned within EVENT_PASS_WITHIN seconds of its start, its period 60 s."""
    state = tmp_path / "state"
    argv = [KUBECPU, "reconcile", "--loop", "--period", EVENT_TEST_PERIOD, "--runtime", "cri", "--runtime-endpoint",
            nri_lab.endpoint, "--state", str(state), "--num-reserved", "1", "--kubelet-state", str(state) + ".k",
            "--metrics-path", str(tmp_path / "kubecpu.prom")]
    agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
    pod = None
    try:
        until(lambda: metric(tmp_path / "kubecpu.prom", "kubecpu_reconcile_passes_total{") >= 1, "the first pass")
        pod = nri_lab.run_pod("evented", "Guaranteed", [{"name": "main", "cpu": 1000}])
        started = time.monotonic()
        while (nri_lab.cgroup_cpus(pod, pod["containers"]["main"]) != "1"
               and time.monotonic() - started < 2 * EVENT_PASS_WITHIN):
            time.sleep(0.01)
        assert time.monotonic() - started < EVENT_PASS_WITHIN
    finally:
        if pod is not None:
            nri_lab.remove_pod(pod)
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    first = json.loads(err.splitlines()[0])
    assert first["msg"] == "agent started" and first["woken_by"] == ["CgroupWatch", "EventStream"]


NRI_CHECK = """---
- name: The agent role's check of mode nri
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Mode nri takes the runtime as it is
      ansible.builtin.include_role:
        name: kubecpu.cpu_manager.cpu_manager_agent
        tasks_from: nri_check.yml
"""


def test_the_agent_roles_nri_mode_changes_no_configuration_and_restarts_nothing(nri_lab, tmp_path):
    """Where NRI is on (containerd 2: by default), the role's mode nri only looks for the socket: containerd's
    configuration stays byte for byte and containerd keeps running (the same process); a missing socket is refused
    saying where to look."""
    from test_modules import collections_path

    config = nri_lab.config_path
    before, pid = open(config, "rb").read(), nri_lab.proc.pid
    playbook = tmp_path / "nri.yml"
    playbook.write_text(NRI_CHECK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable)

    def run(socket):
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                str(playbook), "-e", json.dumps({"cpu_manager_agent_nri_socket": socket})]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)

    proc = run(nri_lab.nri_socket)
    assert proc.returncode == 0 and "changed=0" in proc.stdout, proc.stdout[-3000:]
    assert open(config, "rb").read() == before and nri_lab.proc.pid == pid and nri_lab.proc.poll() is None
    refused = run(str(tmp_path / "no-nri.sock"))
    assert refused.returncode != 0 and "NRI disabled" in refused.stdout and "on by default" in refused.stdout


STRICTEST_VALIDATOR = {  # NRI's default validator (containerd 2.1.9 has none), every rejection on, kubecpu required
    "containerd 2.4.2": """[plugins."io.containerd.nri.v1.nri".default_validator]
  enable = true
  reject_oci_hook_adjustment = true
  reject_runtime_default_seccomp_adjustment = true
  reject_unconfined_seccomp_adjustment = true
  reject_custom_seccomp_adjustment = true
  reject_namespace_adjustment = true
  reject_sysctl_adjustment = true
  required_plugins = ['kubecpu']
""",
    "cri-o 1.36.3": """[crio.nri.default_validator]
nri_enable_default_validator = true
nri_validator_reject_oci_hook_adjustment = true
nri_validator_reject_runtime_default_seccomp_adjustment = true
nri_validator_reject_unconfined_seccomp_adjustment = true
nri_validator_reject_custom_seccomp_adjustment = true
nri_validator_reject_namespace_adjustment = true
nri_validator_required_plugins = ["kubecpu"]
"""}


@pytest.mark.parametrize("name", sorted(STRICTEST_VALIDATOR))
def test_the_default_validator_at_its_strictest_takes_what_the_plugin_does(name, tmp_path, bare_python):
    """NRI's default validator with every rejection the runtime has on (CRI-O 1.36.3 has no sysctl rejection) and
    kubecpu a required plugin: the plugin's adjustments pass (a Guaranteed container on its CPU from its first
    instruction); and with the plugin stopped, the runtime refuses to create a container at all - NRI failing
    closed."""
    runtime = runtime_lab(name, str(tmp_path / "lab"), nri=True)
    runtime.config = runtime.config_text() + STRICTEST_VALIDATOR[name]
    with runtime:
        plugin = Plugin(runtime, str(tmp_path), bare_python)
        plugin.start()
        try:
            pod = runtime.run_pod("fwd", "Guaranteed", [{"name": "main", "cpu": 1000, "command": FIRST_LINE}])
            assert first_line(pod, "main") == "1" and plugin.entries() == {pod["uid"]: {"main": "1"}}
        finally:
            plugin.stop()
        with pytest.raises(Exception) as refused:
            runtime.run_pod("unguarded", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
        assert 'required plugin "kubecpu" not present' in str(refused.value)
