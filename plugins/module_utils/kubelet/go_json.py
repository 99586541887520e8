# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What Go's ``encoding/json`` makes of a checkpoint's bytes: the kubelet reads ``cpu_manager_state`` with
``json.Unmarshal`` into its checkpoint structs, and a file kubecpu reads must be one the kubelet reads, with the same
values, or one both refuse.

The rules kept (Go's ``encoding/json``): a key matches a field by exact name, else case-insensitively (Unicode simple
folding: ``ſ`` is ``s``, the Kelvin sign is ``k``); unknown keys are ignored; a repeated key decodes again (the last
string wins, a map gains the keys); ``null`` leaves a string or number as it was and makes a map nil; a value of the
wrong JSON type for its field is an error, saved while the rest is decoded, and returned at the end (the first
one); an unsigned field takes only an integer literal without a sign that fits in 64 bits; invalid UTF-8 and lone
surrogates in strings become U+FFFD; a field whose type unmarshals itself (``PodEntry``) ends the decoding at its first
error. ``Struct.decode`` does this for one struct of kinds named below. ``parse`` refuses what Go's syntax check
(``checkValid``, which runs before any decoding) refuses, in its words.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

from ..errors import CPUSetError, RestoreFailure, TypeMismatch
from .cpuset import CPUSet
from .go_json_syntax import syntax_error

__all__ = ["TypeMismatch"]  # defined in errors.py; importable from here as before

UINT64_MAX = (1 << 64) - 1
# Field kinds, with the Go type an error names.
STRING, CHECKSUM, STRING_MAP, ENTRIES, POD_ENTRIES, BASELINES = (
    "string", "checksum.Checksum", "map[string]string", "map[string]map[string]string", "state.PodCPUAssignments",
    "map[string]map[string]state.ContainerCPUs")


class GoNumber(str):
    """A JSON number literal that is not an integer without a sign (Go refuses it for an unsigned field)."""


class Object(List[Tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in document order."""


def fold(name: str) -> str:
    return name.lower().replace("\u017f", "s")


def fix_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if any(
        "\ud800" <= c <= "\udfff" for c in text) else text


def _integer(literal: str) -> Any:
    """An integer literal; one with a sign, or too long for any uint64 (Python's int() also refuses very long ones),
    stays a GoNumber: an unsigned field refuses it, naming its text."""
    return GoNumber(literal) if literal.startswith("-") or len(literal) > 20 else int(literal)


class _NotForGo(ValueError):
    """A literal Python's json reads and Go's does not (NaN, Infinity)."""


def _not_for_go(name: str) -> Any:
    raise _NotForGo(name)


def parse(data: Union[bytes, str]) -> Any:
    """The JSON document (bytes are read as UTF-8, an invalid sequence as U+FFFD), or RestoreFailure with Go's text
    where Go's syntax check refuses it."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        return json.loads(text, parse_float=GoNumber, parse_int=_integer, parse_constant=_not_for_go,
                          object_pairs_hook=Object)
    except (ValueError, RecursionError) as exc:
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        raise RestoreFailure(syntax_error(raw) or "invalid JSON: %s" % exc) from None


def go_type(value: Any) -> str:
    if isinstance(value, Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, GoNumber)):
        return "number"
    return "string"


def _mismatch(value: Any, struct: str, field: str, kind: str) -> TypeMismatch:
    shown = go_type(value)
    if shown == "number" and kind == CHECKSUM:  # a literal that does not fit is named with its text
        shown = "number %s" % value
    return TypeMismatch(shown, struct, field, kind)


def string(value: Any, struct: str, field: str, kind: str = STRING) -> Optional[str]:
    """A string field's value; None for null (the field keeps its value)."""
    if value is None:
        return None
    if isinstance(value, str) and not isinstance(value, GoNumber):
        return fix_surrogates(value)
    raise _mismatch(value, struct, field, kind)


def string_map(value: Any, struct: str, field: str) -> Optional[Dict[str, str]]:
    """A ``map[string]string``; None for null. A null value is the zero value, ""."""
    if value is None:
        return None
    if not isinstance(value, Object):
        raise _mismatch(value, struct, field, STRING_MAP)
    out: Dict[str, str] = {}
    first: Optional[TypeMismatch] = None
    for key, inner in value:
        try:
            out[fix_surrogates(key)] = string(inner, struct, field) or ""
        except TypeMismatch as exc:
            first = first or exc
    if first is not None:
        raise _Partial(first, out)
    return out


class _Partial(TypeMismatch):
    """A map decoded with a saved error: what it holds so far, and that error."""

    def __init__(self, error: TypeMismatch, partial: Any) -> None:
        super().__init__(error.value, error.struct, error.field, error.go_type)
        self.partial = partial


class Decoded(NamedTuple):
    values: Dict[str, Any]  # by field name; absent fields hold their zero value ("", 0, {} unless a null made it None)
    error: Optional[TypeMismatch]  # the first saved error: the whole decoding failed


class Struct:
    """One Go struct: its name (for errors) and its JSON fields with their kinds. ``embedded`` names, for the fields
    of an embedded struct, that struct's type: Go's errors name such a field by its path through it
    (``CPUManagerCheckpoint.CPUManagerCheckpointV2.policyName``)."""

    def __init__(self, name: str, fields: Mapping[str, str], embedded: Optional[Mapping[str, str]] = None) -> None:
        self.name = name
        self.fields = dict(fields)
        self._folded = {fold(field): field for field in self.fields}
        self._paths = {field: "%s.%s" % (inner, field) for field, inner in (embedded or {}).items()}

    def zero(self) -> Dict[str, Any]:
        return {field: "" if kind == STRING else 0 if kind == CHECKSUM else {} for field, kind in self.fields.items()}

    def decode(self, doc: Any, path: str = "") -> Decoded:
        """json.Unmarshal of ``doc`` into a fresh struct (its maps made empty, as the kubelet's constructors do).
        Raises TypeMismatch at once for an error that ends the decoding (a PodEntry's own). ``path``: the fields
        above it when it is nested (Go names an error by the innermost struct and the whole field path)."""
        values = self.zero()
        if doc is None:
            return Decoded(values, None)
        if not isinstance(doc, Object):
            return Decoded(values, TypeMismatch(go_type(doc), go_type="state." + self.name))
        first: Optional[TypeMismatch] = None
        for key, value in doc:
            field = key if key in self.fields else self._folded.get(fold(key))
            if field is None:
                continue
            try:
                values[field] = self._value(self.fields[field], path + self._paths.get(field, field), value,
                                            values[field])
            except _Partial as exc:
                values[field] = exc.partial
                first = first or exc
            except TypeMismatch as exc:
                first = first or exc
        return Decoded(values, first)

    def _value(self, kind: str, field: str, value: Any, before: Any) -> Any:
        if kind == STRING:
            text = string(value, self.name, field)
            return before if text is None else text
        if kind == CHECKSUM:
            if value is None:
                return before
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT64_MAX:
                raise _mismatch(value, self.name, field, CHECKSUM)
            return value
        if value is None:  # every other kind is a map: null makes it nil
            return None
        if not isinstance(value, Object):
            raise _mismatch(value, self.name, field, kind)
        merged = dict(before or {})  # a map already made gains the keys
        if kind == STRING_MAP:
            return self._merge(merged, value, lambda inner: string(inner, self.name, field) or "")
        if kind == ENTRIES:
            return self._merge(merged, value, lambda inner: string_map(inner, self.name, field))
        if kind == POD_ENTRIES:
            for pod, entry in value:
                try:
                    merged[fix_surrogates(pod)] = _pod_entry(entry)
                except TypeMismatch as exc:  # returned at once, named as Go's addErrorContext names it
                    raise exc.within(self.name, field) from None
            return merged
        return self._merge(merged, value, lambda inner: _container_cpus(inner, self.name, field))

    @staticmethod
    def _merge(merged: Dict[str, Any], pairs: Object, item: Any) -> Dict[str, Any]:
        first: Optional[TypeMismatch] = None
        for key, inner in pairs:
            try:
                merged[fix_surrogates(key)] = item(inner)
            except _Partial as exc:
                merged[fix_surrogates(key)] = exc.partial
                first = first or exc
            except TypeMismatch as exc:
                first = first or exc
        if first is not None:
            raise _Partial(first, merged)
        return merged


_POD_ENTRY = Struct("podEntryJSON", {"cpuSet": STRING})
_CONTAINER_CPUS = Struct("ContainerCPUs", {"baseline": STRING})


def _pod_entry(value: Any) -> CPUSet:
    """``PodEntry.UnmarshalJSON`` (state.go): json.Unmarshal into a ``podEntryJSON``, then ``cpuset.Parse``; an error
    of either ends the decoding of the whole file."""
    decoded = _POD_ENTRY.decode(value)
    if decoded.error is not None:
        raise decoded.error
    try:
        return CPUSet.parse(decoded.values["cpuSet"])
    except CPUSetError as exc:
        raise TypeMismatch("failed to parse cpuset: %s" % exc.detail) from None


def _container_cpus(value: Any, struct: str, field: str) -> Optional[Dict[str, str]]:
    """A ``map[string]ContainerCPUs``: container name to its baseline CPU list."""
    if value is None:
        return None
    if not isinstance(value, Object):
        raise _mismatch(value, struct, field, "map[string]state.ContainerCPUs")
    out: Dict[str, str] = {}
    first: Optional[TypeMismatch] = None
    for name, entry in value:
        if entry is not None and not isinstance(entry, Object):
            first = first or _mismatch(entry, struct, field, "state.ContainerCPUs")
            continue
        decoded = _CONTAINER_CPUS.decode(entry, field + ".")
        out[fix_surrogates(name)] = decoded.values["baseline"]
        first = first or decoded.error
    if first is not None:
        raise _Partial(first, out)
    return out
