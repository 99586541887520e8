# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Per-pod power (docs/HOUSEKEEPING.md, section 5): the C-state limit and the cpufreq governor of a pod's exclusive
CPUs, from its annotations, given back when it lets them go. A pass's step after the interrupts, under the state lock.

A pod annotated ``cpu-c-states.kubecpu.io`` (or CRI-O's ``cpu-c-states.crio.io``) gets on each of its exclusive CPUs
the ``pm_qos_resume_latency_us`` that CRI-O's high-performance hooks write for the same value (``enable`` 0,
``disable`` n/a, ``max_latency:N`` N); ``cpu-freq-governor.kubecpu.io`` (or ``cpu-freq-governor.crio.io``) sets their
cpufreq governor. What each file had before kubecpu's first write is recorded in ``<state>.power.json`` before that
write, and written back when the pod releases the CPU, when its annotation goes, when the option is off, and by the
next pass after a crash. A file someone else changed since kubecpu wrote it is theirs: its record is dropped and the
file left as it is (while its pod still asks, what it reads now becomes the original and the pod's value is written
again).

A pass that saw no runtime (the OCI hook, ``bin/kubecpu allocate`` and ``release``) knows no annotations: it gives
back only what a pod no longer holds, and sets nothing.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from ..atomic import atomic_write
from ..errors import ContainerRuntimeError, CPUPowerError
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..runtime.container_cache import ContainerCache
from ..runtime.cpu_power import GOVERNOR, LATENCY, MAX_VALUE_BYTES, CpuPowerFS, Policy, parse_cpus
from ..runtime.irq import read_bounded
from ..runtime.model import (C_STATES_ANNOTATIONS, GOVERNOR_ANNOTATIONS, RUNNING, ContainerInfo, ListedContainer,
                             Runtime)
from .plan import Action, Plan

C_STATES = C_STATES_ANNOTATIONS  # kubecpu's, CRI-O's: enable | disable | max_latency:<µs>
GOVERNORS = GOVERNOR_ANNOTATIONS  # kubecpu's, CRI-O's: a governor's name
POWER_ANNOTATIONS = C_STATES + GOVERNORS
RECORD_SUFFIX = ".power.json"
FORMAT = "kubecpu.power/v1"
MAX_RECORD_BYTES = 1 << 20  # two files per CPU of about 150 bytes each: 1,024 CPUs take 300 KiB
MAX_LATENCY_US = 1_000_000  # 1 s: no C-state takes near that to leave; a larger figure is ms or ns typed for µs
GOVERNOR_NAME = re.compile(r"[a-z][a-z0-9_]{0,14}\Z")  # the kernel's CPUFREQ_NAME_LEN is 16, its NUL included
FILE_NAME = re.compile(r"(cpu[0-9]{1,5}/power/%s|(cpufreq/policy[0-9]{1,5}|cpu[0-9]{1,5}/cpufreq)/%s)\Z"
                       % (LATENCY, GOVERNOR))  # a record names these and nothing else: it never steers a write
_SYSTEMIC = (errno.EPERM, errno.EACCES, errno.EROFS)  # sysfs cannot be written at all (the agent's unit, a container)


class PodPower(NamedTuple):
    """What a pod's annotations ask of its exclusive CPUs: each setting as (value to write, the annotation that
    asked), and the annotations refused."""

    ref: str
    qos: str
    running: bool
    latency: Optional[Tuple[str, str]]
    governor: Optional[Tuple[str, str]]
    refusals: Tuple[str, ...]


def latency_value(text: str) -> str:
    """``pm_qos_resume_latency_us`` for a C-states annotation's value, as CRI-O 1.36.3 writes it
    (internal/runtimehandlerhooks, convertAnnotationToLatency); ValueError for anything else."""
    if text == "enable":
        return "0"  # no limit: every C-state
    if text == "disable":
        return "n/a"  # a limit of 0: no C-state but polling
    number = text[len("max_latency:"):] if text.startswith("max_latency:") else None
    if number is None:
        raise ValueError("%r is not enable, disable or max_latency:<microseconds>" % text)
    if not (number.isascii() and number.isdigit()) or not 0 < int(number) <= MAX_LATENCY_US:
        raise ValueError("max_latency %r is not a whole number of microseconds from 1 to %d" % (number, MAX_LATENCY_US))
    return str(int(number))


def governor_value(text: str) -> str:
    if not GOVERNOR_NAME.match(text):
        raise ValueError("%r is not a cpufreq governor's name (lower-case letters, digits and _, at most 15)" % text)
    return text


def _setting(annotations: Dict[str, str], names: Tuple[str, ...], parse: Any) -> Optional[Tuple[str, str]]:
    """The value the pod's annotations ask under ``names`` (kubecpu's, CRI-O's), and which asked; two that do not
    agree are refused: CRI-O's hooks would write the other."""
    asked = [(name, annotations[name]) for name in names if name in annotations]
    found = []
    for name, text in asked:
        try:
            found.append((parse(text), "%s: %s" % (name, text)))
        except ValueError as exc:
            raise ValueError("%s: %s" % (name, exc)) from None
    if len({value for value, _why in found}) > 1:
        raise ValueError("%s and %s ask different settings: give one, or the same in both"
                         % (found[0][1], found[1][1]))
    return found[0] if found else None


def pod_powers(pairs: Iterable[Tuple[ListedContainer, ContainerInfo]]) -> Dict[str, PodPower]:
    """The pods whose annotations ask a power setting, by UID (their containers' facts as a pass observed them)."""
    pods: Dict[str, PodPower] = {}
    for listed, info in pairs:
        known = pods.get(info.pod_uid)
        if known is not None:
            pods[info.pod_uid] = known._replace(running=known.running or listed.state == RUNNING)
            continue
        annotations = dict(info.annotations or {})
        if not any(name in annotations for name in POWER_ANNOTATIONS):
            continue
        refusals = []
        settings: List[Optional[Tuple[str, str]]] = []
        for names, parse in ((C_STATES, latency_value), (GOVERNORS, governor_value)):
            try:
                settings.append(_setting(annotations, names, parse))
            except ValueError as exc:
                settings.append(None)
                refusals.append("pod %s: %s; not set" % (listed.pod_ref, exc))
        pods[info.pod_uid] = PodPower(listed.pod_ref, info.qos, listed.state == RUNNING, settings[0], settings[1],
                                      tuple(refusals))
    return pods


class PowerRecord:
    """What each power file had before kubecpu's first write (``original``, as the kernel showed it), what kubecpu
    left in it (``wrote``) and, during a pass's writes, what it is writing (``writing``: after a crash either may be
    in the file), for which pod (``pod``) and CPUs (``cpus``); a corrupt file is refused and kept."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._known: Optional[bytes] = None  # the file as this process last read or wrote it

    def load(self) -> Dict[str, Dict[str, Any]]:
        data = read_bounded(self.path, MAX_RECORD_BYTES) if self.path else None
        self._known = data
        if data is None:
            return {}
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError("larger than %d bytes" % MAX_RECORD_BYTES)
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError("format is not %s" % FORMAT)
            files = {}
            for name, entry in doc["files"].items():
                if not FILE_NAME.match(name):
                    raise ValueError("%r is not a power file" % name)
                original = entry["original"]
                if not isinstance(original, str) or len(original) > MAX_VALUE_BYTES:
                    raise ValueError("the original of %s is not a value" % name)
                files[name] = {"original": original, "wrote": _optional(entry.get("wrote")),
                               "writing": _optional(entry.get("writing")), "pod": str(entry["pod"]),
                               "cpus": str(CPUSet.parse(entry["cpus"]))}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CPUPowerError("power record %s is unreadable (%s): kept as it is, power settings left alone; "
                                "move the file aside once the CPUs' files are as they should be"
                                % (self.path, exc)) from None
        return files

    def save(self, files: Dict[str, Dict[str, Any]]) -> None:
        """Written atomically and durably, unless the file already says it; removed when it holds nothing."""
        if not self.path:
            return
        if not files:
            if self._known is not None or os.path.exists(self.path):
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise CPUPowerError("cannot remove %s: %s" % (self.path, exc.strerror or exc)) from None
            self._known = None
            return
        data = (json.dumps({"format": FORMAT, "files": files}, sort_keys=True, separators=(",", ":")) + "\n").encode()
        if data == self._known:
            return
        try:
            atomic_write(self.path, data, durable=True)
        except OSError as exc:
            raise CPUPowerError("cannot write %s: %s" % (self.path, exc.strerror or exc)) from None
        self._known = data


def _optional(value: Any) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_VALUE_BYTES:
        raise ValueError("%r is not a value" % (value,))
    return value


class _Write(NamedTuple):
    name: str
    text: str  # the bytes written (a value and its newline, or the original as it was)
    before: str
    after: str
    pod: str
    cpus: str
    why: str  # the annotation that asked, or "" for a give-back


class CpuPower:
    """The power settings of the exclusive CPUs (``enabled``: the option is on) around a state; what the last
    observation of the runtime saw of the pods' annotations (``pods``; None: no runtime seen)."""

    def __init__(self, enabled: bool, record_path: Optional[str], fs: Optional[CpuPowerFS] = None) -> None:
        self.enabled = enabled
        self.record = PowerRecord(record_path)
        self.fs = fs or CpuPowerFS()
        self.pods: Optional[Dict[str, PodPower]] = None

    def apply(self, state: CPUState, apply: bool = True) -> Tuple[Dict[str, Any], List[Action], List[Tuple[str, str]]]:
        """The files set and given back around ``state``; the report, the actions and the errors (message, kind). A
        record or a sysfs that cannot be written at all raises CPUPowerError (the record then says what may have been
        written, for the next pass)."""
        holders: Dict[int, str] = {}
        for uid, _name, cpus in state.assignments():
            holders.update((cpu, uid) for cpu in cpus)
        for uid, cpus in state.pod_entries.items():
            holders.update((cpu, uid) for cpu in cpus)
        held: Dict[str, CPUSet] = {}
        for cpu, uid in holders.items():
            held[uid] = held.get(uid, CPUSet()).union({cpu})
        report: Dict[str, Any] = {"updated": []}
        if self.record.path is None:
            report["not_applied"] = "no record beside a read-only state: nothing is set that could not be given back"
            apply = False
        pods = self.pods if self.enabled or self.pods is None else {}  # off: nothing wanted, once pods are known
        errors: List[Tuple[str, str]] = []
        wanted = self._wanted(pods or {}, held, errors)
        files = self.record.load()
        writes = []
        applied: List[CPUSet] = []  # the CPUs whose files hold what was asked once the writes are done
        for name in sorted(set(files) | set(wanted)):
            entry = files.get(name)
            if name not in wanted and entry is not None and pods is None and entry["pod"] in held and \
                    parse_cpus(entry["cpus"]) and parse_cpus(entry["cpus"]).issubset(held[entry["pod"]]):
                applied.append(parse_cpus(entry["cpus"]))
                continue  # no annotations known in this pass: what a pod still holds keeps its setting
            current = self.fs.read(name)
            if current is None:
                if name in wanted:
                    errors.append(("cannot read %s: not set" % self._path(name), "power"))
                continue  # its record stays until the file can be read (a CPU offline for a moment)
            now = current.strip()
            if entry is not None and now not in (entry["wrote"], entry["writing"]):
                report.setdefault("left", []).append({"file": name, "now": now})
                del files[name]  # someone else changed it since: theirs now
                entry = None
            if name in wanted:
                value, uid, on, why = wanted[name]
                if now == value:
                    applied.append(parse_cpus(on))
                if entry is None and now == value:
                    continue
                entry = files.setdefault(name, {"original": current, "wrote": None, "writing": None})
                entry.update(pod=uid, cpus=on)
                if now != value:
                    entry["writing"] = value
                    text = entry["original"] if entry["original"].strip() == value else value + "\n"
                    writes.append(_Write(name, text, now, value, uid, on, why))
            elif entry is not None:
                writes.append(_Write(name, entry["original"], now, entry["original"].strip(), entry["pod"],
                                     entry["cpus"], ""))
        if apply and any(write.why for write in writes):
            self.record.save(files)  # every original, and what is being written, before the first write
        done = [write for write in writes if not apply or self._write(write, files, errors)]
        if apply:
            self.record.save(files)
        report["updated"] = [{"file": w.name, "from": w.before, "to": w.after, "pod": w.pod} for w in done]
        applied.extend(parse_cpus(write.cpus) for write in done if write.why)
        report["cpus"] = str(CPUSet().union(*applied))
        return report, self._actions(done, pods or {}), errors

    def _wanted(self, pods: Dict[str, PodPower], held: Dict[str, CPUSet],
                errors: List[Tuple[str, str]]) -> Dict[str, Tuple[str, str, str, str]]:
        """Each file a pod's annotations ask a value of: (value, pod, CPUs, the annotation); what cannot be set is
        an error of its CPU (kind power) or of its pod (kind annotation), and the pass goes on."""
        wanted: Dict[str, Tuple[str, str, str, str]] = {}
        for uid, pod in sorted(pods.items()):
            errors.extend((refusal, "annotation") for refusal in pod.refusals)
            mine = held.get(uid, CPUSet())
            asked = [setting[1] for setting in (pod.latency, pod.governor) if setting]
            if not mine:
                if pod.running and asked:
                    errors.append(("pod %s (%s) is annotated %s but holds no exclusive CPUs (only the containers of "
                                   "a Guaranteed pod that ask whole CPUs get them): no power setting applied"
                                   % (pod.ref, pod.qos or "QoS class not known", ", ".join(asked)), "annotation"))
                continue
            for cpu in mine:
                if pod.latency:
                    name = self.fs.latency_file(cpu)
                    if self.fs.exists(name):
                        wanted[name] = (pod.latency[0], uid, str(cpu), pod.latency[1])
                    else:
                        errors.append(("cpu%d has no %s: C-states not limited for pod %s"
                                       % (cpu, self._path(name), pod.ref), "power"))
                if pod.governor:
                    policy, why_not = self._policy(cpu, mine, pod)
                    if policy is None:
                        errors.append((why_not, "power"))
                    else:
                        wanted[policy.governor_file] = (pod.governor[0], uid, str(policy.cpus), pod.governor[1])
        return wanted

    def _policy(self, cpu: int, mine: CPUSet, pod: PodPower) -> Tuple[Optional[Policy], str]:
        """The cpufreq policy whose governor the pod may set for ``cpu``, or None and why not: the CPU has none, it
        does not offer the governor, or it also governs CPUs the pod does not hold."""
        value = pod.governor[0] if pod.governor else ""
        policy, why_not = self.fs.policy(cpu)
        if policy is None:
            return None, "%s: governor %s not set for pod %s" % (why_not, value, pod.ref)
        if value not in policy.available:
            return None, ("cpu%d offers the governors %s, not %s: not set for pod %s"
                          % (cpu, " ".join(policy.available) or "(none)", value, pod.ref))
        if not policy.cpus.issubset(mine):
            return None, ("cpu%d's cpufreq policy also governs CPUs %s, which pod %s does not hold: governor %s not "
                          "set" % (cpu, policy.cpus.difference(mine), pod.ref, value))
        return policy, ""

    def _write(self, write: _Write, files: Dict[str, Dict[str, Any]], errors: List[Tuple[str, str]]) -> bool:
        entry = files[write.name]
        try:
            self.fs.write(write.name, write.text)
        except OSError as exc:
            if exc.errno in _SYSTEMIC:
                raise CPUPowerError("cannot write %s: %s" % (self._path(write.name), exc.strerror or exc)) from None
            errors.append(("cannot write %s to %s: %s" % (write.after, self._path(write.name), exc.strerror or exc),
                           "power"))
            if write.why:  # not set: what it was is what it is
                entry["writing"] = None
                if entry["wrote"] is None:
                    del files[write.name]
            return False
        if write.why:
            entry.update(wrote=write.after, writing=None)
        else:
            del files[write.name]
        return True

    def _path(self, name: str) -> str:
        return os.path.join(self.fs.cpu_dir, name)

    @staticmethod
    def _actions(done: List[_Write], pods: Dict[str, PodPower]) -> List[Action]:
        """One action per pod, file kind and value: the CPUs it was written on."""
        grouped: Dict[Tuple[str, str, str, str], CPUSet] = {}
        for write in done:
            kind = write.name.rsplit("/", 1)[1]
            key = (write.pod, kind, write.after, write.why)
            grouped[key] = grouped.get(key, CPUSet()).union(parse_cpus(write.cpus))
        actions = []
        for (uid, kind, value, why), cpus in sorted(grouped.items()):
            reason = "%s %s (%s)" % (kind, value, why) if why else "%s given back: %s" % (kind, value)
            ref = pods[uid].ref if uid in pods else ""
            actions.append(Action("power", "", ref, uid, "", str(cpus), reason))
        return actions


def saw_pods(power: Optional[CpuPower], pairs: Iterable[Tuple[ListedContainer, ContainerInfo]]) -> None:
    """What a pass observed of the pods' annotations, for its power step."""
    if power is not None:
        power.pods = pod_powers(pairs)


def observe_pods(power: Optional[CpuPower], runtime: Optional[Runtime], cache: ContainerCache) -> Optional[str]:
    """Beside a kubelet that pins (no pass of kubecpu's own observes the runtime): the pods' annotations for the power
    step, from a list call and an inspection per new container; None, or why the runtime could not tell them (the
    step then sets nothing new and gives back only what a pod no longer holds)."""
    if power is None or runtime is None or not power.enabled:
        return None
    try:
        listed = runtime.list_containers()
        pairs, _inspected = cache.facts(runtime, listed, [])
    except ContainerRuntimeError as exc:
        power.pods = None
        return "pods' annotations not read (%s): power settings kept as they are" % exc
    cache.retain({item.id for item in listed})
    saw_pods(power, pairs)
    return None


def power_in_pass(power: Optional[CpuPower], plan: Plan, state: CPUState, apply: bool) -> None:
    """A pass's step after the interrupts: in ``plan.power`` and its actions; what fails is the plan's error (kind
    ``power``, or ``annotation`` for a pod's refused annotation), never the pass's: the containers are pinned all the
    same."""
    if power is None:
        return
    try:
        report, actions, errors = power.apply(state, apply)
    except CPUPowerError as exc:
        plan.error(None, str(exc), "power")
        return
    plan.power = report
    plan.actions.extend(actions)
    for message, kind in errors:
        plan.error(None, message, kind)


def power_info(state_path: Optional[str], root: Optional[str] = None) -> Dict[str, Any]:
    """What kubecpu has set (its record) and what each such file reads now, for ``cpu_manager_info`` and the fleet
    report: the CPUs with a setting, and per file its CPUs, pod, value set, value now and original."""
    record = PowerRecord(None if state_path is None else record_path(state_path))
    try:
        files = record.load()
    except CPUPowerError as exc:
        return {"cpus": "", "settings": [], "error": str(exc)}
    fs = CpuPowerFS(os.path.join(root or "/", "sys", "devices", "system", "cpu"))
    settings = []
    for name, entry in sorted(files.items()):
        now = fs.read(name)
        settings.append({"file": name, "cpus": entry["cpus"], "pod": entry["pod"], "set": entry["wrote"],
                         "now": None if now is None else now.strip(), "original": entry["original"].strip()})
    held = [parse_cpus(entry["cpus"]) for entry in files.values() if entry["wrote"] is not None]
    return {"cpus": str(CPUSet().union(*held)), "settings": settings}


def record_path(state_path: str) -> str:
    return state_path + RECORD_SUFFIX


def cpu_power(enabled: bool, state_path: Optional[str], root: Optional[str] = None) -> Optional[CpuPower]:
    """The power step a node's ``cpu_power`` setting asks for (None when off and nothing is left to give back);
    ``root``: where the machine's sysfs is (``sysfs_root``)."""
    record = None if state_path is None else record_path(state_path)
    if not enabled and (record is None or not os.path.exists(record)):
        return None
    return CpuPower(enabled, record, CpuPowerFS(os.path.join(root or "/", "sys", "devices", "system", "cpu")))
