# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Protobuf message classes from a small table, built at import with ``protobuf`` alone (no generated code).

A backend lists the messages it uses, each field as ``(name, number, type)`` with the published API's names and
numbers: a scalar (``string``, ``int64``, ``int32``, ``uint32``, ``uint64``, ``bool``, ``bytes``), ``map`` (a
``map<string, string>``), another message or enum of the same table, and ``[]T`` for a repeated field. The table
becomes a ``FileDescriptorProto`` in a private pool (so two tables may name the same message differently), and
protobuf makes the classes: the wire format is fixed by the numbers and types alone.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

# descriptor.proto's FieldDescriptorProto numbers (facts of the format; protobuf itself is imported only when a
# table is built, so importing this module needs no optional package).
TYPE_INT64, TYPE_UINT64, TYPE_INT32, TYPE_BOOL, TYPE_STRING, TYPE_MESSAGE, TYPE_BYTES, TYPE_UINT32, TYPE_ENUM = (
    3, 4, 5, 8, 9, 11, 12, 13, 14)
LABEL_OPTIONAL, LABEL_REPEATED = 1, 3
SCALARS = {"string": TYPE_STRING, "int64": TYPE_INT64, "int32": TYPE_INT32, "uint32": TYPE_UINT32,
           "uint64": TYPE_UINT64, "bool": TYPE_BOOL, "bytes": TYPE_BYTES}
FieldSpec = Tuple[str, int, str]


def _protobuf() -> Tuple[Any, Any, Any]:
    """descriptor_pb2, descriptor_pool and the message-class maker of the installed protobuf."""
    from google.protobuf import (  # type: ignore[import-untyped]  # noqa: PLC0415  # optional dependency
        descriptor_pb2, descriptor_pool, message_factory)

    make = getattr(message_factory, "GetMessageClass", None)
    if make is None:  # protobuf before 4.21: the factory's older spelling
        def make(descriptor: Any) -> Any:
            return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)
    return descriptor_pb2, descriptor_pool, make


_BUILT: Dict[str, Schema] = {}


def cached(file_name: str, package: str, messages: Mapping[str, Sequence[FieldSpec]],
           enums: Mapping[str, Sequence[str]]) -> Schema:
    """A table's classes, built once per process (on first use: importing a table costs nothing)."""
    if file_name not in _BUILT:
        _BUILT[file_name] = Schema(file_name, package, messages, enums)
    return _BUILT[file_name]


def _entry_name(field: str) -> str:
    return "".join(part.capitalize() for part in field.split("_")) + "Entry"


class Schema:
    """The message classes of one table, by name (``schema.ContainerStatusRequest``), and its enums' names."""

    def __init__(self, file_name: str, package: str, messages: Mapping[str, Sequence[FieldSpec]],
                 enums: Mapping[str, Sequence[str]]) -> None:
        descriptor_pb2, descriptor_pool, make_class = _protobuf()
        proto = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
        for enum_name, values in enums.items():
            enum = proto.enum_type.add(name=enum_name)
            for number, value in enumerate(values):
                enum.value.add(name=value, number=number)
        for message_name, specs in messages.items():
            message = proto.message_type.add(name=message_name)
            for spec in specs:
                _field(package, message, spec, messages, enums)
        self.pool = descriptor_pool.DescriptorPool()
        self.pool.AddSerializedFile(proto.SerializeToString())
        self.package = package
        self._classes: Dict[str, Any] = {}
        for message_name in messages:
            descriptor = self.pool.FindMessageTypeByName("%s.%s" % (package, message_name))
            self._classes[message_name] = make_class(descriptor)
        self._enums = {name: self.pool.FindEnumTypeByName("%s.%s" % (package, name)) for name in enums}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_classes"][name]
        except KeyError:
            raise AttributeError(name) from None

    def enum_name(self, enum: str, number: int) -> str:
        """The name of an enum value (an unknown number stays a number, as protobuf keeps it)."""
        value = self._enums[enum].values_by_number.get(number)
        return str(number) if value is None else str(value.name)


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _field(package: str, message: Any, spec: FieldSpec, messages: Mapping[str, Sequence[FieldSpec]],
           enums: Mapping[str, Sequence[str]]) -> None:
    """One field of ``message`` (a map field gets its nested entry type)."""
    name, number, kind = spec
    repeated = kind.startswith("[]")
    base = kind[2:] if repeated else kind
    field = message.field.add(name=name, number=number, json_name=_json_name(name),
                              label=LABEL_REPEATED if repeated else LABEL_OPTIONAL)
    if base == "map":
        entry = message.nested_type.add(name=_entry_name(name))
        entry.options.map_entry = True
        for entry_field, entry_number in (("key", 1), ("value", 2)):
            entry.field.add(name=entry_field, number=entry_number, json_name=entry_field,
                            label=LABEL_OPTIONAL, type=TYPE_STRING)
        field.label = LABEL_REPEATED
        field.type = TYPE_MESSAGE
        field.type_name = ".%s.%s.%s" % (package, message.name, entry.name)
    elif base in SCALARS:
        field.type = SCALARS[base]
    elif base in enums:
        field.type = TYPE_ENUM
        field.type_name = ".%s.%s" % (package, base)
    elif base in messages:
        field.type = TYPE_MESSAGE
        field.type_name = ".%s.%s" % (package, base)
    else:
        raise ValueError("field %s.%s: unknown type %r" % (message.name, name, kind))
