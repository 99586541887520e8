"""Interrupts kept off the CPUs held exclusively, given back when released (docs/HOUSEKEEPING.md), on a /proc/irq
shaped directory; irqbalance told once per change."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import RESCAN_SECONDS, IrqIsolation
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import irq_isolation
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import isolate_in_pass, kept_off
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irq import IrqFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import IrqBalance
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import FakeIrqBalance, ManagedIrqFS
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

ONLINE = CPUSet.parse("0-7")


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def isolation(tmp_path, irqs, managed=(), default="ff", balance=None):
    root = proc_irq(tmp_path / "irq", irqs, default)
    balance = balance or IrqBalance(str(tmp_path / "run"), str(tmp_path / "env"), cpu_dir=str(tmp_path / "cpu"))
    clock = Clock()
    return IrqIsolation(ONLINE, str(tmp_path / "state.irq.json"), ManagedIrqFS(root, managed), balance,
                        clock=clock), root, clock


def default_mask(root):
    with open(os.path.join(root, "default_smp_affinity"), encoding="ascii") as handle:
        return handle.read().strip()


# keep off, then what each interrupt's affinity is (24 had 0-7, 25 had 4, 26 had 0-3, 27 had 4-5,6)
STEPS = [
    ("4-7", {24: "0-3", 25: "0-3", 26: "0-3", 27: "0-3"}, "f"),  # 25's only CPU is held: the others take it
    ("6-7", {24: "0-5", 25: "4", 26: "0-3", 27: "4-5"}, "3f"),  # released CPUs come back to those that had them
    ("", {24: "0-7", 25: "4", 26: "0-3", 27: "4-6"}, "ff"),  # all released: every affinity as it was
]


def test_interrupts_leave_held_cpus_and_come_back_as_they_are_released(tmp_path):
    isolate, root, _clock = isolation(tmp_path, {24: "0-7", 25: "4", 26: "0-3", 27: "4-6"})
    for keep_off, expected, mask in STEPS:
        report = isolate.apply(CPUSet.parse(keep_off))
        assert {irq: affinity(root, irq) for irq in expected} == expected, keep_off
        assert default_mask(root) == mask
        assert report["kept_off"] == keep_off and report["interrupts"] == 4
    assert isolate.record.load()["originals"] == {}  # nothing left to give back


def test_only_what_changes_is_written_and_reported(tmp_path):
    isolate, _root, _clock = isolation(tmp_path, {24: "0-7", 26: "0-3"})
    report = isolate.apply(CPUSet.parse("5"))
    assert report["updated"] == [{"irq": "24", "from": "0-7", "to": "0-4,6-7"},
                                 {"irq": "default", "from": "0-7", "to": "0-4,6-7"}]


def test_managed_interrupts_are_counted_not_errors(tmp_path):
    isolate, root, clock = isolation(tmp_path, {24: "0-7", 40: "4", 41: "5"}, managed=(40, 41))
    report = isolate.apply(CPUSet.parse("4-7"))
    assert report["refused"] == [40, 41]
    assert (affinity(root, 40), affinity(root, 41), affinity(root, 24)) == ("4", "5", "0-3")
    assert isolate.record.load()["originals"]["40"] == "4"  # what it has, should the kernel let it move one day
    written = os.stat(tmp_path / "state.irq.json").st_ino
    for _rescan in range(3):
        clock.now += RESCAN_SECONDS
        assert isolate.apply(CPUSet.parse("4-7"))["refused"] == [40, 41]
    assert os.stat(tmp_path / "state.irq.json").st_ino == written  # refused again, and the record not rewritten
    isolate.apply(CPUSet())
    assert affinity(root, 24) == "0-7" and isolate.record.load()["originals"] == {}


class Crash(Exception):
    """The process killed between two writes."""


class CrashingIrqFS(IrqFS):
    def __init__(self, root, writes):
        super().__init__(root)
        self.writes = writes

    def _crash_when_due(self):
        if not self.writes:
            raise Crash()
        self.writes -= 1

    def set_affinity_text(self, irq, text):
        self._crash_when_due()
        return super().set_affinity_text(irq, text)

    def set_default_affinity(self, cpus):
        self._crash_when_due()
        return super().set_default_affinity(cpus)


@pytest.mark.parametrize("writes", [0, 1, 2])
@pytest.mark.parametrize("first, then", [("4-7", "6-7"), ("", "4-7"), ("6-7", "")])
def test_a_crash_between_the_writes_loses_no_original(tmp_path, writes, first, then):
    """The record holds every original before the first write: the next process gives back what each had."""
    irqs = {24: "0-7", 25: "4", 26: "0-3", 27: "4-6"}
    root = proc_irq(tmp_path / "irq", irqs)
    record = str(tmp_path / "state.irq.json")
    IrqIsolation(ONLINE, record, IrqFS(root), IrqBalance(str(tmp_path / "run"))).apply(CPUSet.parse(first))
    with pytest.raises(Crash):
        IrqIsolation(ONLINE, record, CrashingIrqFS(root, writes), IrqBalance(str(tmp_path / "run"))).apply(
            CPUSet.parse(then))
    IrqIsolation(ONLINE, record, IrqFS(root), IrqBalance(str(tmp_path / "run"))).apply(CPUSet())
    assert {irq: affinity(root, irq) for irq in irqs} == irqs
    assert default_mask(root) == "ff"


def test_check_mode_reports_and_writes_nothing(tmp_path):
    isolate, root, _clock = isolation(tmp_path, {24: "0-7"})
    report = isolate.apply(CPUSet.parse("4-7"), apply=False)
    assert [u["to"] for u in report["updated"]] == ["0-3", "0-3"]
    assert affinity(root, 24) == "0-7" and default_mask(root) == "ff"
    assert not os.path.exists(tmp_path / "state.irq.json")


def test_unchanged_sets_rescan_procfs_only_every_period(tmp_path):
    isolate, root, clock = isolation(tmp_path, {24: "0-7"})
    isolate.apply(CPUSet.parse("6-7"))
    proc_irq(root, {50: "0-7"}, default="3f")  # a device added after the scan
    assert isolate.apply(CPUSet.parse("6-7"))["updated"] == []  # not read again yet
    assert affinity(root, 50) == "0-7"
    clock.now += RESCAN_SECONDS
    assert [u["irq"] for u in isolate.apply(CPUSet.parse("6-7"))["updated"]] == ["50"]
    assert affinity(root, 50) == "0-5"


def test_a_corrupt_record_is_reported_kept_and_nothing_moves(tmp_path):
    isolate, root, _clock = isolation(tmp_path, {24: "0-7"})
    (tmp_path / "state.irq.json").write_bytes(b'{"format": "kubecpu.irq/v1", "kept_off": "x"')
    with pytest.raises(HousekeepingError, match=r"state\.irq\.json is unreadable.*kept as it is"):
        isolate.apply(CPUSet.parse("4-7"))
    assert (tmp_path / "state.irq.json").read_bytes() == b'{"format": "kubecpu.irq/v1", "kept_off": "x"'
    assert affinity(root, 24) == "0-7"


def test_irqbalance_is_told_once_per_change_and_never_restarted(tmp_path):
    (tmp_path / "run").mkdir()
    daemon = FakeIrqBalance(tmp_path / "run")
    env = tmp_path / "env"
    env.write_text("IRQBALANCE_ARGS=\n")
    try:
        isolate, _root, _clock = isolation(tmp_path, {24: "0-7"})
        for keep_off in ("4-7", "4-7", "4-7", "6-7", ""):
            report = isolate.apply(CPUSet.parse(keep_off))
            assert report["irqbalance"] == "pid %d" % daemon.pid
        balance = IrqBalance(str(tmp_path / "run"))
        assert balance.banned(daemon.path) == CPUSet()
        assert daemon.commands == ["settings cpus 4,5,6,7", "settings cpus 6,7", "settings cpus NULL", "setup"]
        assert env.read_text() == "IRQBALANCE_ARGS=\n"
    finally:
        daemon.close()


def test_a_failure_is_the_passs_error_not_the_passs_end(tmp_path):
    root = proc_irq(tmp_path / "irq", {24: "0-7"})
    record = str(tmp_path / "gone" / "r.json")  # its directory removed under the agent
    isolate = IrqIsolation(ONLINE, record, IrqFS(root), IrqBalance(str(tmp_path / "run")))
    plan = Plan(CPUState("static", ONLINE))
    isolate_in_pass(isolate, plan, CPUSet.parse("4-7"), True)
    assert plan.errors == [{"kind": "irq", "error": "cannot write %s: No such file or directory" % record}]
    isolate_in_pass(None, plan, CPUSet.parse("4-7"), True)  # off: nothing to do
    assert len(plan.errors) == 1


class UnwritableIrqBalance(IrqBalance):
    """irqbalance's file read-only for the agent (installed, or replaced, after the agent's unit started it)."""

    writable = False

    def persist(self, cpus, apply=True):
        if not self.writable:
            raise HousekeepingError("cannot write %s: Read-only file system" % self.env_file)
        return super().persist(cpus, apply)


def test_an_irqbalance_file_that_cannot_be_written_does_not_keep_the_daemon_from_being_told(tmp_path):
    """issue 62: the agent's unit makes only irqbalance's file writable, as it was when the agent started. A file it
    cannot write is the pass's error, the running daemon is told all the same, and each pass tries the file again
    (the record does not say it was done) until it can: then the file gets the block and the daemon is told once
    more; released, the record goes only once the file is written."""
    (tmp_path / "run").mkdir()
    (tmp_path / "env").write_text("IRQBALANCE_ARGS=\n")
    daemon = FakeIrqBalance(tmp_path / "run")
    balance = UnwritableIrqBalance(str(tmp_path / "run"), str(tmp_path / "env"), cpu_dir=str(tmp_path / "cpu"))
    isolate, root, _clock = isolation(tmp_path, {24: "0-7"}, balance=balance)
    record = tmp_path / "state.irq.json"
    try:
        for _pass in range(2):
            plan = Plan(CPUState("static", ONLINE))
            isolate_in_pass(isolate, plan, CPUSet.parse("4-7"), True)
            assert plan.errors == [{"kind": "irq", "error": "cannot write %s: Read-only file system"
                                                            % (tmp_path / "env")}]
            assert affinity(root, 24) == "0-3" and record.exists()
        balance.writable = True
        plan = Plan(CPUState("static", ONLINE))
        isolate_in_pass(isolate, plan, CPUSet.parse("4-7"), True)
        assert plan.errors == [] and (tmp_path / "env").read_text().endswith("IRQBALANCE_BANNED_CPULIST=4-7\n")
        balance.writable = False
        isolate_in_pass(isolate, plan, CPUSet(), True)
        assert plan.errors[-1]["error"].startswith("cannot write") and record.exists() and affinity(root, 24) == "0-7"
        balance.writable = True
        isolate_in_pass(isolate, plan, CPUSet(), True)
        assert len(plan.errors) == 1 and not record.exists() and (tmp_path / "env").read_text() == "IRQBALANCE_ARGS=\n"
        IrqBalance(str(tmp_path / "run")).banned(daemon.path)
        assert daemon.commands == ["settings cpus 4,5,6,7"] * 3 + ["settings cpus NULL"] * 2 + ["setup"]
    finally:
        daemon.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.frozensets(st.integers(0, 7), min_size=1), min_size=1, max_size=6),
       st.lists(st.frozensets(st.integers(0, 7), max_size=7), min_size=1, max_size=5),
       st.frozensets(st.integers(0, 5)))
def test_no_movable_interrupt_stays_on_a_held_cpu_and_release_restores_all(tmp_path_factory, originals, sets, managed):
    tmp_path = tmp_path_factory.mktemp("irq")
    irqs = {index: str(CPUSet(cpus)) for index, cpus in enumerate(originals)}
    managed = {irq for irq in managed if irq in irqs}
    isolate, root, clock = isolation(tmp_path, irqs, managed=managed)
    for keep_off in sets:
        held = CPUSet(keep_off)
        report = isolate.apply(held)
        for irq, had in irqs.items():
            now, before = CPUSet.parse(affinity(root, irq)), CPUSet.parse(had)
            assert now, irq
            if irq in managed:
                assert now == before
                assert (irq in report["refused"]) == bool(now.intersection(held))
            else:  # off the held CPUs; inside what it had, unless all of that is held
                assert not now.intersection(held), (irq, now, held)
                assert now.issubset(before) or not before.difference(held)
        clock.now += RESCAN_SECONDS
    isolate.apply(CPUSet())
    assert {irq: affinity(root, irq) for irq in irqs} == irqs
    assert default_mask(root) == "ff"


def test_a_pass_of_the_manager_moves_interrupts_off_what_it_pins_and_check_mode_only_reports(tmp_path):
    root = proc_irq(tmp_path / "machine" / "proc" / "irq", {24: "0-7", 25: "5"})
    topo = Topology(generated_cpus(2, 2, 2))
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(topo, new_policy("static", topo, 1), StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), options=ManagerOptions(irq_isolation="exclusive"),
                          sysfs_root=str(tmp_path / "machine"))
    runtime.add("pod-g", "app", "Guaranteed", 2000)
    preview = manager.reconcile(apply=False)
    assert preview.to_dict()["housekeeping"]["kept_off"] == "1,5" and affinity(root, 24) == "0-7"
    plan = manager.reconcile()
    assert plan.to_dict()["housekeeping"]["updated"] == [{"irq": "24", "from": "0-7", "to": "0,2-4,6-7"},
                                                         {"irq": "25", "from": "5", "to": "0,2-4,6-7"},
                                                         {"irq": "default", "from": "0-7", "to": "0,2-4,6-7"}]
    assert manager.reconcile().changed is False  # nothing more to move
    runtime.remove_pod("pod-g")
    released = manager.reconcile()
    assert released.changed and (affinity(root, 24), affinity(root, 25)) == ("0-7", "5")


def test_annotated_mode_keeps_interrupts_off_the_annotated_pods_cpus_only(tmp_path):
    root = proc_irq(tmp_path / "machine" / "proc" / "irq", {24: "0-7"})
    topo = Topology(generated_cpus(2, 2, 2))
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(topo, new_policy("static", topo, 1), StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), options=ManagerOptions(irq_isolation="annotated"),
                          sysfs_root=str(tmp_path / "machine"))
    assert runtime.want_annotations  # the manager asks the runtime for them
    runtime.add("pod-quiet", "app", "Guaranteed", 2000, annotations={"irq-load-balancing.crio.io": "disable"})
    runtime.add("pod-loud", "app", "Guaranteed", 2000, annotations={"irq-load-balancing.kubecpu.io": "enable"})
    manager.reconcile()
    quiet = manager.store.load().get("pod-quiet", "app")
    assert quiet is not None and CPUSet.parse(affinity(root, 24)) == CPUSet.parse("0-7").difference(quiet)
    assert manager.irq_pods == {"pod-quiet"}


@pytest.mark.parametrize("mode, pods, kept", [
    ("exclusive", None, "1-2,5-7"),  # every exclusive CPU, the pod-level ones too
    ("annotated", {"a"}, "1,5"),
    ("annotated", {"b"}, "2,6-7"),  # its container's and its pod-level CPUs
    ("annotated", set(), ""),
    ("annotated", None, None),  # no runtime seen in this call: interrupts left as they are
])
def test_which_cpus_interrupts_keep_off(mode, pods, kept):
    state = CPUState("static", CPUSet.parse("0,3-4"))
    state.set("a", "app", CPUSet.parse("1,5"))
    state.set("b", "app", CPUSet.parse("2,6"))
    state.pod_entries["b"] = CPUSet.parse("7")
    got = kept_off(mode, state, pods)
    assert (None if got is None else str(got)) == kept


# --- the bad day (issue 34): refusals, newer settings, devices that come and go, irqbalance restarted, off, read-only


class RefusingIrqFS(IrqFS):
    """The kernel's refusals for one interrupt each, as ``os.write`` raises them on procfs."""

    def __init__(self, root, refusals):
        super().__init__(root)
        self.refuse = dict(refusals)  # irq -> errno

    def set_affinity_text(self, irq, text):
        if irq not in self.refuse:
            return super().set_affinity_text(irq, text)
        had, real = affinity(self.root, irq), os.write

        def write(fd, data):
            raise OSError(self.refuse[irq], os.strerror(self.refuse[irq]))

        os.write = write
        try:
            return super().set_affinity_text(irq, text)
        finally:
            os.write = real
            with open(os.path.join(self.root, str(irq), "smp_affinity_list"), "w", encoding="ascii") as handle:
                handle.write(had + "\n")  # procfs ignores O_TRUNC: the affinity is as it was


def test_a_refused_interrupt_is_counted_with_its_reason_and_the_pass_goes_on(tmp_path):
    """ENOSPC (its vector space full), EBUSY (a move pending), EINVAL: that interrupt's refusal; every other one, the
    default affinity and irqbalance are still done, and the next pass tries again."""
    root = proc_irq(tmp_path / "irq", {24: "0-7", 25: "0-7", 26: "0-7", 27: "0-7"})
    refusing = RefusingIrqFS(root, {24: errno.ENOSPC, 25: errno.EBUSY, 26: errno.EINVAL})
    isolate = IrqIsolation(ONLINE, str(tmp_path / "state.irq.json"), refusing, IrqBalance(str(tmp_path / "run")))
    report = isolate.apply(CPUSet.parse("4-7"))
    assert report["refused"] == [24, 25, 26] and report["refusals"] == {"24": "ENOSPC", "25": "EBUSY", "26": "EINVAL"}
    assert affinity(root, 27) == "0-3" and default_mask(root) == "f"
    refusing.refuse = {}
    isolate.scanned = None  # the next rescan
    assert isolate.apply(CPUSet.parse("4-7"))["refused"] == []
    assert [affinity(root, irq) for irq in (24, 25, 26, 27)] == ["0-3"] * 4
    isolate.apply(CPUSet())
    assert [affinity(root, irq) for irq in (24, 25, 26, 27)] == ["0-7"] * 4


def test_a_cpu_taken_offline_is_never_a_target(tmp_path):
    root = proc_irq(tmp_path / "irq", {24: "0-7", 25: "6"})
    online = tmp_path / "online"
    online.write_text("0-5\n")  # 6 and 7 went offline after the agent started
    isolate = IrqIsolation(ONLINE, str(tmp_path / "state.irq.json"), IrqFS(root), IrqBalance(str(tmp_path / "run")),
                           online_file=str(online))
    isolate.apply(CPUSet.parse("2"))
    assert affinity(root, 24) == "0-1,3-5"


def test_a_newer_setting_is_never_overwritten_by_an_old_original(tmp_path):
    """The operator (or a driver) sets an interrupt while kubecpu holds CPUs: it is theirs from then on. Neither a
    release nor a change of the held set writes kubecpu's recorded original over it."""
    isolate, root, _clock = isolation(tmp_path, {24: "0-7", 25: "0-7"})
    isolate.apply(CPUSet.parse("4-7"))
    assert affinity(root, 24) == affinity(root, 25) == "0-3"
    proc_irq(root, {24: "2", 25: "1-2"})  # the operator's own settings
    isolate.apply(CPUSet.parse("6-7"))  # the held set changes
    assert (affinity(root, 24), affinity(root, 25)) == ("2", "1-2")
    isolate.apply(CPUSet())  # everything released
    assert (affinity(root, 24), affinity(root, 25)) == ("2", "1-2")
    assert not os.path.exists(tmp_path / "state.irq.json")  # nothing left to give back


def test_a_record_follows_its_interrupt_not_its_number(tmp_path):
    """A device removed, and its number given to another: the old original is not applied to the new device. An
    interrupt born while the default affinity was narrowed gets the default's original back on release."""
    root = proc_irq(tmp_path / "irq", {24: "0-7", 25: "0-7"})
    os.makedirs(os.path.join(root, "24", "eth0-TxRx-0"))
    isolate = IrqIsolation(ONLINE, str(tmp_path / "state.irq.json"), IrqFS(root), IrqBalance(str(tmp_path / "run")))
    isolate.apply(CPUSet.parse("4-7"))
    shutil.rmtree(os.path.join(root, "24"))
    proc_irq(root, {24: "2-3", 30: "0-3"}, default="f")  # 24: another device, set by its driver; 30: born narrowed
    os.makedirs(os.path.join(root, "24", "nvme0q1"))
    isolate.apply(CPUSet.parse("4-7"), apply=True)  # the next pass (the set unchanged, the rescan due)
    isolate.scanned = None
    isolate.apply(CPUSet.parse("4-7"))
    isolate.apply(CPUSet())
    after = (affinity(root, 24), affinity(root, 30), affinity(root, 25), default_mask(root))
    assert after == ("2-3", "0-7", "0-7", "ff")


def test_an_unreadable_affinity_keeps_its_record(tmp_path, monkeypatch):
    """An affinity that cannot be read for a moment is not a removed interrupt: its original stays."""
    isolate, root, _clock = isolation(tmp_path, {24: "0-7"})
    isolate.apply(CPUSet.parse("4-7"))
    real = IrqFS.affinity_text
    monkeypatch.setattr(IrqFS, "affinity_text", lambda self, irq: None if irq == 24 else real(self, irq))
    isolate.scanned = None
    isolate.apply(CPUSet.parse("4-7"))
    monkeypatch.setattr(IrqFS, "affinity_text", real)
    isolate.apply(CPUSet())
    assert affinity(root, 24) == "0-7"


def pids():
    """Two live processes' IDs, the smaller first (two daemons' sockets need live PIDs)."""
    return sorted((os.getpid(), os.getppid()))


def test_a_restarted_irqbalance_is_told_again_with_its_own_bans(tmp_path):
    """A new daemon (another PID) is told even though the set did not change; what it is told includes the CPUs it
    bans by itself (the kernel's isolated and nohz_full ones), and a release hands it those, not NULL."""
    (tmp_path / "run").mkdir()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "isolated").write_text("1\n")
    (tmp_path / "cpu" / "nohz_full").write_text("(null)\n")
    first, second = pids()
    daemon = FakeIrqBalance(tmp_path / "run", pid=first)
    isolate, _root, _clock = isolation(tmp_path, {24: "0-7"})
    asked = IrqBalance(str(tmp_path / "run"))
    try:
        isolate.apply(CPUSet.parse("4-7"))
        isolate.apply(CPUSet.parse("4-7"))
        asked.banned(daemon.path)  # its answer comes after what it was told before
        assert daemon.commands == ["settings cpus 1,4,5,6,7", "setup"]  # once per change
    finally:
        daemon.close()
    restarted = FakeIrqBalance(tmp_path / "run", pid=second)
    try:
        report = isolate.apply(CPUSet.parse("4-7"))
        isolate.apply(CPUSet())
        asked.banned(restarted.path)
        assert report["irqbalance"] == "pid %d" % second
        assert restarted.commands == ["settings cpus 1,4,5,6,7", "settings cpus 1", "setup"]
    finally:
        restarted.close()


def test_isolation_turned_off_gives_everything_back(tmp_path):
    """``irq_isolation: off`` after a mode that moved interrupts: the next pass gives back what was moved, tells
    irqbalance, and removes the record; with no record, off does nothing at all."""
    root = proc_irq(tmp_path / "machine" / "proc" / "irq", {24: "0-7"})
    state = str(tmp_path / "state")
    on = irq_isolation("exclusive", ONLINE, state, str(tmp_path / "machine"))
    on.apply(CPUSet.parse("4-7"))
    assert affinity(root, 24) == "0-3" and os.path.exists(state + ".irq.json")
    off = irq_isolation("off", ONLINE, state, str(tmp_path / "machine"))
    plan = Plan(CPUState("static", ONLINE))
    isolate_in_pass(off, plan, kept_off("off", CPUState("static", ONLINE), None), True)
    assert affinity(root, 24) == "0-7" and default_mask(root) == "ff" and not os.path.exists(state + ".irq.json")
    assert irq_isolation("off", ONLINE, state, str(tmp_path / "machine")) is None


def test_a_read_only_state_moves_nothing_it_could_not_give_back(tmp_path):
    root = proc_irq(tmp_path / "irq", {24: "0-7"})
    isolate = IrqIsolation(ONLINE, None, IrqFS(root), IrqBalance(str(tmp_path / "run")))
    report = isolate.apply(CPUSet.parse("4-7"))
    assert affinity(root, 24) == "0-7" and default_mask(root) == "ff"
    assert report["updated"] and "nothing is moved" in report["not_applied"]


def test_a_deferred_step_goes_around_what_the_state_gives_when_it_runs(tmp_path):
    """The NRI plugin's step after its reply: the set the state gives under the lock then, not the one its pass saw."""
    isolate, root, _clock = isolation(tmp_path, {24: "0-7"})
    isolate.deferred = True
    assert isolate.apply(CPUSet.parse("4-7"))["deferred"]
    assert affinity(root, 24) == "0-7"  # nothing before the reply
    isolate.flush(CPUSet.parse("6-7"))  # another pass released 4-5 in between
    assert affinity(root, 24) == "0-5"
