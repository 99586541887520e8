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

from ..errors import CPUSetError, RestoreFailure
from .checkpoint import (_UINT64_MAX, V2_MAP, Restored, _attempt, _fold, _go_object, _GoNumber, _Object, _spew_entries,
                         _string, _string_map, _syntax, _TypeError, checksum, decode, encode, fnv1a32, go_json_string,
                         restored_state)
from .cpuset import CPUSet
from .kubelet_versions import KubeletVersion
from .state import CPUState

V3_NAMES = ("CPUManagerCheckpoint", "CPUManagerCheckpointV3")  # the 1.36 name, and 1.37's
_OUTER = ("policyName", "defaultCpuSet", "entries", "podEntries", "baselines", "checksum", "data", "dataChecksum")


# --- checksums -----------------------------------------------------------------------------------------------
def _spew_pod_entries(pods: Mapping[str, CPUSet]) -> str:
    """``state.PodCPUAssignments`` as spew dumps it: each CPU set as its map of CPU ids, sorted numerically."""
    return "map[%s]" % " ".join(
        "%s:{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[%s]}}" % (pod, " ".join("%d:{}" % cpu for cpu in cpus))
        for pod, cpus in sorted(pods.items()))


def v3_checksum(policy: str, default: str, entries: Mapping[str, Any], pods: Mapping[str, CPUSet],
                name: str = V3_NAMES[0]) -> int:
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
class _Fields:
    """The known fields of a checkpoint object, matched as Go's decoder matches them."""

    def __init__(self, doc: Any, struct: str) -> None:
        if not isinstance(doc, _Object):
            raise _TypeError("json: cannot unmarshal %s into Go value of type state.%s" % (
                "array" if isinstance(doc, list) else "string" if isinstance(doc, str) else "number", struct))
        folded = {_fold(name): name for name in _OUTER}
        self.values: Dict[str, Any] = {}
        for key, value in doc:
            name = key if key in _OUTER else folded.get(_fold(key))
            if name is not None:
                self.values[name] = value
        self.struct = struct

    def string(self, name: str) -> str:
        return _string(self.values.get(name), name, self.struct) or ""

    def number(self, name: str) -> int:
        value = self.values.get(name)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or isinstance(value, _GoNumber) or not (
                0 <= value <= _UINT64_MAX):
            raise _TypeError("json: cannot unmarshal %s into Go struct field %s.%s of type checksum.Checksum" % (
                "number" if isinstance(value, (int, _GoNumber)) else "string", self.struct, name))
        return value

    def entries(self) -> Dict[str, Dict[str, str]]:
        value = self.values.get("entries")
        if value is None:
            return {}
        if not isinstance(value, _Object):
            raise _TypeError("json: cannot unmarshal %s into Go struct field %s.entries of type "
                             "map[string]map[string]string" % ("string" if isinstance(value, str) else "array",
                                                               self.struct))
        return {pod: _string_map(inner, "entries", self.struct) or {} for pod, inner in value}

    def pods(self) -> Dict[str, CPUSet]:
        value = self.values.get("podEntries")
        pods: Dict[str, CPUSet] = {}
        for pod, entry in value if isinstance(value, _Object) else []:
            text = ""
            for key, inner in entry if isinstance(entry, _Object) else []:
                if _fold(key) == "cpuset":
                    text = _string(inner, "cpuSet", "podEntryJSON") or ""
            try:
                pods[pod] = CPUSet.parse(text or "")
            except CPUSetError as exc:
                raise RestoreFailure('could not parse cpuset "%s" for pod "%s": %s' % (text, pod, exc.detail)) from None
        return pods

    def baselines(self) -> Dict[str, Dict[str, str]]:
        value = self.values.get("baselines")
        out: Dict[str, Dict[str, str]] = {}
        for pod, items in value if isinstance(value, _Object) else []:
            for name, entry in items if isinstance(items, _Object) else []:
                base = next((v for k, v in entry if _fold(k) == "baseline"), "") if isinstance(entry, _Object) else ""
                out.setdefault(pod, {})[name] = base if isinstance(base, str) else ""
        return out


def _v3(doc: Any, names: Tuple[str, ...]) -> Tuple[Dict[str, Any], Dict[str, CPUSet]]:
    """V3: the stored checksum must be the V3 dump under one of ``names`` (0 is not accepted)."""
    fields = _Fields(doc, "CPUManagerCheckpointV3")
    policy, default = fields.string("policyName"), fields.string("defaultCpuSet")
    entries, pods = fields.entries(), fields.pods()
    stored = fields.number("checksum")
    if not any(stored == v3_checksum(policy, default, entries, pods, name) for name in names):
        raise RestoreFailure("checkpoint is corrupted")
    return {"policy": policy, "default": default, "entries": entries}, pods


def _v4(doc: Any) -> Tuple[Dict[str, Any], Dict[str, CPUSet], Dict[str, Dict[str, str]]]:
    outer = _Fields(doc, "CPUManagerCheckpoint")
    data = outer.string("data")
    stored = outer.number("dataChecksum")
    try:
        inner = _Fields(_syntax(data), "CPUManagerCheckpointData")
    except RestoreFailure as exc:
        raise RestoreFailure("failed to deserialize cpu manager checkpoint data: %s" % exc) from None
    if stored != data_checksum(data):
        raise RestoreFailure("checkpoint is corrupted")
    fields = {"policy": inner.string("policyName"), "default": inner.string("defaultCpuSet"),
              "entries": inner.entries()}
    return fields, inner.pods(), inner.baselines()


def read(data: bytes, policy_name: str, version: KubeletVersion,
         initial_containers: Optional[Mapping[str, Tuple[str, str]]] = None) -> Restored:
    """Restore ``data`` as kubelet ``version`` does; RestoreFailure with its text otherwise."""
    if version.minor <= 35:
        return decode(data, policy_name, initial_containers)
    doc = _syntax(data.decode("utf-8", "replace"))
    pods: Dict[str, CPUSet] = {}
    baselines: Dict[str, Dict[str, str]] = {}
    fields: Optional[Dict[str, Any]] = None
    kind = ""
    errors: List[str] = []
    if version.minor >= 37:
        try:
            fields, pods, baselines = _v4(doc)
            kind = "v4"
        except (RestoreFailure, _TypeError) as exc:
            outer = doc if isinstance(doc, _Object) else _Object()
            present = {_fold(k) for k, _v in outer}
            if "data" in present or "datachecksum" in present:
                raise RestoreFailure("could not load v4 checkpoint: %s" % exc) from None
    attempts = ["v3", "v2"] if version.minor >= 37 or version.pod_level else ["v2"]
    for attempt in attempts if fields is None else []:
        try:
            if attempt == "v3":
                fields, pods = _v3(doc, V3_NAMES if version.minor >= 37 else V3_NAMES[:1])
            else:
                policy, default, entries, _stored = _attempt(doc, "v2")
                fields = {"policy": policy, "default": default, "entries": entries}
            kind = attempt
            break
        except (RestoreFailure, _TypeError) as exc:
            errors.append(str(exc))
    if fields is None and version.minor == 36:  # 1.36 goes on to V1, and fails with that last attempt's error
        try:
            _attempt(doc, "v1")
        except (RestoreFailure, _TypeError) as exc:
            raise RestoreFailure(str(exc)) from None
        return decode(data, policy_name, initial_containers)  # V1 verifies: migrated as 1.35 does
    if fields is None:
        raise RestoreFailure(errors[-1])
    return _restored(fields, pods, baselines, kind, policy_name=policy_name, version=version)


def _restored(fields: Dict[str, Any], pods: Dict[str, CPUSet], baselines: Dict[str, Dict[str, str]], kind: str, *,
              policy_name: str, version: KubeletVersion) -> Restored:
    state = CPUState(policy_name, pod_entries=pods, baselines=baselines, pod_level=version.pod_level)
    return Restored(restored_state(fields["policy"], fields["default"], fields["entries"], policy_name, state), kind, 0)
