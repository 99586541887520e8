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

from typing import Any, ClassVar, Dict, List, Mapping, NamedTuple, Sequence, Tuple, Type

from ..errors import MessageError
from .protowire import (FIXED32, FIXED64, KEY_BYTES, LENGTH, MAX_FIELD_NUMBER, START_GROUP, VARINT, as_number, length,
                        map_entry, read_varint, scalar, skip_group, utf8, varint)

SCALARS = {"string": "", "bytes": b"", "int64": 0, "int32": 0, "uint32": 0, "uint64": 0, "bool": False}
FieldSpec = Tuple[str, int, str]


class Field(NamedTuple):
    name: str
    number: int
    kind: str  # a scalar's name, "map", "enum" or "message"
    repeated: bool
    type_name: str  # the message's or enum's name


_BUILT: Dict[str, Schema] = {}


class Encoded(bytes):
    """A sub-message given as its wire bytes, written as they are: a message sent to many recipients (the same CPU
    update for 250 containers) is encoded once. It can be assigned to a message field or be an item of a repeated one;
    reading the parent back gives a message again."""


def cached(file_name: str, package: str, messages: Mapping[str, Sequence[FieldSpec]],
           enums: Mapping[str, Sequence[str]]) -> Schema:
    """A table's classes, built once per process (on first use: importing a table costs nothing)."""
    if file_name not in _BUILT:
        _BUILT[file_name] = Schema(file_name, package, messages, enums)
    return _BUILT[file_name]


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
            self._values[field.name] = {scalar("string", k): scalar("string", v) for k, v in dict(value).items()}
        elif field.repeated:
            self._values[field.name] = [self._item(field, item) for item in value]
        else:
            self._values[field.name] = self._item(field, value)

    def _item(self, field: Field, value: Any) -> Any:
        if field.kind != "message":
            return scalar(field.kind, value)
        if isinstance(value, Encoded):
            return value
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
        self._values[name] = scalar(field.kind, value)
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
                out += length(field.number, body) if body else b""
            elif value is not None:
                out += self._encode(field, value)
        for raw in self._unknown:
            out += raw
        return bytes(out)

    @classmethod
    def encoded(cls, **fields: Any) -> Encoded:
        """The wire bytes of a message with these fields (valid scalars, or sub-messages as ``Encoded``), without making
        the message: what 250 container updates of one reply cost is 250 small joins."""
        out = []
        for field in cls._numbers.values():
            value = fields.get(field.name)
            if value is None:
                continue
            if isinstance(value, Encoded):
                out.append(length(field.number, value))
            elif field.kind == "string" and not field.repeated:
                out.append(length(field.number, value.encode()))
            else:
                out.append(cls._encode(field, value))
        if len(out) < len(fields):
            unknown = sorted(set(fields) - set(cls._fields))
            if unknown:
                raise AttributeError("%s has no field %r" % (cls.__name__, unknown[0]))
        return Encoded(b"".join(out))

    @classmethod
    def encoded_each(cls, name: str, values: Sequence[str], **common: Any) -> List[Encoded]:
        """One message per value of the string field ``name``, the ``common`` fields the same in each and encoded
        once (the fields stay in number order): 250 container updates that differ only in their container ID."""
        number = cls._fields[name].number
        before = cls.encoded(**{k: v for k, v in common.items() if cls._fields[k].number < number})
        after = cls.encoded(**{k: v for k, v in common.items() if cls._fields[k].number > number})
        return [Encoded(before + length(number, value.encode()) + after) for value in values]

    @staticmethod
    def _encode(field: Field, value: Any) -> bytes:
        if field.kind == "map":
            return b"".join(length(field.number, length(1, k.encode()) + length(2, value[k].encode()))
                            for k in sorted(value))
        if field.kind == "message":
            items = value if field.repeated else [value]
            return b"".join(length(field.number, item if isinstance(item, Encoded) else item.SerializeToString())
                            for item in items)
        if field.kind in ("string", "bytes"):
            items = value if field.repeated else [value] if value else []
            return b"".join(length(field.number, item.encode() if field.kind == "string" else item) for item in items)
        if field.repeated:  # numbers, packed
            return length(field.number, b"".join(varint(int(item)) for item in value)) if value else b""
        return varint(field.number << 3 | VARINT) + varint(int(value)) if value else b""

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
            key, at = (data[at], at + 1) if data[at] < 128 else read_varint(data, at, end, KEY_BYTES)
            number, wire = key >> 3, key & 7
            if not 0 < number <= MAX_FIELD_NUMBER:
                raise MessageError("%s: field number %d" % (type(self).__name__, number))
            field = self._numbers.get(number)
            if wire == LENGTH:
                size, at = (data[at], at + 1) if at < end and data[at] < 128 else \
                    read_varint(data, at, end, KEY_BYTES)
                stop = at + size
                if stop > end:
                    raise MessageError("%s: field %d runs past the end" % (type(self).__name__, number))
                if field is None or not (field.kind in ("string", "bytes", "message", "map") or field.repeated):
                    self._unknown.append(data[start:stop])
                else:
                    self._length_field(field, data, start, at, stop)
                at = stop
            elif wire == VARINT:
                value, at = read_varint(data, at, end)
                if field is None or field.kind in ("string", "bytes", "map", "message"):
                    self._unknown.append(data[start:at])
                elif field.repeated:
                    values.setdefault(field.name, []).append(as_number(field.kind, value))
                else:
                    values[field.name] = as_number(field.kind, value)
            elif wire in (FIXED64, FIXED32):  # no field of ours is fixed: kept as it came
                at += 8 if wire == FIXED64 else 4
                if at > end:
                    raise MessageError("%s: field %d runs past the end" % (type(self).__name__, number))
                self._unknown.append(data[start:at])
            elif wire == START_GROUP:
                at = skip_group(data, at, end, number, 1)
                self._unknown.append(data[start:at])
            else:
                raise MessageError("%s: field %d has wire type %d" % (type(self).__name__, number, wire))

    def _length_field(self, field: Field, data: bytes, start: int, at: int, stop: int) -> None:
        """The field's ``data[at:stop]``; ``start`` is where its key began."""
        kind, name, values = field.kind, field.name, self._values
        if kind in ("string", "bytes"):
            item = data[at:stop] if kind == "bytes" else utf8(data[at:stop], field.name)
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
            entry = map_entry(data, at, stop, field.name)
            if entry is None:
                self._unknown.append(data[start:stop])
            else:
                values.setdefault(name, {})[entry[0]] = entry[1]
        elif field.repeated:  # packed numbers
            items = values.setdefault(name, [])
            while at < stop:
                number, at = read_varint(data, at, stop)
                items.append(as_number(kind, number))
        else:
            raise MessageError("%s.%s: wire type %d" % (type(self).__name__, name, LENGTH))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and type(other) is type(self) and (
            self.SerializeToString() == other.SerializeToString())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % item for item in sorted(self._values.items())))


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
