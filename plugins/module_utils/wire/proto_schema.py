# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Protobuf messages from a small table, in the standard library alone: no generated code, no protobuf package.

A backend lists the messages it uses, each field as ``(name, number, type)`` with the published API's names and
numbers: a scalar (``string``, ``int64``, ``int32``, ``uint32``, ``uint64``, ``bool``, ``bytes``), ``map`` (a
``map<string, string>``), another message or enum of the same table, and ``[]T`` for a repeated field. The wire
format follows from the numbers and types alone (protobuf's encoding rules): varints for integers, bools and enums
(a negative ``int32`` or ``int64`` as ten bytes), length-delimited strings, bytes, messages and map entries (key 1,
value 2), repeated numbers packed (either form read). Fields are written in number order, map keys sorted, values
equal to proto3's defaults left out; fields the table does not list are kept as they came and written back.

Messages behave as protobuf's Python messages do where kubecpu uses them: keyword construction (a nested dict for
a message, a list for a repeated field), proto3 defaults on reading, a sub-message made on first read and joined to
its parent when written to, repeated fields as lists, maps as dicts, ``HasField`` for message fields, ``CopyFrom``,
``SerializeToString``, ``FromString``, equality.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Type

from ..errors import MessageError

SCALARS = {"string": "", "bytes": b"", "int64": 0, "int32": 0, "uint32": 0, "uint64": 0, "bool": False}
VARINT, FIXED64, LENGTH, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_FIELD_NUMBER = (1 << 29) - 1  # protobuf's: numbers 1 to 2^29 - 1 (0 and above are refused, as protobuf does)
MAX_GROUP_DEPTH = 100  # nested groups of an unknown field, as deep as protobuf's own recursion limit
_MASK64 = (1 << 64) - 1
FieldSpec = Tuple[str, int, str]


class Field(NamedTuple):
    name: str
    number: int
    kind: str  # a scalar's name, "map", "enum" or "message"
    repeated: bool
    type_name: str  # the message's or enum's name


_BUILT: Dict[str, Schema] = {}


def cached(file_name: str, package: str, messages: Mapping[str, Sequence[FieldSpec]],
           enums: Mapping[str, Sequence[str]]) -> Schema:
    """A table's classes, built once per process (on first use: importing a table costs nothing)."""
    if file_name not in _BUILT:
        _BUILT[file_name] = Schema(file_name, package, messages, enums)
    return _BUILT[file_name]


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negatives: two's complement on 64 bits, ten bytes
    out = bytearray()
    while value > 127:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, at: int, end: int) -> Tuple[int, int]:
    """At most ten bytes; the bits above 64 of a tenth byte are dropped, as protobuf drops them."""
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise MessageError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 127) << shift
        shift += 7
        if not byte & 128:
            return value & _MASK64, at


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _length(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | LENGTH) + _varint(len(body)) + body


class Message:
    """A message of a table (each message is a subclass made by ``Schema``)."""

    __slots__ = ("_lazy", "_parent", "_unknown", "_values")
    _fields: ClassVar[Dict[str, Field]] = {}
    _numbers: ClassVar[Dict[int, Field]] = {}
    _classes: ClassVar[Dict[str, Type[Message]]] = {}  # the table's classes, by name

    def __init__(self, **fields: Any) -> None:
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_lazy", {})
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_unknown", [])
        for name, value in fields.items():
            if value is not None:  # None: unset, as protobuf takes it
                self._assign(self._field(name), value)

    def _field(self, name: str) -> Field:
        field = self._fields.get(name)
        if field is None:
            raise AttributeError("%s has no field %r" % (type(self).__name__, name))
        return field

    def _class(self, field: Field) -> Type[Message]:
        return self._classes[field.type_name]

    def _assign(self, field: Field, value: Any) -> None:
        if field.kind == "map":
            self._values[field.name] = {_scalar("string", k): _scalar("string", v) for k, v in dict(value).items()}
        elif field.repeated:
            self._values[field.name] = [self._item(field, item) for item in value]
        else:
            self._values[field.name] = self._item(field, value)

    def _item(self, field: Field, value: Any) -> Any:
        if field.kind != "message":
            return _scalar(field.kind, value)
        cls = self._class(field)
        if isinstance(value, dict):
            return cls(**value)
        if not isinstance(value, cls):
            raise TypeError("%s.%s takes a %s, not %s" % (type(self).__name__, field.name, cls.__name__,
                                                          type(value).__name__))
        object.__setattr__(value, "_parent", None)
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # a slot not yet set, or a protocol probe (copy, pickle)
            raise AttributeError(name)
        values = self._values
        if name in values:
            return values[name]
        field = self._field(name)
        if field.kind == "map":
            return values.setdefault(name, {})
        if field.repeated:
            return values.setdefault(name, [])
        if field.kind != "message":
            return SCALARS.get(field.kind, 0)
        child = self._lazy.get(name)
        if child is None:
            child = self._lazy[name] = self._class(field)()
            object.__setattr__(child, "_parent", (self, name))
        return child

    def __setattr__(self, name: str, value: Any) -> None:
        field = self._field(name)
        if field.repeated or field.kind in ("map", "message"):
            raise AttributeError("%s.%s: assign to its fields, or use CopyFrom, extend or update" % (
                type(self).__name__, name))
        self._values[name] = _scalar(field.kind, value)
        self._join()

    def _join(self) -> None:
        """Written to: a sub-message made on reading becomes part of its parent (and the parent of its own)."""
        parent = self._parent
        if parent is not None:
            owner, name = parent
            owner._values[name] = self
            owner._lazy.pop(name, None)
            object.__setattr__(self, "_parent", None)
            owner._join()

    def HasField(self, name: str) -> bool:  # protobuf's name
        field = self._field(name)
        if field.kind != "message" or field.repeated:
            raise ValueError("%s.%s has no presence" % (type(self).__name__, name))
        return name in self._values or bool(name in self._lazy and self._lazy[name].SerializeToString())

    def CopyFrom(self, other: Message) -> None:  # protobuf's name
        if type(other) is not type(self):
            raise TypeError("CopyFrom: %s from %s" % (type(self).__name__, type(other).__name__))
        copy = type(self).FromString(other.SerializeToString())
        object.__setattr__(self, "_values", copy._values)
        object.__setattr__(self, "_unknown", copy._unknown)
        self._lazy.clear()
        self._join()

    def SerializeToString(self) -> bytes:  # protobuf's name
        out = bytearray()
        for field in self._numbers.values():
            value = self._values.get(field.name)
            if value is None and field.kind == "message" and not field.repeated:
                lazy = self._lazy.get(field.name)
                body = lazy.SerializeToString() if lazy is not None else b""
                out += _length(field.number, body) if body else b""
            elif value is not None:
                out += self._encode(field, value)
        for raw in self._unknown:
            out += raw
        return bytes(out)

    def _encode(self, field: Field, value: Any) -> bytes:
        if field.kind == "map":
            return b"".join(_length(field.number, _length(1, k.encode()) + _length(2, value[k].encode()))
                            for k in sorted(value))
        if field.kind == "message":
            items = value if field.repeated else [value]
            return b"".join(_length(field.number, item.SerializeToString()) for item in items)
        if field.kind in ("string", "bytes"):
            items = value if field.repeated else [value] if value else []
            return b"".join(_length(field.number, item.encode() if field.kind == "string" else item) for item in items)
        if field.repeated:  # numbers, packed
            return _length(field.number, b"".join(_varint(int(item)) for item in value)) if value else b""
        return _varint(field.number << 3 | VARINT) + _varint(int(value)) if value else b""

    @classmethod
    def FromString(cls, data: bytes) -> Message:  # protobuf's name
        message = cls()
        message._decode(bytes(data), 0, len(data))
        return message

    def _decode(self, data: bytes, at: int, end: int) -> None:
        """Reads ``data[at:end]`` into this message (sub-messages read in place, no copies: a list of 250
        containers with five labels each decodes in about 6 ms). As protobuf does: a field the table does not list,
        or one whose wire type is not its type's, is kept as it came (groups included); field number 0, numbers above
        2^29 - 1 and wire types 6 and 7 are refused."""
        values = self._values
        while at < end:
            start = at
            key, at = (data[at], at + 1) if data[at] < 128 else _read_varint(data, at, end)
            number, wire = key >> 3, key & 7
            if not 0 < number <= MAX_FIELD_NUMBER:
                raise MessageError("%s: field number %d" % (type(self).__name__, number))
            field = self._numbers.get(number)
            if wire == LENGTH:
                size, at = (data[at], at + 1) if at < end and data[at] < 128 else _read_varint(data, at, end)
                stop = at + size
                if stop > end:
                    raise MessageError("%s: field %d runs past the end" % (type(self).__name__, number))
                if field is None or not (field.kind in ("string", "bytes", "message", "map") or field.repeated):
                    self._unknown.append(data[start:stop])
                else:
                    self._length_field(field, data, start, at, stop)
                at = stop
            elif wire == VARINT:
                value, at = _read_varint(data, at, end)
                if field is None or field.kind in ("string", "bytes", "map", "message"):
                    self._unknown.append(data[start:at])
                elif field.repeated:
                    values.setdefault(field.name, []).append(_number(field.kind, value))
                else:
                    values[field.name] = _number(field.kind, value)
            elif wire in (FIXED64, FIXED32):  # no field of ours is fixed: kept as it came
                at += 8 if wire == FIXED64 else 4
                if at > end:
                    raise MessageError("%s: field %d runs past the end" % (type(self).__name__, number))
                self._unknown.append(data[start:at])
            elif wire == START_GROUP:
                at = _skip_group(data, at, end, number, 1)
                self._unknown.append(data[start:at])
            else:
                raise MessageError("%s: field %d has wire type %d" % (type(self).__name__, number, wire))

    def _length_field(self, field: Field, data: bytes, start: int, at: int, stop: int) -> None:
        """The field's ``data[at:stop]``; ``start`` is where its key began."""
        kind, name, values = field.kind, field.name, self._values
        if kind in ("string", "bytes"):
            item = data[at:stop] if kind == "bytes" else _utf8(data[at:stop], field)
            if field.repeated:
                values.setdefault(name, []).append(item)
            else:
                values[name] = item
        elif kind == "message":
            child = values.get(name) if not field.repeated else None  # a message seen twice is merged
            if child is None:
                child = self._classes[field.type_name]()
                if field.repeated:
                    values.setdefault(name, []).append(child)
                else:
                    values[name] = child
            child._decode(data, at, stop)
        elif kind == "map":
            entry = _map_entry(data, at, stop, field)
            if entry is None:
                self._unknown.append(data[start:stop])
            else:
                values.setdefault(name, {})[entry[0]] = entry[1]
        elif field.repeated:  # packed numbers
            items = values.setdefault(name, [])
            while at < stop:
                number, at = _read_varint(data, at, stop)
                items.append(_number(kind, number))
        else:
            raise MessageError("%s.%s: wire type %d" % (type(self).__name__, name, LENGTH))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) and (
            self.SerializeToString() == other.SerializeToString())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % item for item in sorted(self._values.items())))


def _skip_group(data: bytes, at: int, end: int, number: int, depth: int) -> int:
    """The end of a group (an unknown field of the deprecated group encoding) opened with ``number``: its fields are
    read, nested groups included, to the END_GROUP of the same number."""
    if depth > MAX_GROUP_DEPTH:
        raise MessageError("groups nested over %d deep" % MAX_GROUP_DEPTH)
    while at < end:
        key, at = _read_varint(data, at, end)
        inner, wire = key >> 3, key & 7
        if inner > MAX_FIELD_NUMBER:  # 0 passes inside a group: protobuf's parser does not look there
            raise MessageError("field number %d in a group" % inner)
        if wire == END_GROUP:
            if inner != number:
                raise MessageError("group %d closed as %d" % (number, inner))
            return at
        if wire == VARINT:
            _value, at = _read_varint(data, at, end)
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
        elif wire == LENGTH:
            size, at = _read_varint(data, at, end)
            at += size
        elif wire == START_GROUP:
            at = _skip_group(data, at, end, inner, depth + 1)
        else:
            raise MessageError("wire type %d in a group" % wire)
        if at > end:
            break
    raise MessageError("group %d runs past the end" % number)


def _map_entry(data: bytes, at: int, stop: int, field: Field) -> Optional[Tuple[str, str]]:
    """A ``map<string, string>`` entry: key 1, value 2 (either may be missing: then empty). An entry holding any other
    field, or these with another wire type, is None: the caller keeps it as an unknown field, as protobuf does."""
    found = ["", ""]
    plain = True
    while at < stop:
        key, at = _read_varint(data, at, stop)
        number, wire = key >> 3, key & 7
        if not 0 < number <= MAX_FIELD_NUMBER:
            raise MessageError("map %s: an entry with field number %d" % (field.name, number))
        if wire == LENGTH:
            size, at = _read_varint(data, at, stop)
            if at + size > stop:
                raise MessageError("map %s: an entry runs past its end" % field.name)
            if number in (1, 2):
                found[number - 1] = _utf8(data[at:at + size], field)
            else:
                plain = False
            at += size
        elif wire == VARINT:
            _value, at = _read_varint(data, at, stop)
            plain = False
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
            plain = False
        elif wire == START_GROUP:
            at = _skip_group(data, at, stop, number, 1)
            plain = False
        else:
            raise MessageError("map %s: an entry with wire type %d" % (field.name, wire))
        if at > stop:
            raise MessageError("map %s: an entry runs past its end" % field.name)
    return (found[0], found[1]) if plain else None


def _utf8(value: bytes, field: Field) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise MessageError("field %s: a string that is not UTF-8" % field.name) from None


def _number(kind: str, value: int) -> Any:
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "enum"):
        return _signed(value, 32)
    if kind == "int64":
        return _signed(value, 64)
    return value & 0xFFFFFFFF if kind == "uint32" else value


def _scalar(kind: str, value: Any) -> Any:
    """A value for a scalar field, of the field's type (protobuf refuses the others too)."""
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "bytes":
        ok = isinstance(value, bytes)
    elif kind == "bool":
        ok = isinstance(value, (bool, int))
        value = bool(value)
    else:
        ok = isinstance(value, int) and not isinstance(value, bool)
        limit = 64 if kind.endswith("64") else 32
        ok = ok and (-(1 << (limit - 1)) <= value < (1 << (limit - 1)) if not kind.startswith("uint")
                     else 0 <= value < (1 << limit))
    if not ok:
        raise TypeError("%r is not a valid %s" % (value, kind))
    return value


class Schema:
    """The message classes of one table, by name (``schema.ContainerStatusRequest``), and its enums' names."""

    def __init__(self, file_name: str, package: str, messages: Mapping[str, Sequence[FieldSpec]],
                 enums: Mapping[str, Sequence[str]]) -> None:
        self.file_name = file_name
        self.package = package
        self._enums = {name: list(values) for name, values in enums.items()}
        self._classes: Dict[str, Type[Message]] = {}
        for message_name, specs in messages.items():
            fields = sorted((_field(message_name, spec, messages, enums) for spec in specs), key=lambda f: f.number)
            self._classes[message_name] = type(message_name, (Message,), {
                "__slots__": (), "_fields": {f.name: f for f in fields}, "_numbers": {f.number: f for f in fields},
                "_classes": self._classes, "__module__": __name__, "__qualname__": "%s.%s" % (package, message_name)})

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_classes"][name]
        except KeyError:
            raise AttributeError(name) from None

    def enum_name(self, enum: str, number: int) -> str:
        """The name of an enum value (an unknown number stays a number, as protobuf keeps it)."""
        values = self._enums[enum]
        return values[number] if 0 <= number < len(values) else str(number)


def _field(message: str, spec: FieldSpec, messages: Mapping[str, Sequence[FieldSpec]],
           enums: Mapping[str, Sequence[str]]) -> Field:
    name, number, kind = spec
    repeated = kind.startswith("[]")
    base = kind[2:] if repeated else kind
    if base in SCALARS or base == "map":
        return Field(name, number, base, repeated or base == "map", "")
    if base in enums:
        return Field(name, number, "enum", repeated, base)
    if base in messages:
        return Field(name, number, "message", repeated, base)
    raise ValueError("field %s.%s: unknown type %r" % (message, name, kind))
