# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Interrupts kept off the CPUs held exclusively (docs/HOUSEKEEPING.md): a pass's last step, under the state lock.

Every device interrupt whose affinity names a CPU to keep clear gets that CPU taken out (all its CPUs: it goes to the
other online CPUs), and so does the default affinity of interrupts yet to come. The affinity each had before is
recorded (``<state>.irq.json``): a released CPU is given back to the interrupts that had it, and an interrupt whose
CPUs are all released gets its old affinity back. Managed interrupts the kernel will not move (EIO) are counted. A
running irqbalance is told its banned CPUs through its socket, and its environment file keeps them for its next start,
once per change of the set: never a restart.

Procfs is read in full when the set changes, and otherwise at most every ``RESCAN_SECONDS`` (a device added, an
affinity someone moved back): one pass of the NRI plugin per container stays cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Callable, Dict, Iterable, NamedTuple, Optional, Set, Tuple

from ..atomic import atomic_write
from ..errors import CPUSetError, HousekeepingError
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..runtime.container_cache import ContainerCache
from ..runtime.irq import IrqFS, read_bounded
from ..runtime.irqbalance import IrqBalance, env_files
from ..runtime.model import ContainerInfo, Runtime
from .plan import Plan
from .power import CpuPower, observe_pods, power_in_pass
from .state_store import StateStore

IRQ_ANNOTATIONS = ("irq-load-balancing.kubecpu.io", "irq-load-balancing.crio.io")  # value "disable"
RECORD_SUFFIX = ".irq.json"
FORMAT = "kubecpu.irq/v2"
FORMATS = ("kubecpu.irq/v1", FORMAT)  # v1: no "wrote", "actions" or "banned_pid" (read as unknown)
RESCAN_SECONDS = 10.0
MAX_RECORD_BYTES = 1 << 20  # an entry per interrupt: 4,096 of them take about 80 KiB
DEFAULT_KEY = "default"


class IrqRecord:
    """What the interrupts had before kubecpu moved them (``originals``), what it left them on (``wrote``; during a
    pass's writes also what it is writing, ``writing``: after a crash either may be in procfs) and whose they were
    (``actions``: their handlers' names), the interrupts the last scan saw (``seen``, their numbers as a list of
    ranges), and what it told irqbalance (``banned``, to ``banned_pid``); a corrupt file is refused and kept."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._known: Optional[Tuple[bytes, Dict[str, Any]]] = None  # the file as this process last read or wrote it

    def load(self) -> Dict[str, Any]:
        """The record (a copy of its own: the caller changes it); the same bytes as last time are not parsed again."""
        empty: Dict[str, Any] = {"kept_off": "", "originals": {}, "wrote": {}, "writing": {}, "actions": {},
                                 "seen": "", "banned": None, "banned_pid": None, "refused": []}
        data = read_bounded(self.path, MAX_RECORD_BYTES) if self.path else None
        if data is None:
            self._known = None
            return empty
        if self._known is not None and self._known[0] == data:
            return _copy(self._known[1])
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError("larger than %d bytes" % MAX_RECORD_BYTES)
            doc = json.loads(data)
            if doc.get("format") not in FORMATS:
                raise ValueError("format is not %s" % FORMAT)
            pid = doc.get("banned_pid")
            record = {"kept_off": str(CPUSet.parse(doc["kept_off"])),
                      "originals": {str(key): str(CPUSet.parse(value)) for key, value in doc["originals"].items()},
                      "wrote": {str(key): str(CPUSet.parse(value)) for key, value in doc.get("wrote", {}).items()},
                      "writing": {str(key): str(CPUSet.parse(value)) for key, value in doc.get("writing", {}).items()},
                      "actions": {str(key): str(value) for key, value in doc.get("actions", {}).items()},
                      "seen": str(CPUSet.parse(doc.get("seen", ""))),
                      "banned": None if doc["banned"] is None else str(CPUSet.parse(doc["banned"])),
                      "banned_pid": None if pid is None else int(pid),
                      "refused": [int(irq) for irq in doc["refused"]]}
        except (ValueError, KeyError, TypeError, AttributeError, CPUSetError) as exc:
            raise HousekeepingError("interrupt record %s is unreadable (%s): kept as it is, interrupts left alone; "
                                    "move the file aside once their affinities are as they should be"
                                    % (self.path, exc)) from None
        self._known = (data, _copy(record))
        return record

    def save(self, record: Dict[str, Any]) -> None:
        """Written atomically and durably, unless the file already says it."""
        data = (json.dumps(dict(record, format=FORMAT), sort_keys=True, separators=(",", ":")) + "\n").encode()
        if not self.path or (self._known is not None and self._known[0] == data):
            return
        try:
            atomic_write(self.path, data, durable=True)
        except OSError as exc:
            raise HousekeepingError("cannot write %s: %s" % (self.path, exc.strerror or exc)) from None
        self._known = (data, _copy(record))

    def remove(self) -> None:
        """Nothing left to give back: the file goes (isolation turned off, everything released)."""
        if self.path and os.path.exists(self.path):
            try:
                os.unlink(self.path)
            except OSError as exc:
                raise HousekeepingError("cannot remove %s: %s" % (self.path, exc.strerror or exc)) from None
        self._known = None


def _copy(record: Dict[str, Any]) -> Dict[str, Any]:
    return dict(record, originals=dict(record["originals"]), wrote=dict(record["wrote"]),
                writing=dict(record["writing"]), actions=dict(record["actions"]), refused=list(record["refused"]))


def _forget(record: Dict[str, Any], key: str) -> None:
    for table in ("originals", "wrote", "writing", "actions"):
        record[table].pop(key, None)


class IrqIsolation:
    """Interrupt affinity around a set of CPUs to keep clear (``apply``), on the ``online`` CPUs (read again from
    ``online_file`` at every scan: a CPU taken offline is never a target)."""

    def __init__(self, online: CPUSet, record_path: Optional[str], irqs: Optional[IrqFS] = None,
                 irqbalance: Optional[IrqBalance] = None, clock: Callable[[], float] = time.monotonic, *,
                 online_file: Optional[str] = None) -> None:
        self.online = online
        self.record = IrqRecord(record_path)
        self.irqs = irqs or IrqFS()
        self.irqbalance = irqbalance or IrqBalance()
        self.clock = clock
        self.online_file = online_file
        self.scanned: Optional[float] = None  # when this process last read every interrupt
        self.deferred = False  # apply() only notes what to keep off; flush() does it (the NRI plugin, after its reply)
        self.pending: Optional[CPUSet] = None

    def apply(self, keep_off: CPUSet, apply: bool = True) -> Dict[str, Any]:
        """Interrupt affinities (and irqbalance) around ``keep_off``; what changed, or would with ``apply`` False.
        While ``deferred``, an applied change waits for ``flush``. Without a record (a read-only state) nothing is
        moved: what is moved must be given back."""
        if self.deferred and apply:
            self.pending = keep_off
            return {"kept_off": str(keep_off.intersection(self.online)), "deferred": True}
        return self._apply(keep_off, apply)

    def flush(self, keep_off: Optional[CPUSet] = None) -> Optional[Dict[str, Any]]:
        """What ``apply`` deferred, done now (under the state lock), around ``keep_off``: the set the state gives now,
        not the one noted (another pass may have run in between); None when nothing waits."""
        noted, self.pending = self.pending, None
        return None if noted is None else self._apply(noted if keep_off is None else keep_off, True)

    def _online_now(self) -> CPUSet:
        data = read_bounded(self.online_file, 64 * 1024) if self.online_file else None
        try:
            return CPUSet.parse(data.decode("ascii").strip()) if data else self.online
        except (CPUSetError, UnicodeDecodeError):
            return self.online

    def _apply(self, keep_off: CPUSet, apply: bool) -> Dict[str, Any]:
        online = self._online_now()
        keep_off = keep_off.intersection(online)
        record = self.record.load()
        loaded = _copy(record)
        before = CPUSet.parse(record["kept_off"])
        report: Dict[str, Any] = {"kept_off": str(keep_off), "updated": [], "refused": record["refused"]}
        if self.record.path is None:
            report["not_applied"] = "no record beside a read-only state: nothing is moved that could not be given back"
            apply = False
        due = self.scanned is None or self.clock() - self.scanned >= RESCAN_SECONDS
        if keep_off != before or due:
            self._scan(record, keep_off, online, keep_off != before, report=report, apply=apply)
        record["kept_off"] = str(keep_off)
        unwritten = self._tell_irqbalance(record, keep_off, report, apply)
        if apply and not keep_off and not record["originals"] and record["banned"] is None and unwritten is None:
            self.record.remove()  # everything given back
        elif apply and record != loaded:
            self.record.save(record)
        if unwritten is not None:  # the pass's error; the rest is done and recorded
            raise unwritten
        return report

    def _scan(self, record: Dict[str, Any], keep_off: CPUSet, online: CPUSet, changed: bool, *,
              report: Dict[str, Any], apply: bool) -> None:
        """Every interrupt read and decided on its own; the decision made once per distinct (affinity, recorded
        original): on a big node most interrupts share a few affinities, and the CPU-set arithmetic costs more than
        the read. The record holds every original to give back before the first write: a crash between the writes
        loses none of them. A refusal (``IrqFS.refusals``) is counted and the pass goes on."""
        originals: Dict[str, str] = record["originals"]
        decided: Dict[Tuple[str, Optional[str]], Tuple[Optional[str], Optional[str]]] = {}
        entries = [(str(irq), self.irqs.affinity_text(irq)) for irq in self.irqs.irqs()]
        default = self.irqs.default_affinity()
        entries.append((DEFAULT_KEY, None if default is None else str(default)))
        narrowed, default_original = record["wrote"].get(DEFAULT_KEY), originals.get(DEFAULT_KEY)
        seen = CPUSet.parse(record["seen"])  # (interrupt numbers, not CPUs: the same compact list of ranges)
        writes = []
        for key, text in entries:
            if text is None:
                if key == DEFAULT_KEY or not self.irqs.exists(int(key)):
                    _forget(record, key)  # gone: its record does not pass to the next device given its number
                continue  # unreadable (oversized, a transient error): its record stays
            actions = None if key == DEFAULT_KEY else self._owner(record, key)
            if not self._still_ours(record, key, text, actions):
                _forget(record, key)  # another device has the number, or someone set it since: theirs now
            if (key not in originals and key != DEFAULT_KEY and seen and int(key) not in seen and narrowed == text
                    and default_original):  # born since the last scan, on the default kubecpu narrowed
                originals[key], record["wrote"][key] = default_original, text
            known = originals.get(key)
            if (text, known) not in decided:
                decided[(text, known)] = self._decide(text, known, keep_off, online, changed)
            write, after = decided[(text, known)]
            if write is not None:
                writes.append((key, text, write, after))
                after = after or known  # recorded until the write is done (and kept if the kernel refuses it)
            self._note(record, key, after, text, actions)
        record["seen"] = str(CPUSet(int(key) for key, text in entries if key != DEFAULT_KEY and text is not None))
        if apply and writes:  # what may be in procfs after a crash, kept while a write is refused (no rewrite)
            record["writing"].update((key, write) for key, _text, write, _after in writes)
            self.record.save(record)
        refused = {}
        for key, text, write, after in writes:
            if apply and not (self.irqs.set_default_affinity(CPUSet.parse(write)) if key == DEFAULT_KEY
                              else self.irqs.set_affinity_text(int(key), write)):
                refused[key] = self.irqs.refusals.get(key, "refused")
                continue
            report["updated"].append({"irq": key, "from": text, "to": write})
            self._note(record, key, after, write, record["actions"].get(key))
        record["refused"] = report["refused"] = sorted(int(key) for key in refused if key != DEFAULT_KEY)
        if refused:
            report["refusals"] = refused
        report["interrupts"] = len(entries) - 1
        if apply:
            self.scanned = self.clock()

    def _owner(self, record: Dict[str, Any], key: str) -> Optional[str]:
        """The interrupt's handlers, read only for one with a record (or about to get one)."""
        return self.irqs.actions(int(key)) if key in record["originals"] or key in record["wrote"] else None

    @staticmethod
    def _still_ours(record: Dict[str, Any], key: str, text: str, actions: Optional[str]) -> bool:
        """Whether the record of ``key`` still speaks of this interrupt as kubecpu left it: the same handlers, and
        the affinity kubecpu wrote (or found and kept) unchanged. A v1 record knows neither: trusted."""
        if key not in record["originals"]:
            return True
        had_actions, wrote = record["actions"].get(key), record["wrote"].get(key)
        return ((had_actions is None or actions is None or had_actions == actions)
                and (wrote is None or text in (wrote, record["writing"].get(key))))

    def _note(self, record: Dict[str, Any], key: str, original: Optional[str], left_on: str,
              actions: Optional[str]) -> None:
        """The record of ``key``: its original (None: no record), the affinity kubecpu left it on, its handlers."""
        record["writing"].pop(key, None)
        if original is None:
            _forget(record, key)
            return
        record["originals"][key] = original
        record["wrote"][key] = left_on
        if key != DEFAULT_KEY:
            record["actions"][key] = actions if actions is not None else (self.irqs.actions(int(key)) or "")

    @staticmethod
    def _decide(text: str, known: Optional[str], keep_off: CPUSet, online: CPUSet,
                changed: bool) -> Tuple[Optional[str], Optional[str]]:
        """For an interrupt whose affinity reads ``text`` and whose recorded original is ``known``: the affinity to
        write (None: none), and the original to record after it (None: no record). Targets are online CPUs only."""
        try:
            current = CPUSet.parse(text)
        except CPUSetError:
            return None, known  # not a CPU list: left alone
        original = current if known is None else CPUSet.parse(known)
        if current.intersection(keep_off):
            want = original.difference(keep_off).intersection(online) or online.difference(keep_off)
        elif known is not None and not original.intersection(keep_off):
            want = original.intersection(online) or original  # every CPU it had is free again
        elif known is not None and changed:
            want = original.difference(keep_off).intersection(online) or current  # some of its CPUs are free again
        else:
            return None, known
        after = None if want == original else str(original)
        if not want or want == current:
            return None, (None if want == original else known)
        return str(want), after

    def _tell_irqbalance(self, record: Dict[str, Any], keep_off: CPUSet, report: Dict[str, Any],
                         apply: bool) -> Optional[HousekeepingError]:
        """Once per change of the set and once per new daemon: the running one through its socket, with its own bans
        (the kernel's isolated and nohz_full CPUs, or its environment's), its next start through its file. A file
        that cannot be written (read-only in the agent's unit until it restarts) does not keep the running daemon
        from being told: its error is returned, and the next pass tries both again."""
        daemon = self.irqbalance.running()
        report["irqbalance"] = "not running" if daemon is None else "pid %d" % daemon[0]
        told = record["banned"]
        if (told is not None and CPUSet.parse(told) == keep_off and daemon is not None
                and record["banned_pid"] in (None, daemon[0])):
            record["banned_pid"] = daemon[0]
            return None
        unwritten = None
        try:
            if self.irqbalance.persist(keep_off, apply):
                report["irqbalance_file"] = self.irqbalance.env_file
        except HousekeepingError as exc:
            unwritten = exc
        if daemon is not None:
            own = self.irqbalance.own_bans()
            if apply:
                self.irqbalance.ban(daemon[1], keep_off.union(own))
            report["irqbalance_banned"] = str(keep_off.union(own))
            if not keep_off and not own and self.irqbalance.started_with_bans(daemon[0]):
                report["irqbalance_note"] = ("irqbalance (pid %d) started with bans in its environment and falls back "
                                             "to them: restart it to balance onto every CPU" % daemon[0])
        done = daemon is not None and keep_off and unwritten is None  # a file not written: both again next pass
        record["banned"] = str(keep_off) if done else None
        record["banned_pid"] = daemon[0] if daemon is not None and done else None
        return unwritten


def irq_pods(infos: Iterable[ContainerInfo]) -> Set[str]:
    """The pods annotated ``irq-load-balancing.kubecpu.io: disable`` (or CRI-O's name for it)."""
    return {info.pod_uid for info in infos
            if any((info.annotations or {}).get(name) == "disable" for name in IRQ_ANNOTATIONS)}


def kept_off(mode: str, state: CPUState, pods: Optional[Set[str]]) -> Optional[CPUSet]:
    """The CPUs interrupts keep off: every exclusive CPU (mode exclusive), or those of the annotated pods (mode
    annotated; None when the call saw no runtime, so knows no annotations: the interrupts are left as they are);
    none with isolation off (what an earlier mode moved is given back)."""
    if mode == "off":
        return CPUSet()
    if mode == "exclusive":
        return state.assigned().union(state.pod_assigned())
    if pods is None:
        return None
    held = [cpus for uid, _name, cpus in state.assignments() if uid in pods]
    return CPUSet().union(*held, *(cpus for uid, cpus in state.pod_entries.items() if uid in pods))


def isolate_in_pass(isolation: Optional[IrqIsolation], plan: Plan, keep_off: Optional[CPUSet], apply: bool) -> None:
    """A pass's last step: the interrupts around ``keep_off``, in ``plan.housekeeping``; a failure is the plan's error
    (kind ``irq``), never the pass's: the containers are pinned all the same."""
    if isolation is None or keep_off is None:
        return
    try:
        plan.housekeeping = isolation.apply(keep_off, apply)
    except HousekeepingError as exc:
        plan.error(None, str(exc), "irq")


def record_path(state_path: str) -> str:
    return state_path + RECORD_SUFFIX


def irq_isolation(mode: str, online: CPUSet, state_path: Optional[str],
                  root: Optional[str] = None) -> Optional[IrqIsolation]:
    """The isolation a node's ``irq_isolation`` setting asks for (None when off); ``root``: where the machine's
    kernel interfaces and files are (``sysfs_root``: /proc/irq, /run/irqbalance, irqbalance's environment file below
    it)."""
    record = None if state_path is None else record_path(state_path)
    if mode == "off" and (record is None or not os.path.exists(record)):
        return None  # off, and nothing to give back
    return IrqIsolation(online, record, *machine_files(root), online_file=online_path(root))


def machine_files(root: Optional[str] = None) -> Tuple[IrqFS, IrqBalance]:
    """/proc/irq and irqbalance below ``root`` (default /)."""
    base = root or "/"
    return IrqFS(os.path.join(base, "proc", "irq")), IrqBalance(
        os.path.join(base, "run", "irqbalance"), proc=os.path.join(base, "proc"),
        env_files=env_files(base),
        cpu_dir=os.path.join(base, "sys", "devices", "system", "cpu"))


def online_path(root: Optional[str] = None) -> str:
    return os.path.join(root or "/", "sys", "devices", "system", "cpu", "online")


class CheckpointPolicy(NamedTuple):
    """What the agent's log and metrics say of a kubelet that pins itself."""

    name: str
    reserved: CPUSet


class KubeletHousekeeping:
    """Beside a kubelet that pins CPUs itself: a pass reads its checkpoint (never writes it) and keeps interrupts off
    the CPUs it assigned exclusively, and sets their power as their pods' annotations ask (node/power.py: the
    ``runtime`` tells the annotations). The agent loop runs these passes as it runs a ``NodeManager``'s."""

    def __init__(self, topology: Topology, checkpoint: StateStore, lock: StateStore, isolation: Optional[IrqIsolation],
                 *, power: Optional[CpuPower] = None, runtime: Optional[Runtime] = None,
                 irq_mode: str = "exclusive") -> None:
        """``checkpoint``: the kubelet's, read-only; ``lock``: kubecpu's own state file, whose lock the pass holds
        (the interrupt and power records lie beside it)."""
        self.topology = topology
        self.store = checkpoint
        self.lock = lock
        self.isolation = isolation
        self.power, self.runtime, self.irq_mode, self.cache = power, runtime, irq_mode, ContainerCache()
        self.policy = CheckpointPolicy(checkpoint.policy_name, CPUSet())

    def reconcile(self, apply: bool = True) -> Plan:
        started = time.monotonic()
        unread = observe_pods(self.power, self.runtime, self.cache)  # before the lock, as a NodeManager's pass
        with self.lock.locked() if apply else contextlib.nullcontext():  # a check writes nothing, not even a lock
            state = self.store.load() or CPUState(self.store.policy_name, self.topology.all_cpus)
            plan = Plan(state)
            isolate_in_pass(self.isolation, plan, kept_off(self.irq_mode, state, None), apply)
            power_in_pass(self.power, plan, state, apply)
        if unread:
            plan.error(None, unread, "power")
        plan.applied = apply
        plan.seconds = time.monotonic() - started
        return plan

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()
