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
