# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The checkpoint as each kubelet version reads and writes it (KUBELET_VERSIONS.md part A): V2 (``checkpoint``),
V3 (1.36 with ``PodLevelResourceManagers``: V2 plus ``podEntries``, its own checksum) and V4 (1.37 on: the V2 fields
inline with their real V2 checksum, then ``data``, a JSON string with ``policyName``, ``defaultCpuSet``,
``entries``, ``podEntries`` and ``baselines``, and ``dataChecksum``, FNV-1a of ``"(string)" + data``).

``write`` gives the bytes a kubelet version writes; ``read`` restores a file as that version does, with its
fallback order, acceptance and refusal texts. Choices where KUBELET_VERSIONS.md says "not confirmed" (docs/
KUBELET_VERSIONS.md has them too): the V4 legacy checksum is the real V2 checksum (what ≤1.36 readers verify;
either value is accepted there); ``baselines`` is omitted when empty, like ``entries``; 1.37 verifies a V3
fallback as 1.36 does (checksum 0 not accepted), under either type name; a 1.38 kubelet reads and writes as 1.37.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import CPUSetError, RestoreFailure, TypeMismatch
from .checkpoint import (DEFAULT_SET_135, DEFAULT_SET_137, MIGRATION_136, V2_MAP, Restored, _attempt, _go_object,
                         _spew_entries, checksum, decode, encode, fnv1a32, go_json_string, restored_state)
from .cpuset import CPUSet
from .go_json import BASELINES, CHECKSUM, ENTRIES, POD_ENTRIES, STRING, Struct, parse
from .kubelet_versions import EXCLUSIVE_RESIZE, KubeletVersion
from .options import go_quote
from .state import CPUState

V3_NAMES = ("CPUManagerCheckpoint", "CPUManagerCheckpointV3")  # the 1.36 name, and 1.37's
_V2_PART = {"policyName": STRING, "defaultCpuSet": STRING, "entries": ENTRIES}
V3_STRUCTS = {name: Struct(name, dict(_V2_PART, podEntries=POD_ENTRIES, checksum=CHECKSUM)) for name in V3_NAMES}
V4_STRUCT = Struct("CPUManagerCheckpoint", dict(_V2_PART, checksum=CHECKSUM, data=STRING, dataChecksum=CHECKSUM),
                   embedded=dict.fromkeys(list(_V2_PART) + ["checksum"], "CPUManagerCheckpointV2"))
DATA_STRUCT = Struct("CPUManagerCheckpointData", dict(_V2_PART, podEntries=POD_ENTRIES, baselines=BASELINES))


# --- checksums -----------------------------------------------------------------------------------------------
def _spew_pod_entries(pods: Optional[Mapping[str, CPUSet]]) -> str:
    """``state.PodCPUAssignments`` as spew dumps it: each CPU set as its map of CPU ids, sorted numerically."""
    if pods is None:
        return "<nil>"
    return "map[%s]" % " ".join(
        "%s:{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[%s]}}" % (pod, " ".join("%d:{}" % cpu for cpu in cpus))
        for pod, cpus in sorted(pods.items()))


def v3_checksum(policy: str, default: str, entries: Optional[Mapping[str, Any]],
                pods: Optional[Mapping[str, CPUSet]], name: str = V3_NAMES[0]) -> int:
    text = ("(*state.%s){PolicyName:(string)%s DefaultCPUSet:(string)%s Entries:(%s)%s PodEntries:"
            "(state.PodCPUAssignments)%s Checksum:(checksum.Checksum)0}" % (
                name, policy, default, V2_MAP, _spew_entries(entries), _spew_pod_entries(pods)))
    return fnv1a32(text.encode("utf-8", "surrogatepass"))


def data_checksum(data: str) -> int:
    """checksum.New of a Go string: spew prints ``(string)`` and the raw content."""
    return fnv1a32(("(string)" + data).encode("utf-8", "surrogatepass"))


# --- writing -------------------------------------------------------------------------------------------------
def _entries_json(entries: Mapping[str, Mapping[str, CPUSet]]) -> str:
    return _go_object([(pod, _go_object([(name, go_json_string(str(cpus))) for name, cpus in sorted(inner.items())]))
                       for pod, inner in sorted(entries.items())])


def _pods_json(pods: Mapping[str, CPUSet]) -> str:
    return _go_object([(pod, '{"cpuSet":%s}' % go_json_string(str(cpus)) if cpus else "{}")
                       for pod, cpus in sorted(pods.items())])


def _data(state: CPUState, version: KubeletVersion) -> str:
    parts = ['"policyName":%s' % go_json_string(state.policy_name),
             '"defaultCpuSet":%s' % go_json_string(str(state.default))]
    if state.entries:
        parts.append('"entries":' + _entries_json(state.entries))
    if state.pod_entries:
        parts.append('"podEntries":' + _pods_json(state.pod_entries))
    if state.baselines:
        pods = []
        for pod, items in sorted(state.baselines.items()):
            inner = [(name, '{"baseline":%s}' % go_json_string(base)) for name, base in sorted(items.items())]
            pods.append((pod, _go_object(inner)))
        parts.append('"baselines":' + _go_object(pods))
    return "{%s}" % ",".join(parts)


def write(state: CPUState, version: KubeletVersion) -> bytes:
    """The bytes kubelet ``version`` writes for ``state``."""
    kind = version.writes
    if kind == "v2":
        return encode(state)
    head = '{"policyName":%s,"defaultCpuSet":%s' % (go_json_string(state.policy_name),
                                                    go_json_string(str(state.default)))
    if state.entries:
        head += ',"entries":' + _entries_json(state.entries)
    if kind == "v3":
        if state.pod_entries:
            head += ',"podEntries":' + _pods_json(state.pod_entries)
        stored = v3_checksum(state.policy_name, str(state.default), _strings(state.entries), state.pod_entries)
        text = head + ',"checksum":%d}' % stored
        return text.encode("utf-8", "surrogatepass")
    data = _data(state, version)
    legacy = checksum(state.policy_name, str(state.default), _strings(state.entries))
    text = head + ',"checksum":%d,"data":%s,"dataChecksum":%d}' % (legacy, go_json_string(data), data_checksum(data))
    return text.encode("utf-8", "surrogatepass")


def _strings(entries: Mapping[str, Mapping[str, CPUSet]]) -> Dict[str, Dict[str, str]]:
    return {pod: {name: str(cpus) for name, cpus in inner.items()} for pod, inner in entries.items()}


# --- reading ---------------------------------------------------------------------------------------------------
Fields = Dict[str, Any]  # policy, default, entries


class _V4Failed(Exception):
    """The V4 attempt failed; ``hard`` when the file has ``data`` or a ``dataChecksum`` (1.37: no fallback)."""

    def __init__(self, message: str, hard: bool) -> None:
        super().__init__(message)
        self.hard = hard


def _decoded(struct: Struct, doc: Any) -> Fields:
    decoded = struct.decode(doc)
    if decoded.error is not None:
        raise decoded.error
    return decoded.values


def _v3(doc: Any, name: str, names: Tuple[str, ...]) -> Tuple[Fields, Dict[str, CPUSet]]:
    """V3: every field decoded as the struct ``name`` is, then the stored checksum must be the V3 dump under one of
    ``names`` (0 is not accepted)."""
    values = _decoded(V3_STRUCTS[name], doc)
    policy, default, entries, pods = (values[key] for key in ("policyName", "defaultCpuSet", "entries", "podEntries"))
    if not any(values["checksum"] == v3_checksum(policy, default, entries, pods, each) for each in names):
        raise RestoreFailure("checkpoint is corrupted")
    return {"policy": policy, "default": default, "entries": entries or {}}, pods or {}


def _v4(doc: Any) -> Tuple[Fields, Dict[str, CPUSet], Dict[str, Dict[str, str]]]:
    """V4 as 1.37 reads it: the outer struct (its inline V2 part included), ``data`` into CheckpointData, then
    ``dataChecksum``."""
    outer = V4_STRUCT.decode(doc)
    data, stored = outer.values["data"], outer.values["dataChecksum"]
    hard = bool(data) or stored != 0
    if outer.error is not None:  # checkpoint.go UnmarshalCheckpoint
        raise _V4Failed("failed to deserialize cpu manager checkpoint: %s" % outer.error, hard)
    try:
        inner = _decoded(DATA_STRUCT, parse(data))
    except (RestoreFailure, TypeMismatch) as exc:
        raise _V4Failed("failed to deserialize cpu manager checkpoint data: %s" % exc, hard) from None
    if stored != data_checksum(data):
        raise _V4Failed("checkpoint is corrupted", hard)
    fields = {"policy": inner["policyName"], "default": inner["defaultCpuSet"], "entries": inner["entries"] or {}}
    baselines = {pod: dict(items) for pod, items in (inner["baselines"] or {}).items() if items is not None}
    return fields, inner["podEntries"] or {}, baselines


def read(data: bytes, policy_name: str, version: KubeletVersion,
         initial_containers: Optional[Mapping[str, Tuple[str, str]]] = None) -> Restored:
    """Restore ``data`` as kubelet ``version`` does; RestoreFailure with its text otherwise."""
    if version.minor <= 35:
        return decode(data, policy_name, initial_containers)
    doc = parse(data)
    pods: Dict[str, CPUSet] = {}
    baselines: Dict[str, Dict[str, str]] = {}
    fields: Optional[Fields] = None
    kind = ""
    errors: List[str] = []
    if version.minor >= 37:
        try:
            fields, pods, baselines = _v4(doc)
            kind = "v4"
        except _V4Failed as exc:
            if exc.hard:
                raise RestoreFailure("could not load v4 checkpoint: %s" % exc) from None
    attempts = ["v3", "v2"] if version.minor >= 37 or version.pod_level else ["v2"]
    for attempt in attempts if fields is None else []:
        try:
            if attempt == "v3":
                fields, pods = (_v3(doc, V3_NAMES[1], V3_NAMES) if version.minor >= 37 else
                                _v3(doc, V3_NAMES[0], V3_NAMES[:1]))
            else:
                policy, default, entries, _stored = _attempt(doc, "v2")
                fields = {"policy": policy, "default": default, "entries": entries}
            kind = attempt
            break
        except (RestoreFailure, TypeMismatch) as exc:
            errors.append(str(exc))
    if fields is None and version.minor == 36:  # 1.36 goes on to V1, and fails with that last attempt's error
        try:
            _attempt(doc, "v1")
        except (RestoreFailure, TypeMismatch) as exc:
            raise RestoreFailure(str(exc)) from None
        return decode(data, policy_name, initial_containers, MIGRATION_136)  # V1 verifies: migrated as 1.35 does
    if fields is None:
        raise RestoreFailure(errors[-1])
    return _restored(fields, pods, baselines, kind, policy_name=policy_name, version=version)


def _restored(fields: Dict[str, Any], pods: Dict[str, CPUSet], baselines: Dict[str, Dict[str, str]], kind: str, *,
              policy_name: str, version: KubeletVersion) -> Restored:
    """The checks after the load (state_checkpoint.go restoreState): the policy name, the default set, each entry's
    set, then from 1.37 with InPlacePodVerticalScalingExclusiveCPUs on, each baseline's set."""
    state = CPUState(policy_name, pod_entries=pods, baselines=baselines, pod_level=version.pod_level)
    words = DEFAULT_SET_137 if version.minor >= 37 else DEFAULT_SET_135
    restored = restored_state(fields["policy"], fields["default"], fields["entries"], policy_name, state,
                              default_set_text=words)
    if version.minor >= 37 and version.gate(EXCLUSIVE_RESIZE):
        for pod in sorted(baselines):
            for name, cpus in sorted(baselines[pod].items()):
                try:
                    CPUSet.parse(cpus)
                except CPUSetError as exc:
                    raise RestoreFailure("could not parse Baseline cpuset %s for container %s in pod %s: %s" % (
                        go_quote(cpus), go_quote(name), go_quote(pod), exc.detail)) from None
    return Restored(restored, kind, 0)
