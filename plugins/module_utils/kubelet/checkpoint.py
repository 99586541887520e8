# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet's ``cpu_manager_state`` checkpoint (ALGORITHM.md section 17).

``encode`` writes exactly the bytes the kubelet writes (Go ``json.Marshal`` of the v2 struct with the
kubelet's checksum); ``decode`` restores a file as the kubelet's ``restoreState`` does: a v1 attempt,
then v2, Go's JSON key matching, a stored checksum of 0 accepted, v1 entries migrated through the
container map, then the policy name and the CPU sets checked.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from ..errors import CPUSetError, RestoreFailure, TypeMismatch
from .cpuset import CPUSet
from .go_json import CHECKSUM, ENTRIES, STRING, STRING_MAP, Struct, parse
from .options import go_quote
from .state import CPUState

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619
V2_FIELDS = ("policyName", "defaultCpuSet", "entries", "checksum")
_SURROGATE = re.compile("[\ud800-\udfff]")
V2_MAP = "map[string]map[string]string"
V1_MAP = "map[string]string"


class Restored(NamedTuple):
    state: CPUState
    version: str  # "v1" or "v2"
    checksum: int


def fnv1a32(data: bytes) -> int:
    """Go's hash/fnv New32a, eight bytes a step.

    Masking once a step is exact: the low 32 bits of a product depend only on the factors' low 32 bits,
    and XOR with a byte touches only the low eight.
    """
    value = FNV32_OFFSET
    whole = len(data) - len(data) % 8
    p = FNV32_PRIME
    for b0, b1, b2, b3, b4, b5, b6, b7 in struct.iter_unpack("8B", data[:whole]):
        value = (((((((((value ^ b0) * p ^ b1) * p ^ b2) * p ^ b3) * p ^ b4) * p ^ b5) * p ^ b6) * p ^ b7) * p
                 & 0xFFFFFFFF)
    for byte in data[whole:]:
        value = ((value ^ byte) * p) & 0xFFFFFFFF
    return value


def _spew_map(value: Any, order: Callable[[Iterable[Tuple[str, Any]]], List[Tuple[str, Any]]] = sorted) -> str:
    """spew's %#v of a map with SortKeys/SpewKeys: ``map[k:v ...]`` sorted, ``<nil>`` for a nil map."""
    if value is None:
        return "<nil>"
    return "map[%s]" % " ".join("%s:%s" % (key, inner if isinstance(inner, str) else _spew_map(inner, order))
                                for key, inner in order(value.items()))


def _byte_order(items: Iterable[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """Go's map-key order: UTF-8 bytes (the same as code points unless a key holds a lone surrogate)."""
    return sorted(items, key=lambda item: item[0].encode("utf-8", "surrogatepass"))


def _spew_entries(entries: Optional[Mapping[str, Any]]) -> str:
    spewed = _spew_map(entries)
    if not spewed.isascii() and _SURROGATE.search(spewed):
        spewed = _spew_map(entries, _byte_order)
    return spewed


def _checksum_of(policy_name: str, default: str, kind: str, spewed: str) -> int:
    text = ("(*state.CPUManagerCheckpoint){PolicyName:(string)%s DefaultCPUSet:(string)%s Entries:(%s)%s "
            "Checksum:(checksum.Checksum)0}" % (policy_name, default, kind, spewed))
    return fnv1a32(text.encode("utf-8", "surrogatepass"))


def checksum(policy_name: str, default: str, entries: Optional[Mapping[str, Any]], version: str = "v2") -> int:
    """checksum.New of the checkpoint struct (Checksum field 0), as the kubelet computes it."""
    kind = V2_MAP if version == "v2" else V1_MAP
    return _checksum_of(policy_name, default, kind, _spew_entries(entries))


# --- writing ----------------------------------------------------------------------------------------
_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
               "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json_string(text: str) -> str:
    """A string as Go's encoding/json writes it (HTML-safe escaping, raw UTF-8 otherwise)."""
    out = ['"']
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char < " ":
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _go_object(pairs: List[Tuple[str, str]]) -> str:
    return "{%s}" % ",".join("%s:%s" % (go_json_string(k), v) for k, v in pairs)


def _plain_entries(entries: Mapping[str, Mapping[str, object]]) -> Optional[Tuple[str, str]]:
    """The JSON object and the spew map of entries in one pass, when no name or set needs escaping
    (printable ASCII without ``"`` ``\\`` ``<`` ``>`` ``&``: sorted by code point is sorted by byte); else None."""
    json_parts, spew_parts = [], []
    for pod, containers in sorted(entries.items()):
        if len(containers) == 1:  # the common pod: formatting it directly keeps a 250-pod encode 1.5x faster
            for name, cpus in containers.items():
                json_parts.append('"%s":{"%s":"%s"}' % (pod, name, cpus))
                spew_parts.append("%s:map[%s:%s]" % (pod, name, cpus))
        else:
            items = sorted(containers.items())
            json_parts.append('"%s":{%s}' % (pod, ",".join(['"%s":"%s"' % item for item in items])))
            spew_parts.append("%s:map[%s]" % (pod, " ".join(["%s:%s" % item for item in items])))
    spewed = "map[%s]" % " ".join(spew_parts)
    if not (spewed.isascii() and spewed.isprintable()) or any(char in spewed for char in '"\\<>&'):
        return None
    return "{%s}" % ",".join(json_parts), spewed


def _encode_fields(policy_name: str, default: str, entries: Mapping[str, Mapping[str, object]]) -> bytes:
    """Go's json.Marshal of the v2 struct with its checksum (entries omitted when empty); sets may be
    CPUSets or their strings."""
    plain = _plain_entries(entries)
    if plain is not None:
        blob, spewed = plain
    else:
        strings = {pod: {name: str(cpus) for name, cpus in containers.items()} for pod, containers in entries.items()}
        blob = _go_object([(pod, _go_object([(name, go_json_string(cpus)) for name, cpus in _byte_order(
            inner.items())])) for pod, inner in _byte_order(strings.items())])
        spewed = _spew_entries(strings)
    text = '{"policyName":%s,"defaultCpuSet":%s' % (go_json_string(policy_name), go_json_string(default))
    if entries:
        text += ',"entries":' + blob
    text += ',"checksum":%d}' % _checksum_of(policy_name, default, V2_MAP, spewed)
    return text.encode("utf-8", "surrogatepass")


def encode(state: CPUState) -> bytes:
    """The file content the kubelet writes for ``state``: compact v2 JSON with its checksum."""
    return _encode_fields(state.policy_name, str(state.default), state.entries)


# --- reading (Go encoding/json semantics: go_json) ------------------------------------------------------------
V1_STRUCT = Struct("CPUManagerCheckpointV1", {"policyName": STRING, "defaultCpuSet": STRING, "entries": STRING_MAP,
                                              "checksum": CHECKSUM})
_V2_FIELDS = {"policyName": STRING, "defaultCpuSet": STRING, "entries": ENTRIES, "checksum": CHECKSUM}
V2_STRUCT = Struct("CPUManagerCheckpointV2", _V2_FIELDS)  # 1.36 on: a struct of its own
V2_STRUCT_135 = Struct("CPUManagerCheckpoint", _V2_FIELDS)  # 1.35: CPUManagerCheckpointV2 is an alias of this one
# The refusals of a checkpoint's content (state_checkpoint.go restoreState): 1.37 spells the default set's with "CPU".
DEFAULT_SET_135 = "could not parse default cpu set %s: %s"
DEFAULT_SET_137 = "could not parse default CPU set %s: %s"
MIGRATION_135 = "error migrating v1 checkpoint state to v2 checkpoint state: %s"
MIGRATION_136 = "failed to migrate checkpoint from v1 to v2: %s"


def _attempt(doc: Any, version: str, struct: Optional[Struct] = None) -> Tuple[str, str, Dict[str, Any], int]:
    """json.Unmarshal into a fresh CPUManagerCheckpointV1/V2 (``struct``: the V2 struct as that kubelet names it),
    then its checksum (0 accepted)."""
    decoded = (V1_STRUCT if version == "v1" else struct or V2_STRUCT).decode(doc)
    if decoded.error is not None:
        raise decoded.error
    values = decoded.values
    policy, default, entries, stored = (values[field] for field in V2_FIELDS)
    if stored != 0 and stored != checksum(policy, default, entries, version):
        raise RestoreFailure("checkpoint is corrupted")
    return policy, default, entries or {}, stored


def _canonical(data: bytes) -> Optional[Tuple[str, str, Dict[str, Any], int]]:
    """The fields of a v2 file with entries, when its bytes are exactly what ``encode`` writes, else None.

    Such a file restores the same way under Go's rules (no folded or repeated keys, its checksum right, a
    failed v1 attempt), so plain JSON reads it; anything else takes the full Go-semantics path.
    """
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # Go's reading words the refusal
        return None
    if not isinstance(doc, dict) or len(doc) != len(V2_FIELDS):
        return None
    policy, default, entries, stored = (doc.get(field) for field in V2_FIELDS)
    if not (isinstance(policy, str) and isinstance(default, str) and isinstance(entries, dict) and entries
            and isinstance(stored, int) and not isinstance(stored, bool)):
        return None
    for containers in entries.values():
        if not isinstance(containers, dict) or not all(isinstance(cpus, str) for cpus in containers.values()):
            return None
    if _encode_fields(policy, default, entries) != data:
        return None
    return policy, default, entries, stored


def decode(data: bytes, policy_name: str, initial_containers: Optional[Mapping[str, Tuple[str, str]]] = None,
           migration: str = MIGRATION_135) -> Restored:
    """Restore a checkpoint as the 1.35 kubelet does; raises RestoreFailure with the kubelet's inner text.

    ``initial_containers`` maps container IDs to (pod UID, container name) for v1 migration; ``migration`` is how
    the kubelet words a failed one (1.36 words it as ``MIGRATION_136``).
    """
    canonical = _canonical(data)
    if canonical is not None:
        policy, default, entries, stored = canonical
        version = "v2"
    else:
        doc = parse(data)
        try:
            policy, default, entries, stored = _attempt(doc, "v1")
            version = "v1"
        except (RestoreFailure, TypeMismatch):
            try:
                policy, default, entries, stored = _attempt(doc, "v2", V2_STRUCT_135)
            except TypeMismatch as exc:
                raise RestoreFailure(str(exc)) from None
            version = "v2"
    if version == "v1":
        migrated: Dict[str, Dict[str, str]] = {}
        for container_id, cpus in entries.items():
            if container_id not in (initial_containers or {}):
                raise RestoreFailure(migration % ("containerID '%s' not found in initial containers list"
                                                  % container_id))
            pod, name = (initial_containers or {})[container_id]
            migrated.setdefault(pod, {})[name] = cpus
        entries = migrated
    return Restored(restored_state(policy, default, entries, policy_name), version, stored)


def restored_state(policy: str, default: str, entries: Mapping[str, Any], policy_name: str,
                   state: Optional[CPUState] = None, *, default_set_text: str = DEFAULT_SET_135) -> CPUState:
    """The checks after a restore, in the kubelet's order and words (Go's %q quoting): the policy name, the default
    set (``default_set_text``: 1.37 words it as ``DEFAULT_SET_137``), each entry's set. ``state`` (fresh, its other
    fields filled) receives them."""
    if policy != policy_name:
        raise RestoreFailure("configured policy %s differs from state checkpoint policy %s" % (
            go_quote(policy_name), go_quote(policy)))
    try:
        default_set = CPUSet.parse(default)
    except CPUSetError as exc:
        raise RestoreFailure(default_set_text % (go_quote(default), exc.detail)) from None
    state = state if state is not None else CPUState(policy)
    state.default = default_set
    for pod in sorted(entries):
        for name, cpus in sorted((entries[pod] or {}).items()):
            try:
                state.set(pod, name, CPUSet.parse(cpus))  # the same text: the same set, parsed once
            except CPUSetError as exc:
                raise RestoreFailure("could not parse cpuset %s for container %s in pod %s: %s" % (
                    go_quote(cpus), go_quote(name), go_quote(pod), exc.detail)) from None
    return state


def empty_file(policy_name: str) -> bytes:
    """What the kubelet writes when it finds no checkpoint: the policy, no CPUs, no entries."""
    return encode(CPUState(policy_name))
