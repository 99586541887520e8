"""Message classes from a table: the wire bytes follow from the names, numbers and types alone (checked against the
protobuf encoding rules by hand), maps, repeated fields, enums, nesting, and a bad table refused."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime import cri_grpc, nri_api
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire.proto_schema import Schema
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.protobuf_oracle import Oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TABLE = {
    "Inner": [("name", 1, "string"), ("attempt", 2, "uint32")],
    "Outer": [("id", 1, "string"), ("inner", 2, "Inner"), ("state", 3, "State"), ("created", 4, "int64"),
              ("labels", 5, "map"), ("items", 6, "[]Inner"), ("words", 7, "[]string"), ("ok", 8, "bool"),
              ("code", 9, "int32"), ("far", 16, "string")],
}
ENUMS = {"State": ["CREATED", "RUNNING"]}


@pytest.fixture(scope="module")
def schema():
    return Schema("test/table.proto", "test.v1", TABLE, ENUMS)


@pytest.mark.parametrize("fields, wire", [
    ({"id": "a"}, b"\x0a\x01a"),  # field 1, length-delimited
    ({"inner": {"name": "x", "attempt": 3}}, b"\x12\x05\x0a\x01x\x10\x03"),
    ({"state": 1}, b"\x18\x01"), ({"created": 300}, b"\x20\xac\x02"), ({"ok": True}, b"\x40\x01"),
    ({"code": -1}, b"\x48" + b"\xff" * 9 + b"\x01"),  # int32 negatives are ten-byte varints
    ({"labels": {"k": "v"}}, b"\x2a\x06\x0a\x01k\x12\x01v"),  # a map entry: key 1, value 2
    ({"words": ["a", "b"]}, b"\x3a\x01a\x3a\x01b"), ({"far": "z"}, b"\x82\x01\x01z"),  # field 16: two-byte tag
])
def test_wire_bytes_follow_from_the_table(schema, fields, wire):
    message = schema.Outer()
    for name, value in fields.items():
        if name == "inner":
            message.inner.name, message.inner.attempt = value["name"], value["attempt"]
        elif name == "labels":
            message.labels.update(value)
        elif name == "words":
            message.words.extend(value)
        else:
            setattr(message, name, value)
    assert message.SerializeToString() == wire
    assert schema.Outer.FromString(wire) == message


def test_repeated_messages_and_enum_names(schema):
    message = schema.Outer(items=[schema.Inner(name="a"), schema.Inner(name="b", attempt=1)], state=1)
    back = schema.Outer.FromString(message.SerializeToString())
    assert [(i.name, i.attempt) for i in back.items] == [("a", 0), ("b", 1)]
    assert schema.enum_name("State", back.state) == "RUNNING" and schema.enum_name("State", 7) == "7"


def test_unknown_fields_are_kept_and_two_tables_may_name_the_same_message(schema):
    other = Schema("test/other.proto", "test.v1", {"Outer": [("id", 1, "string")]}, {})
    narrow = other.Outer.FromString(schema.Outer(id="x", code=5).SerializeToString())
    assert narrow.id == "x" and schema.Outer.FromString(narrow.SerializeToString()).code == 5


def test_a_bad_table_is_refused():
    with pytest.raises(ValueError, match=r"field Bad\.x: unknown type 'Nowhere'"):
        Schema("test/bad.proto", "test.v1", {"Bad": [("x", 1, "Nowhere")]}, {})
    with pytest.raises(AttributeError):
        Schema("test/empty.proto", "test.v2", {}, {}).Missing  # noqa: B018


# --- against protobuf itself: the same bytes as the protobuf package writes, and each reads the other's -------------
SCALAR_VALUES = {"string": st.text(max_size=8), "bytes": st.binary(max_size=8), "bool": st.booleans(),
                 "int64": st.integers(-(2 ** 63), 2 ** 63 - 1), "int32": st.integers(-(2 ** 31), 2 ** 31 - 1),
                 "uint32": st.integers(0, 2 ** 32 - 1), "uint64": st.integers(0, 2 ** 64 - 1)}


def documents(messages, enums, name, depth=3):
    """A message of the table as keyword arguments: any subset of its fields, nested messages to ``depth``."""
    fields = {}
    for field, _number, kind in messages[name]:
        repeated = kind.startswith("[]")
        base = kind[2:] if repeated else kind
        if base == "map":
            value = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)
        elif base in SCALAR_VALUES:
            value = SCALAR_VALUES[base]
        elif base in enums:
            value = st.integers(0, len(enums[base]) - 1)
        elif depth:
            value = documents(messages, enums, base, depth - 1)
        else:
            continue
        fields[field] = st.lists(value, max_size=3) if repeated else value
    return st.fixed_dictionaries({}, optional=fields)


TABLES = [("test/table.proto", "test.v1", TABLE, ENUMS),
          ("kubecpu/cri_v1.proto", "runtime.v1", cri_grpc.MESSAGES, cri_grpc.ENUMS),
          ("kubecpu/nri_v1alpha1.proto", nri_api.PACKAGE, nri_api.MESSAGES, nri_api.ENUMS)]
CASES = [(table, name) for table in TABLES for name in table[2]]


@pytest.mark.parametrize("table, name", CASES, ids=["%s:%s" % (t[0], n) for t, n in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_of_every_table_is_byte_for_byte_protobufs(table, name, data):
    ours, theirs = getattr(Schema(*table), name), getattr(Oracle(*table), name)
    doc = data.draw(documents(table[2], table[3], name))
    wire = theirs(**doc).SerializeToString(deterministic=True)
    if not _maps_of_two(table[2], name, doc):  # protobuf's order of map entries is its own (any order is valid)
        assert ours(**doc).SerializeToString() == wire
    assert ours.FromString(wire) == ours(**doc)
    assert theirs.FromString(ours(**doc).SerializeToString()) == theirs(**doc)


def _maps_of_two(messages, name, doc):
    """Whether a map somewhere in ``doc`` has two entries or more."""
    kinds = {field: kind for field, _number, kind in messages[name]}
    for field, value in doc.items():
        base = kinds[field].lstrip("[]")
        if base == "map" and len(value) > 1:
            return True
        if base in messages and any(_maps_of_two(messages, base, item)
                                    for item in (value if kinds[field].startswith("[]") else [value])):
            return True
    return False


# --- differential fuzzing against protobuf: valid, mutated and random bytes (issue 23) -----------------------------
# For any bytes, both read them or both refuse them, and what both read is the same field for field (unknown fields
# are kept by both; the bytes protobuf writes for them back are its own business).
_BUILT = {}


def _pair(table):
    if table[0] not in _BUILT:
        _BUILT[table[0]] = (Schema(*table), Oracle(*table))
    return _BUILT[table[0]]


def _values(message, messages, name):
    """The table's fields of ``message`` (ours or protobuf's) as plain values."""
    out = {}
    for field, _number, kind in messages[name]:
        value = getattr(message, field)
        base = kind.lstrip("[]")
        if base == "map":
            value = dict(value)
        elif base in messages:
            value = [_values(item, messages, base) for item in value] if kind.startswith("[]") else \
                _values(value, messages, base)
        elif kind.startswith("[]"):
            value = list(value)
        out[field] = value
    return out


def _read(cls, data):
    try:
        return cls.FromString(data), None
    except Exception as exc:  # which exception is the point: ours must be MessageError
        return None, exc


def _same_reading(table, name, data):
    ours, theirs = (getattr(built, name) for built in _pair(table))
    mine, my_error = _read(ours, data)
    their, their_error = _read(theirs, data)
    assert my_error is None or type(my_error).__name__ == "MessageError", repr(my_error)
    if not table[2][name] and my_error is not None and "field number 0" in str(my_error) and their_error is None:
        return  # protobuf's upb parser takes field number 0 in a message with no fields; it refuses it elsewhere
    assert (my_error is None) == (their_error is None), (data.hex(), my_error, their_error)
    if mine is not None:
        assert _values(mine, table[2], name) == _values(their, table[2], name), data.hex()
        assert ours.FromString(mine.SerializeToString()) == mine  # what we read, we write back and read again


def _mutate(data, draw):
    data = bytearray(data)
    for _step in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "varint"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if how == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif how == "delete" and data:
            del data[at]
        elif how == "truncate":
            del data[at:]
        elif how == "varint":  # a long varint where the bytes were: the 64-bit and field-number edges
            data[at:at] = draw(st.sampled_from([b"\xff" * 9 + b"\x7f", b"\x80" * 4 + b"\x10", b"\x00", b"\xff" * 11,
                                                b"\xd0" + b"\x80" * 4 + b"\x00"]))  # the last: a key in six bytes
    return bytes(data)


@pytest.mark.parametrize("table, name", CASES, ids=["%s:%s" % (t[0], n) for t, n in CASES])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_and_random_bytes_read_as_protobuf_reads_them(table, name, data):
    theirs = getattr(_pair(table)[1], name)
    valid = theirs(**data.draw(documents(table[2], table[3], name))).SerializeToString(deterministic=True)
    _same_reading(table, name, valid)
    _same_reading(table, name, _mutate(valid, data.draw))
    _same_reading(table, name, data.draw(st.binary(max_size=64)))


@pytest.mark.parametrize("data, error", [
    (b"\x08" + b"\xff" * 9 + b"\x7f", None),  # a 70-bit varint in a uint64 field: the low 64 bits, as protobuf
    (b"\x08" + b"\xff" * 10 + b"\x01", "overlong varint"),  # eleven bytes
    (b"\x00\x01", "field number 0"),
    (b"\x80\x80\x80\x80\x10\x01", "field number 536870912"),  # 2^29: one above the largest
    (b"\xf8\xff\xff\xff\x0f\x01", None),  # 2^29 - 1: the largest, an unknown field kept
    (b"\x0e\x01", "wire type 6"),
    (b"\x2b\x08\x01\x2c", None),  # an unknown group, kept
    (b"\x2b\x34", "closed as 6"),
    (b"\x0a\x01A", None),  # a known uint64 field with another wire type: kept as unknown
    # a key and a length are 32-bit varints to protobuf: five bytes at most, wherever they are (CI found the key)
    (b"\xd0\x80\x80\x80\x00\x10", None),  # field 10's key in five bytes: an unknown field, kept
    (b"\xd0\x80\x80\x80\x80\x00\x10", "overlong varint"),  # the same key in six
    (b"\x12\x81\x80\x80\x80\x00A", None),  # a length of 1 in five bytes
    (b"\x12\x81\x80\x80\x80\x80\x00A", "overlong varint"),  # in six
    (b"\x5a\x80\x80\x80\x80\x80\x00", "overlong varint"),  # an unknown field's length in six
    (b"\x2b\xd0\x80\x80\x80\x80\x00\x10\x2c", "overlong varint"),  # a key in six bytes inside a group
    (b"\x2b\x0a\x80\x80\x80\x80\x80\x00\x2c", "overlong varint"),  # a length in six bytes inside a group
    (b"\x1a\x08\x8a\x80\x80\x80\x80\x00\x01k", "overlong varint"),  # a key in six bytes in a map entry
    (b"\x1a\x07\x8a\x80\x80\x80\x00\x01k", None),  # in five: the entry's key "k"
    (b"\x1a\x08\x0a\x81\x80\x80\x80\x80\x00k", "overlong varint"),  # a length in six bytes in a map entry
])
def test_the_wire_formats_edges_as_protobuf_takes_them(data, error):
    table = ("test/edges.proto", "test.v1", {"M": [("big", 1, "uint64"), ("name", 2, "string"), ("labels", 3, "map")]},
             {})
    ours = Schema(*table).M
    if error:
        with pytest.raises(Exception, match=error):
            ours.FromString(data)
    else:
        message = ours.FromString(data)
        message.big = message.big  # a value read is a value protobuf would assign back (70 bits were a TypeError)
        assert ours.FromString(message.SerializeToString()) == message
    _same_reading(table, "M", data)
