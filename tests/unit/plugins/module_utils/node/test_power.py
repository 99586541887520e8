"""Per-pod power (docs/HOUSEKEEPING.md, section 5): the C-state limit and the cpufreq governor of an annotated pod's
exclusive CPUs, the originals recorded before the first write and given back on release, when the annotation goes,
when the option is off and after a crash; on a sysfs tree modelled on Linux's (tests/unit/support/fake_sysfs.py)."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, CPUPowerError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions, NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import kubelet_housekeeping
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.metrics import Metrics
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.power import (
    MAX_LATENCY_US, CpuPower, PowerRecord, cpu_power, latency_value, pod_powers, power_in_pass, record_path)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cpu_power import CpuPowerFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (
    CREATED, RUNNING, ContainerInfo, ListedContainer, kubecpu_annotations)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

CPUS = range(8)
LATENCY = "cpu%d/power/pm_qos_resume_latency_us"
GOVERNOR = "cpufreq/policy%d/scaling_governor"


def machine(tmp_path, **kwargs):
    """A machine's CPU directory: 8 CPUs, intel_pstate by default (performance, powersave; powersave on)."""
    root = fake_sysfs.power(str(tmp_path / "machine"), CPUS, **kwargs)
    return os.path.join(root, "sys", "devices", "system", "cpu")


def files(cpu_dir):
    """Every power file's bytes, by name below the CPU directory."""
    found = {}
    for folder, _dirs, names in os.walk(cpu_dir):
        for name in names:
            if name in ("pm_qos_resume_latency_us", "scaling_governor"):
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    found[os.path.relpath(path, cpu_dir)] = handle.read()
    return found


def read(cpu_dir, name):
    with open(os.path.join(cpu_dir, name), encoding="ascii") as handle:
        return handle.read()


def pod(uid, annotations, qos="Guaranteed", state=RUNNING, namespace="lab"):
    """A pod's container as a pass observes it (one pair), its annotations as the runtime keeps them."""
    listed = ListedContainer("c-" + uid, "sb-" + uid, uid, uid, namespace, "app", 0, state, 1)
    info = ContainerInfo("c-" + uid, uid, uid, namespace, "app", 0, qos, "/kubepods/pod" + uid + "/c", 2048, 200000,
                         100000, 0, annotations=kubecpu_annotations(annotations))
    return listed, info


def state_of(**held):
    """A state whose pods hold CPUs: state_of(a="2-3")."""
    state = CPUState("static", CPUSet.parse("0-7"))
    for uid, cpus in held.items():
        state.set(uid, "app", CPUSet.parse(cpus))
    return state


def power(tmp_path, cpu_dir, enabled=True, pairs=None):
    step = CpuPower(enabled, str(tmp_path / "state.power.json"), CpuPowerFS(cpu_dir))
    if pairs is not None:
        step.pods = pod_powers(pairs)
    return step


# --- what each annotation value writes -----------------------------------------------------------------------
# CRI-O 1.36.3's table (internal/runtimehandlerhooks/high_performance_hooks_test.go, convertAnnotationToLatency),
# then kubecpu's own: a leading zero read as CRI-O's strconv.Atoi reads it.
@pytest.mark.parametrize("value, written", [
    ("enable", "0"), ("disable", "n/a"), ("max_latency:10", "10"), ("max_latency:1", "1"),
    ("max_latency:0010", "10"), ("max_latency:%d" % MAX_LATENCY_US, str(MAX_LATENCY_US)),
])
@pytest.mark.parametrize("name", ["cpu-c-states.kubecpu.io", "cpu-c-states.crio.io"])
def test_each_c_states_value_writes_what_crio_writes_on_each_exclusive_cpu(tmp_path, name, value, written):
    cpu_dir = machine(tmp_path, latency="20")  # an operator's limit before: every value changes it
    step = power(tmp_path, cpu_dir, pairs=[pod("a", {name: value})])
    report, actions, errors = step.apply(state_of(a="2-3"))
    assert errors == []
    assert [read(cpu_dir, LATENCY % cpu) for cpu in CPUS] == ["20\n"] * 2 + [written + "\n"] * 2 + ["20\n"] * 4
    assert report["cpus"] == "2-3" and len(report["updated"]) == 2
    assert [(a.action, a.cpus, a.pod) for a in actions] == [("power", "2-3", "lab/a")]
    assert "pm_qos_resume_latency_us %s (%s: %s)" % (written, name, value) == actions[0].reason
    recorded = PowerRecord(str(tmp_path / "state.power.json")).load()
    assert {n: e["original"] for n, e in recorded.items()} == {LATENCY % 2: "20\n", LATENCY % 3: "20\n"}


@pytest.mark.parametrize("value, why", [
    ("max_latency:0", "from 1 to"), ("max_latency:-1", "from 1 to"), ("max_latency:bad", "from 1 to"),
    ("bad", "is not enable, disable or max_latency"),  # CRI-O refuses these four too
    ("max_latency:+5", "from 1 to"), ("max_latency:1e3", "from 1 to"), ("max_latency: 5", "from 1 to"),
    ("max_latency:%d" % (MAX_LATENCY_US + 1), "from 1 to"), ("max_latency:99999999999999999999", "from 1 to"),
    ("max_latency:\uff15", "from 1 to"),  # a full-width 5: a digit to Python, not to the kernel
    ("max_latency:", "from 1 to"), ("Disable", "is not enable"), ("", "is not enable"), ("off", "is not enable"),
])
def test_an_absurd_c_states_value_is_refused_by_name_and_nothing_is_written(tmp_path, value, why):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    step = power(tmp_path, cpu_dir, pairs=[pod("a", {"cpu-c-states.crio.io": value})])
    report, actions, errors = step.apply(state_of(a="2-3"))
    assert len(errors) == 1 and errors[0][1] == "annotation"
    assert errors[0][0].startswith("pod lab/a: cpu-c-states.crio.io: ") and why in errors[0][0]
    assert files(cpu_dir) == before and actions == [] and report["cpus"] == ""
    with pytest.raises(ValueError):
        latency_value(value)


@pytest.mark.parametrize("governor", ["Performance", "perf ormance", "x" * 16, "", "../../../etc", "performance\n"])
def test_a_governor_that_is_not_a_governors_name_is_refused(tmp_path, governor):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    step = power(tmp_path, cpu_dir, pairs=[pod("a", {"cpu-freq-governor.kubecpu.io": governor})])
    _report, _actions, errors = step.apply(state_of(a="2-3"))
    assert [kind for _message, kind in errors] == ["annotation"] and "governor's name" in errors[0][0]
    assert files(cpu_dir) == before


def test_kubecpus_name_and_crios_must_agree(tmp_path):
    cpu_dir = machine(tmp_path)
    agree = power(tmp_path, cpu_dir, pairs=[pod("a", {"cpu-c-states.kubecpu.io": "disable",
                                                      "cpu-c-states.crio.io": "disable"})])
    assert agree.apply(state_of(a="2"))[2] == [] and read(cpu_dir, LATENCY % 2) == "n/a\n"
    differ = power(tmp_path, cpu_dir, pairs=[pod("b", {"cpu-c-states.kubecpu.io": "disable",
                                                       "cpu-c-states.crio.io": "enable"})])
    _report, _actions, errors = differ.apply(state_of(a="2", b="5"))
    assert "ask different settings" in errors[0][0] and read(cpu_dir, LATENCY % 5) == "0\n"


# --- the governor ----------------------------------------------------------------------------------------------
def test_the_governor_is_set_on_each_cpus_policy_and_given_back(tmp_path):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    pairs = [pod("a", {"cpu-freq-governor.crio.io": "performance", "cpu-c-states.kubecpu.io": "max_latency:5"})]
    report, actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="4-5"))
    assert errors == [] and report["cpus"] == "4-5"
    assert [read(cpu_dir, GOVERNOR % cpu) for cpu in (3, 4, 5, 6)] == ["powersave\n", "performance\n",
                                                                       "performance\n", "powersave\n"]
    assert [a.reason for a in actions] == ["pm_qos_resume_latency_us 5 (cpu-c-states.kubecpu.io: max_latency:5)",
                                           "scaling_governor performance (cpu-freq-governor.crio.io: performance)"]
    report, actions, errors = power(tmp_path, cpu_dir, pairs=[]).apply(state_of())  # released
    assert files(cpu_dir) == before and not os.path.exists(tmp_path / "state.power.json")
    assert sorted(a.reason for a in actions) == ["pm_qos_resume_latency_us given back: 0",
                                                 "scaling_governor given back: powersave"]


def test_a_cpu_without_cpufreq_or_the_governor_is_reported_alone_and_the_pass_goes_on(tmp_path):
    cpu_dir = machine(tmp_path, without_cpufreq=[3])
    with open(os.path.join(cpu_dir, "cpufreq", "policy4", "scaling_available_governors"), "w") as handle:
        handle.write("powersave\n")  # this one offers no performance
    pairs = [pod("a", {"cpu-freq-governor.kubecpu.io": "performance", "cpu-c-states.kubecpu.io": "disable"})]
    report, _actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="2-5"))
    assert [kind for _m, kind in errors] == ["power", "power"]
    assert errors[0][0].startswith("cpu3 has no cpufreq (no %s/cpu3/cpufreq" % cpu_dir)
    assert errors[1][0] == "cpu4 offers the governors powersave, not performance: not set for pod lab/a"
    assert [read(cpu_dir, GOVERNOR % cpu) for cpu in (2, 4, 5)] == ["performance\n", "powersave\n", "performance\n"]
    assert [read(cpu_dir, LATENCY % cpu) for cpu in (2, 3, 4, 5)] == ["n/a\n"] * 4  # C-states on every CPU all the same
    assert report["cpus"] == "2-5"


def test_a_machine_without_cpufreq_at_all_still_gets_its_c_states(tmp_path):
    cpu_dir = machine(tmp_path, governor=None)  # a virtual machine: the test guest's kind
    pairs = [pod("a", {"cpu-freq-governor.kubecpu.io": "performance", "cpu-c-states.kubecpu.io": "disable"})]
    _report, _actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="6-7"))
    assert [m.split(" (")[0] for m, _kind in errors] == ["cpu6 has no cpufreq", "cpu7 has no cpufreq"]
    assert read(cpu_dir, LATENCY % 6) == "n/a\n"


def test_a_policy_shared_with_cpus_the_pod_does_not_hold_is_left_alone(tmp_path):
    """One policy per cluster (ARM big.LITTLE, some acpi-cpufreq machines): its governor is every CPU's in it."""
    cpu_dir = machine(tmp_path, governors=fake_sysfs.ACPI_CPUFREQ, policies={0: [0, 1, 2, 3], 4: [4, 5, 6, 7]})
    pairs = [pod("a", {"cpu-freq-governor.kubecpu.io": "performance"}),
             pod("b", {"cpu-freq-governor.kubecpu.io": "schedutil"})]
    _report, actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="2-3", b="4-7"))
    assert read(cpu_dir, GOVERNOR % 0) == "powersave\n" and read(cpu_dir, GOVERNOR % 4) == "schedutil\n"
    assert [m for m, _kind in errors] == [
        "cpu2's cpufreq policy also governs CPUs 0-1, which pod lab/a does not hold: governor performance not set",
        "cpu3's cpufreq policy also governs CPUs 0-1, which pod lab/a does not hold: governor performance not set"]
    assert [(a.pod_uid, a.cpus) for a in actions] == [("b", "4-7")]  # the policy written once, for its four CPUs


# --- who may ask --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("qos, state, reported", [
    ("Burstable", RUNNING, True), ("BestEffort", RUNNING, True),
    ("Guaranteed", RUNNING, True),  # fractional: it holds no exclusive CPU either
    ("Burstable", CREATED, False),  # not running yet: it may still get them (the agent allocates at the start)
])
def test_an_annotated_pod_that_holds_no_exclusive_cpus_is_refused_with_its_qos_class(tmp_path, qos, state, reported):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    pairs = [pod("web", {"cpu-c-states.crio.io": "disable"}, qos=qos, state=state)]
    _report, _actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="2-3"))
    assert files(cpu_dir) == before
    assert errors == ([("pod lab/web (%s) is annotated cpu-c-states.crio.io: disable but holds no exclusive CPUs "
                        "(only the containers of a Guaranteed pod that ask whole CPUs get them): no power setting "
                        "applied" % qos, "annotation")] if reported else [])


def test_pods_without_the_annotations_and_unannotated_cpus_are_left_alone(tmp_path):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    pairs = [pod("a", {"irq-load-balancing.crio.io": "disable"}), pod("b", {})]
    report, actions, errors = power(tmp_path, cpu_dir, pairs=pairs).apply(state_of(a="2-3", b="4-5"))
    assert (files(cpu_dir), actions, errors, report["cpus"]) == (before, [], [], "")
    assert not os.path.exists(tmp_path / "state.power.json")


# --- given back ---------------------------------------------------------------------------------------------------
def step_through(tmp_path, cpu_dir, passes):
    """Passes of a fresh process each (a new CpuPower), over one record: (enabled, pairs or None, held)."""
    for enabled, pairs, held in passes:
        power(tmp_path, cpu_dir, enabled, pairs).apply(state_of(**held))


ASKS = {"cpu-c-states.kubecpu.io": "disable", "cpu-freq-governor.kubecpu.io": "performance"}


@pytest.mark.parametrize("last, kept", [
    ((True, [pod("a", ASKS)], {}), {}),  # the pod released its CPUs
    ((True, [pod("a", {})], {"a": "2-3"}), {}),  # its annotations went (the pod made again without them)
    ((False, [pod("a", ASKS)], {"a": "2-3"}), {}),  # the option switched off
    ((True, [pod("a", {"cpu-c-states.kubecpu.io": "disable"})], {"a": "2"}),  # one CPU, and no governor asked
     {LATENCY % 2: b"n/a\n"}),
])
def test_every_file_is_given_back_byte_for_byte(tmp_path, last, kept):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    step_through(tmp_path, cpu_dir, [(True, [pod("a", ASKS)], {"a": "2-3"}), last])
    assert files(cpu_dir) == dict(before, **kept)
    assert os.path.exists(tmp_path / "state.power.json") == bool(kept)


@pytest.mark.parametrize("writes, saves", [
    (1, None),  # killed between the two CPUs' writes
    (-1, (1, False)),  # every write done, killed before the record says so
    (0, None),  # killed after the record, before the first write
    (-1, (0, False)),  # killed before the first record: nothing written
])
def test_a_kill_in_the_middle_of_a_pass_loses_no_original(tmp_path, writes, saves):
    cpu_dir = machine(tmp_path, latency="20")
    before = files(cpu_dir)
    step = CpuPower(True, str(tmp_path / "state.power.json"), KillingFS(cpu_dir, writes))
    if saves is not None:
        step.record = KillingRecord(str(tmp_path / "state.power.json"), *saves)
    step.pods = pod_powers([pod("a", {"cpu-c-states.kubecpu.io": "disable"})])
    with pytest.raises(Killed):
        step.apply(state_of(a="2-3"))
    step_through(tmp_path, cpu_dir, [(True, [], {})])  # the next process's pass: the pod is gone
    assert files(cpu_dir) == before and not os.path.exists(tmp_path / "state.power.json")


def test_a_cpu_that_moves_to_another_annotated_pod_keeps_its_first_original(tmp_path):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    step_through(tmp_path, cpu_dir, [
        (True, [pod("a", {"cpu-c-states.kubecpu.io": "disable"})], {"a": "2"}),
        (True, [pod("b", {"cpu-c-states.kubecpu.io": "max_latency:7"})], {"b": "2"}),
    ])
    assert read(cpu_dir, LATENCY % 2) == "7\n"
    assert PowerRecord(str(tmp_path / "state.power.json")).load()[LATENCY % 2]["original"] == "0\n"
    step_through(tmp_path, cpu_dir, [(True, [], {})])
    assert files(cpu_dir) == before


def test_without_the_runtime_a_pass_sets_nothing_new_and_gives_back_only_what_is_released(tmp_path):
    """The OCI hook's pass, ``bin/kubecpu allocate`` and ``release``: no annotations known."""
    cpu_dir = machine(tmp_path)
    step_through(tmp_path, cpu_dir, [(True, [pod("a", ASKS), pod("b", ASKS)], {"a": "2", "b": "5"})])
    report, actions, _errors = power(tmp_path, cpu_dir, pairs=None).apply(state_of(a="2", c="6"))
    assert read(cpu_dir, LATENCY % 2) == "n/a\n" and read(cpu_dir, GOVERNOR % 2) == "performance\n"  # a: kept
    assert read(cpu_dir, LATENCY % 5) == "0\n" and read(cpu_dir, GOVERNOR % 5) == "powersave\n"  # b: given back
    assert read(cpu_dir, LATENCY % 6) == "0\n"  # c: its annotations are not known here
    assert report["cpus"] == "2" and {a.pod_uid for a in actions} == {"b"}
    off = power(tmp_path, cpu_dir, enabled=False, pairs=None)  # the hook of a node whose option is off: the same
    off.apply(state_of(a="2"))
    assert read(cpu_dir, LATENCY % 2) == "n/a\n"


def test_a_file_someone_else_changed_since_is_theirs_and_left_as_it_is(tmp_path):
    cpu_dir = machine(tmp_path)
    step_through(tmp_path, cpu_dir, [(True, [pod("a", ASKS)], {"a": "2"})])
    with open(os.path.join(cpu_dir, LATENCY % 2), "w") as handle:
        handle.write("50\n")  # the operator, or CRI-O's hook giving back what it recorded
    report, _actions, _errors = power(tmp_path, cpu_dir, pairs=[]).apply(state_of())
    assert read(cpu_dir, LATENCY % 2) == "50\n" and read(cpu_dir, GOVERNOR % 2) == "powersave\n"
    assert report["left"] == [{"file": LATENCY % 2, "now": "50"}]
    assert not os.path.exists(tmp_path / "state.power.json")


def test_a_file_changed_while_its_pod_still_asks_is_written_again_and_gives_back_the_new_value(tmp_path):
    """CRI-O's hook giving back its own record when a container restarts, the pod still holding the CPU."""
    cpu_dir = machine(tmp_path)
    asks = [pod("a", {"cpu-c-states.kubecpu.io": "disable"})]
    step_through(tmp_path, cpu_dir, [(True, asks, {"a": "2"})])
    with open(os.path.join(cpu_dir, LATENCY % 2), "w") as handle:
        handle.write("40\n")
    report, _actions, _errors = power(tmp_path, cpu_dir, pairs=asks).apply(state_of(a="2"))
    assert read(cpu_dir, LATENCY % 2) == "n/a\n" and report["left"] == [{"file": LATENCY % 2, "now": "40"}]
    step_through(tmp_path, cpu_dir, [(True, [], {})])
    assert read(cpu_dir, LATENCY % 2) == "40\n"


def test_a_file_already_as_asked_is_not_written_nor_recorded(tmp_path):
    cpu_dir = machine(tmp_path, latency="n/a")  # CRI-O's hook wrote it first, say
    report, actions, _errors = power(tmp_path, cpu_dir, pairs=[pod("a", {"cpu-c-states.crio.io": "disable"})]).apply(
        state_of(a="2"))
    assert (actions, report["updated"], report["cpus"]) == ([], [], "2")
    assert not os.path.exists(tmp_path / "state.power.json")


# --- what cannot be done ----------------------------------------------------------------------------------------
class RefusingFS(CpuPowerFS):
    """The kernel refusing writes to some files with ``error`` (EINVAL, EBUSY; EROFS: sysfs read-only)."""

    def __init__(self, cpu_dir, refused, error):
        super().__init__(cpu_dir)
        self.refused, self.error = refused, error

    def write(self, name, text):
        if name in self.refused:
            raise OSError(self.error, os.strerror(self.error))
        super().write(name, text)


def test_a_write_the_kernel_refuses_is_that_files_error_and_the_pass_goes_on(tmp_path):
    cpu_dir = machine(tmp_path)
    step = CpuPower(True, str(tmp_path / "state.power.json"), RefusingFS(cpu_dir, {LATENCY % 2}, errno.EINVAL))
    step.pods = pod_powers([pod("a", {"cpu-c-states.kubecpu.io": "max_latency:3"})])
    report, _actions, errors = step.apply(state_of(a="2-3"))
    assert errors == [("cannot write 3 to %s/%s: Invalid argument" % (cpu_dir, LATENCY % 2), "power")]
    assert read(cpu_dir, LATENCY % 2) == "0\n" and read(cpu_dir, LATENCY % 3) == "3\n" and report["cpus"] == "3"
    assert set(step.record.load()) == {LATENCY % 3}  # what was not written is not recorded


def test_a_sysfs_that_cannot_be_written_at_all_is_the_passs_error_of_kind_power(tmp_path):
    cpu_dir = machine(tmp_path)
    step = CpuPower(True, str(tmp_path / "state.power.json"), RefusingFS(cpu_dir, {LATENCY % 2}, errno.EROFS))
    step.pods = pod_powers([pod("a", ASKS)])
    plan = Plan(state_of(a="2"))
    power_in_pass(step, plan, state_of(a="2"), True)
    assert plan.errors == [{"error": "cannot write %s/%s: Read-only file system" % (cpu_dir, LATENCY % 2),
                            "kind": "power"}]
    recorded = step.record.load()  # the originals stay recorded for the next pass
    assert recorded[LATENCY % 2]["original"] == "0\n" and recorded[LATENCY % 2]["writing"] == "n/a"
    with pytest.raises(CPUPowerError, match="Read-only file system"):  # the step's own contract: raised, not listed
        step.apply(state_of(a="2"))


@pytest.mark.parametrize("content, why", [
    (b"{not json", "unreadable"),
    (b'{"format": "kubecpu.power/v0", "files": {}}', "format is not kubecpu.power/v1"),
    (json.dumps({"format": "kubecpu.power/v1", "files": {"../../../etc/shadow": {
        "original": "x", "pod": "a", "cpus": "2"}}}).encode(), "is not a power file"),
    (json.dumps({"format": "kubecpu.power/v1", "files": {LATENCY % 2: {
        "original": 5, "pod": "a", "cpus": "2"}}}).encode(), "is not a value"),
])
def test_a_corrupt_record_is_reported_kept_and_nothing_is_written(tmp_path, content, why):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    (tmp_path / "state.power.json").write_bytes(content)
    plan = Plan(state_of(a="2"))
    power_in_pass(power(tmp_path, cpu_dir, pairs=[pod("a", ASKS)]), plan, state_of(a="2"), True)
    assert plan.errors[0]["kind"] == "power" and why in plan.errors[0]["error"]
    assert "move the file aside" in plan.errors[0]["error"]
    assert files(cpu_dir) == before and (tmp_path / "state.power.json").read_bytes() == content


def test_beside_a_read_only_state_nothing_is_set_that_could_not_be_given_back(tmp_path):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    step = CpuPower(True, None, CpuPowerFS(cpu_dir))
    step.pods = pod_powers([pod("a", ASKS)])
    report, actions, _errors = step.apply(state_of(a="2"))
    assert files(cpu_dir) == before and "not_applied" in report and len(actions) == 2  # what it would do


def test_a_check_writes_nothing_and_says_what_it_would_do(tmp_path):
    cpu_dir = machine(tmp_path)
    before = files(cpu_dir)
    report, actions, _errors = power(tmp_path, cpu_dir, pairs=[pod("a", ASKS)]).apply(state_of(a="2"), apply=False)
    assert files(cpu_dir) == before and not os.path.exists(tmp_path / "state.power.json")
    assert [u["to"] for u in report["updated"]] == ["n/a", "performance"] and len(actions) == 2


def test_the_step_is_built_only_when_on_or_when_a_record_is_left_to_give_back(tmp_path):
    state = str(tmp_path / "state")
    assert cpu_power(False, state) is None and cpu_power(True, None).record.path is None
    assert cpu_power(True, state, str(tmp_path)).fs.cpu_dir == str(tmp_path / "sys" / "devices" / "system" / "cpu")
    (tmp_path / "state.power.json").write_text('{"format": "kubecpu.power/v1", "files": {}}')
    left = cpu_power(False, state)
    assert left is not None and not left.enabled and left.record.path == record_path(state)


# --- crashes: the property ----------------------------------------------------------------------------------------
class Killed(BaseException):
    """SIGKILL: nothing after it runs (not an OSError: no handler of the core catches it)."""


class KillingFS(CpuPowerFS):
    def __init__(self, cpu_dir, writes_left):
        super().__init__(cpu_dir)
        self.writes_left = writes_left

    def write(self, name, text):
        if self.writes_left == 0:
            raise Killed()
        self.writes_left -= 1
        super().write(name, text)


class KillingRecord(PowerRecord):
    def __init__(self, path, saves_left, after):
        super().__init__(path)
        self.saves_left, self.after = saves_left, after

    def save(self, files):
        if self.saves_left == 0 and not self.after:
            raise Killed()
        if self.saves_left == 0:
            super().save(files)
            raise Killed()
        self.saves_left -= 1
        super().save(files)


VALUES = {"cpu-c-states.kubecpu.io": ["enable", "disable", "max_latency:5", "max_latency:80"],
          "cpu-c-states.crio.io": ["disable", "max_latency:5"],
          "cpu-freq-governor.kubecpu.io": ["performance", "powersave", "ondemand"],  # ondemand: not offered
          "cpu-freq-governor.crio.io": ["performance"]}
annotations = st.fixed_dictionaries({}, optional={name: st.sampled_from(v) for name, v in VALUES.items()})
a_pass = st.tuples(
    st.booleans(),  # the option on
    st.booleans(),  # the pass saw the runtime (else: the hook's)
    st.dictionaries(st.sampled_from("abc"), st.tuples(annotations, st.sets(st.integers(1, 7), max_size=3)),
                    max_size=3),  # pod -> its annotations, the CPUs it asks
    st.one_of(st.none(), st.integers(0, 6)),  # killed after this many sysfs writes
    st.one_of(st.none(), st.tuples(st.integers(0, 2), st.booleans())),  # killed at a record save (after it)
    st.booleans(),  # a check, not a pass
)


@settings(max_examples=150, deadline=None)
@given(passes=st.lists(a_pass, min_size=1, max_size=6), latency=st.sampled_from(["0", "n/a", "20"]),
       governor=st.sampled_from(["powersave", "performance"]))
def test_after_any_passes_and_kills_switching_off_gives_every_file_back_byte_for_byte(tmp_path_factory, passes,
                                                                                      latency, governor):
    tmp_path = tmp_path_factory.mktemp("power")
    cpu_dir = machine(tmp_path, latency=latency, governor=governor, policies={0: [0], 1: [1], 2: [2, 3], 4: [4],
                                                                              5: [5], 6: [6], 7: [7]})
    before = files(cpu_dir)
    record = str(tmp_path / "state.power.json")
    for enabled, observed, pods, kill_write, kill_save, check in passes:
        step = CpuPower(enabled, record, KillingFS(cpu_dir, -1 if kill_write is None else kill_write))
        if kill_save is not None:
            step.record = KillingRecord(record, *kill_save)
        taken, held = set(), {}
        for uid, (_notes, asked) in sorted(pods.items()):
            held[uid] = str(CPUSet(asked - taken))
            taken |= asked
        step.pods = pod_powers([pod(uid, notes) for uid, (notes, _asked) in pods.items()]) if observed else None
        try:
            step.apply(state_of(**{uid: cpus for uid, cpus in held.items() if cpus}), apply=not check)
        except Killed:
            pass
    off = CpuPower(False, record, CpuPowerFS(cpu_dir))
    off.pods = {}  # the agent's next pass: it saw the runtime
    _report, _actions, errors = off.apply(state_of())
    assert errors == []
    assert files(cpu_dir) == before
    assert not os.path.exists(record)


# --- in a pass ------------------------------------------------------------------------------------------------------
def node(tmp_path, options):
    topo = Topology(generated_cpus(2, 2, 2))
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    if not os.path.exists(tmp_path / "machine"):
        fake_sysfs.power(str(tmp_path / "machine"), CPUS)
    manager = NodeManager(topo, new_policy("static", topo, 1), StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), options=options,
                          sysfs_root=str(tmp_path / "machine"))
    return manager, runtime, os.path.join(str(tmp_path / "machine"), "sys", "devices", "system", "cpu")


def test_a_pass_sets_an_annotated_pods_cpus_and_gives_them_back_when_it_goes(tmp_path):
    manager, runtime, cpu_dir = node(tmp_path, ManagerOptions(cpu_power=True))
    before = files(cpu_dir)
    assert runtime.want_annotations
    runtime.add("quiet", "app", "Guaranteed", 2000, pod_name="quiet", annotations={"cpu-c-states.crio.io": "disable"})
    runtime.add("web", "app", "Burstable", 500, pod_name="web", annotations={"cpu-c-states.crio.io": "disable"})
    plan = manager.reconcile()
    held = manager.store.load().get("quiet", "app")
    assert [read(cpu_dir, LATENCY % cpu) for cpu in held] == ["n/a\n"] * 2
    doc = plan.to_dict(states=False)
    assert doc["power"]["cpus"] == str(held) and doc["counts"]["power"] == 1
    assert [e["kind"] for e in doc["errors"]] == ["annotation"] and "default/web (Burstable)" in doc["errors"][0]["error"]
    metrics = Metrics()
    metrics.observe_pass(doc, 0.1, True)
    assert "kubecpu_cpu_power_cpus 2" in metrics.render()
    assert "kubecpu_cpu_power_errors_total 0" in metrics.render()
    runtime.remove_pod("quiet")
    released = manager.reconcile()
    assert released.changed and files(cpu_dir) == before
    assert not os.path.exists(record_path(manager.store.path))


def test_switched_off_the_next_pass_gives_everything_back(tmp_path):
    manager, runtime, cpu_dir = node(tmp_path, ManagerOptions(cpu_power=True))
    before = files(cpu_dir)
    runtime.add("quiet", "app", "Guaranteed", 2000, annotations={"cpu-freq-governor.kubecpu.io": "performance"})
    manager.reconcile()
    assert files(cpu_dir) != before
    manager.close()
    off, _runtime, _dir = node(tmp_path, ManagerOptions())
    off.runtime = runtime
    assert off.power is not None and not off.power.enabled  # the record is there: something to give back
    off.reconcile()
    assert files(cpu_dir) == before and not os.path.exists(record_path(manager.store.path))


def test_a_pass_without_the_option_and_without_a_record_has_no_power_step(tmp_path):
    manager, runtime, _cpu_dir = node(tmp_path, ManagerOptions())
    runtime.add("quiet", "app", "Guaranteed", 2000, annotations={"cpu-c-states.crio.io": "disable"})
    assert manager.power is None and "power" not in manager.reconcile().to_dict(states=False)


# --- beside a kubelet that pins -------------------------------------------------------------------------------------
def beside_the_kubelet(tmp_path, held, irq_isolation="off", cpu_power=True):
    root = fake_sysfs.build(str(tmp_path / "machine"), fake_sysfs.machine(2, 2, 2))
    if not os.path.exists(os.path.join(root, "sys", "devices", "system", "cpu", "cpu0", "power")):
        fake_sysfs.power(root, CPUS)
    (tmp_path / "kubelet").write_bytes(checkpoint_file("0-5", held))
    config = NodeConfig.from_mapping({"sysfs_root": root, "kubelet_state_path": str(tmp_path / "kubelet"),
                                      "state_path": str(tmp_path / "own"), "irq_isolation": irq_isolation,
                                      "cpu_power": cpu_power})
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0")
    return kubelet_housekeeping(config, runtime=runtime if cpu_power else None), runtime, os.path.join(
        root, "sys", "devices", "system", "cpu")


def test_beside_a_kubelet_that_pins_its_checkpoints_cpus_get_their_pods_power(tmp_path):
    housekeeper, runtime, cpu_dir = beside_the_kubelet(tmp_path, {"pod-a": {"app": "6-7"}})
    before = files(cpu_dir)
    runtime.add("pod-a", "app", "Guaranteed", 2000, annotations={"cpu-c-states.kubecpu.io": "max_latency:9"})
    assert housekeeper.isolation is None and runtime.want_annotations  # interrupts off: the power alone
    plan = housekeeper.reconcile()
    assert [read(cpu_dir, LATENCY % cpu) for cpu in (5, 6, 7)] == ["0\n", "9\n", "9\n"]
    assert plan.to_dict(states=False)["power"]["cpus"] == "6-7" and plan.errors == []
    (tmp_path / "kubelet").write_bytes(checkpoint_file("0-7", {}))  # the kubelet released them
    housekeeper.reconcile()
    assert files(cpu_dir) == before and not os.path.exists(tmp_path / "own.power.json")


def test_beside_a_kubelet_a_runtime_that_cannot_tell_the_annotations_keeps_what_is_set(tmp_path):
    housekeeper, runtime, cpu_dir = beside_the_kubelet(tmp_path, {"pod-a": {"app": "6-7"}})
    runtime.add("pod-a", "app", "Guaranteed", 2000, annotations={"cpu-c-states.kubecpu.io": "disable"})
    housekeeper.reconcile()
    runtime.down = True
    plan = housekeeper.reconcile()
    assert read(cpu_dir, LATENCY % 6) == "n/a\n"
    assert [e["kind"] for e in plan.errors] == ["power"] and "annotations not read" in plan.errors[0]["error"]


def test_beside_a_kubelet_housekeeping_needs_interrupts_or_power(tmp_path):
    with pytest.raises(ConfigError, match="needs irq_isolation exclusive or cpu_power"):
        beside_the_kubelet(tmp_path, {}, irq_isolation="off", cpu_power=False)
    with pytest.raises(ConfigError, match="got irq_isolation annotated"):
        beside_the_kubelet(tmp_path, {}, irq_isolation="annotated")


# --- what the report shows ------------------------------------------------------------------------------------------
def test_the_report_shows_each_setting_its_value_now_and_what_it_gets_back(tmp_path):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.power import power_info
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.info import node_info

    manager, runtime, cpu_dir = node(tmp_path, ManagerOptions(cpu_power=True))
    runtime.add("quiet", "app", "Guaranteed", 2000, annotations={"cpu-c-states.kubecpu.io": "max_latency:15"})
    manager.reconcile()
    held = manager.store.load().get("quiet", "app")
    shown = node_info(manager, manager.read_state())["housekeeping"]["power"]
    assert shown["cpus"] == str(held)
    assert shown["settings"] == [{"file": LATENCY % cpu, "cpus": str(cpu), "pod": "quiet", "set": "15", "now": "15",
                                  "original": "0"} for cpu in held]
    assert power_info(None) == {"cpus": "", "settings": []}  # a read-only state: no record
    (tmp_path / "state.power.json").write_text("{")
    assert "unreadable" in power_info(str(tmp_path / "state"))["error"]
    assert read(cpu_dir, LATENCY % 0) == "0\n"
