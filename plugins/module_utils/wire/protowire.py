# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The protobuf wire format itself (protobuf's encoding rules), below the message classes of ``proto_schema``: varints
(at most ten bytes, the bits above 64 dropped as protobuf drops them), length-delimited bodies, the groups of unknown
fields skipped, ``map<string, string>`` entries, and the scalar types' values. Every length read is checked against
the bytes there are; a field name in an error is the field's.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ..errors import MessageError

VARINT, FIXED64, LENGTH, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_FIELD_NUMBER = (1 << 29) - 1  # protobuf's: numbers 1 to 2^29 - 1 (0 and above are refused, as protobuf does)
KEY_BYTES = 5  # a field's key and a length: protobuf reads them as 32-bit varints, refusing a sixth byte
MAX_GROUP_DEPTH = 100  # nested groups of an unknown field, as deep as protobuf's own recursion limit
_MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    value &= 0xFFFFFFFFFFFFFFFF  # negatives: two's complement on 64 bits, ten bytes
    out = bytearray()
    while value > 127:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, at: int, end: int, most: int = 10) -> Tuple[int, int]:
    """At most ``most`` bytes (ten for a value, ``KEY_BYTES`` for a key or a length); the bits above 64 of a tenth
    byte are dropped, as protobuf drops them."""
    value = shift = 0
    while True:
        if at >= end or shift >= 7 * most:
            raise MessageError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 127) << shift
        shift += 7
        if not byte & 128:
            return value & _MASK64, at


def signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def length(number: int, body: bytes) -> bytes:
    size = len(body)
    return varint(number << 3 | LENGTH) + (_ONE_BYTE[size] if size < 128 else varint(size)) + body


_ONE_BYTE = tuple(bytes((n,)) for n in range(128))  # the varints of one byte, made once


def skip_group(data: bytes, at: int, end: int, number: int, depth: int) -> int:
    """The end of a group (an unknown field of the deprecated group encoding) opened with ``number``: its fields are
    read, nested groups included, to the END_GROUP of the same number."""
    if depth > MAX_GROUP_DEPTH:
        raise MessageError("groups nested over %d deep" % MAX_GROUP_DEPTH)
    while at < end:
        key, at = read_varint(data, at, end, KEY_BYTES)
        inner, wire = key >> 3, key & 7
        if inner > MAX_FIELD_NUMBER:  # 0 passes inside a group: protobuf's parser does not look there
            raise MessageError("field number %d in a group" % inner)
        if wire == END_GROUP:
            if inner != number:
                raise MessageError("group %d closed as %d" % (number, inner))
            return at
        if wire == VARINT:
            _value, at = read_varint(data, at, end)
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
        elif wire == LENGTH:
            size, at = read_varint(data, at, end, KEY_BYTES)
            at += size
        elif wire == START_GROUP:
            at = skip_group(data, at, end, inner, depth + 1)
        else:
            raise MessageError("wire type %d in a group" % wire)
        if at > end:
            break
    raise MessageError("group %d runs past the end" % number)


def map_entry(data: bytes, at: int, stop: int, name: str) -> Optional[Tuple[str, str]]:
    """A ``map<string, string>`` entry: key 1, value 2 (either may be missing: then empty). An entry holding any other
    field, or these with another wire type, is None: the caller keeps it as an unknown field, as protobuf does."""
    found = ["", ""]
    plain = True
    while at < stop:
        key, at = read_varint(data, at, stop, KEY_BYTES)
        number, wire = key >> 3, key & 7
        if not 0 < number <= MAX_FIELD_NUMBER:
            raise MessageError("map %s: an entry with field number %d" % (name, number))
        if wire == LENGTH:
            size, at = read_varint(data, at, stop, KEY_BYTES)
            if at + size > stop:
                raise MessageError("map %s: an entry runs past its end" % name)
            if number in (1, 2):
                found[number - 1] = utf8(data[at:at + size], name)
            else:
                plain = False
            at += size
        elif wire == VARINT:
            _value, at = read_varint(data, at, stop)
            plain = False
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
            plain = False
        elif wire == START_GROUP:
            at = skip_group(data, at, stop, number, 1)
            plain = False
        else:
            raise MessageError("map %s: an entry with wire type %d" % (name, wire))
        if at > stop:
            raise MessageError("map %s: an entry runs past its end" % name)
    return (found[0], found[1]) if plain else None


def utf8(value: bytes, name: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise MessageError("field %s: a string that is not UTF-8" % name) from None


def as_number(kind: str, value: int) -> Any:
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "enum"):
        return signed(value, 32)
    if kind == "int64":
        return signed(value, 64)
    return value & 0xFFFFFFFF if kind == "uint32" else value


def scalar(kind: str, value: Any) -> Any:
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
