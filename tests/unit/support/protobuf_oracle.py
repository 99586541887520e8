"""The same tables built by the ``protobuf`` package (a test dependency only): an independent encoder and decoder to
check ``proto_schema``'s wire bytes against, message for message."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_TYPES = {"string": 9, "int64": 3, "int32": 5, "uint32": 13, "uint64": 4, "bool": 8, "bytes": 12}
_MESSAGE, _ENUM, _OPTIONAL, _REPEATED = 11, 14, 1, 3


class Oracle:
    """protobuf's classes for a table: ``oracle.Name``."""

    def __init__(self, file_name, package, messages, enums):
        proto = descriptor_pb2.FileDescriptorProto(name="oracle/" + file_name, package=package, syntax="proto3")
        for enum_name, values in enums.items():
            enum = proto.enum_type.add(name=enum_name)
            for number, value in enumerate(values):
                enum.value.add(name=enum_name.upper() + "_" + value, number=number)
        for message_name, specs in messages.items():
            message = proto.message_type.add(name=message_name)
            for name, number, kind in specs:
                repeated = kind.startswith("[]")
                base = kind[2:] if repeated else kind
                field = message.field.add(name=name, number=number, label=_REPEATED if repeated else _OPTIONAL)
                if base == "map":
                    entry = message.nested_type.add(name="".join(p.capitalize() for p in name.split("_")) + "Entry")
                    entry.options.map_entry = True
                    entry.field.add(name="key", number=1, label=_OPTIONAL, type=9)
                    entry.field.add(name="value", number=2, label=_OPTIONAL, type=9)
                    field.label, field.type = _REPEATED, _MESSAGE
                    field.type_name = ".%s.%s.%s" % (package, message_name, entry.name)
                elif base in _TYPES:
                    field.type = _TYPES[base]
                else:
                    field.type = _ENUM if base in enums else _MESSAGE
                    field.type_name = ".%s.%s" % (package, base)
        pool = descriptor_pool.DescriptorPool()
        pool.AddSerializedFile(proto.SerializeToString())
        self._classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(package + "." + name))
                         for name in messages}

    def __getattr__(self, name):
        try:
            return self.__dict__["_classes"][name]
        except KeyError:
            raise AttributeError(name) from None
