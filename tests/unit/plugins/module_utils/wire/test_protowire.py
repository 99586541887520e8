"""The protobuf wire format under the message classes: varints both ways (ten bytes at most, 64 bits kept),
lengths, groups skipped, map entries, and the scalar types' ranges."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import MessageError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import protowire
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("value, wire", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (-1, b"\xff" * 9 + b"\x01"), ((1 << 64) - 1, b"\xff" * 9 + b"\x01"),
])
def test_varints(value, wire):
    assert protowire.varint(value) == wire
    assert protowire.read_varint(wire, 0, len(wire)) == (value & ((1 << 64) - 1), len(wire))


@given(st.integers(0, (1 << 64) - 1))
def test_every_64_bit_value_reads_back(value):
    wire = protowire.varint(value)
    assert protowire.read_varint(wire, 0, len(wire)) == (value, len(wire)) and len(wire) <= 10


@pytest.mark.parametrize("wire, value", [
    (b"\xff" * 9 + b"\x7f", (1 << 64) - 1),  # 70 bits: the low 64, as protobuf keeps them
    (b"\x80" * 9 + b"\x02", 0),
])
def test_bits_above_64_are_dropped(wire, value):
    assert protowire.read_varint(wire, 0, len(wire))[0] == value


@pytest.mark.parametrize("wire", [b"", b"\x80", b"\xff" * 10 + b"\x01"])
def test_truncated_and_overlong_varints_are_refused(wire):
    with pytest.raises(MessageError, match="truncated or overlong varint"):
        protowire.read_varint(wire, 0, len(wire))


@pytest.mark.parametrize("wire, read", [
    (b"\x01", 1), (b"\xff\xff\xff\xff\x0f", (1 << 32) - 1), (b"\x81\x80\x80\x80\x00", 1),
    (b"\x81\x80\x80\x80\x80\x00", None), (b"\xff" * 5 + b"\x01", None),
])
def test_a_key_or_a_length_is_at_most_five_bytes(wire, read):
    if read is None:
        with pytest.raises(MessageError, match="overlong varint"):
            protowire.read_varint(wire, 0, len(wire), protowire.KEY_BYTES)
    else:
        assert protowire.read_varint(wire, 0, len(wire), protowire.KEY_BYTES) == (read, len(wire))


def test_a_length_delimited_field_and_its_one_byte_fast_path():
    assert protowire.length(1, b"abc") == b"\x0a\x03abc"
    assert protowire.length(16, b"x" * 200) == b"\x82\x01\xc8\x01" + b"x" * 200


@pytest.mark.parametrize("wire, end, error", [
    (b"\x08\x01\x0c", 3, None),  # a varint field, then the END_GROUP of group 1
    (b"\x13\x14\x0c", 3, None),  # a nested group 2, closed, then group 1's end
    (b"\x14", 1, "group 1 closed as 2"),
    (b"\x08\x01", 2, "group 1 runs past the end"),
    (b"\x0e", 1, "wire type 6 in a group"),
])
def test_groups_are_skipped_to_their_end(wire, end, error):
    if error:
        with pytest.raises(MessageError, match=error):
            protowire.skip_group(wire, 0, len(wire), 1, 1)
    else:
        assert protowire.skip_group(wire, 0, len(wire), 1, 1) == end


def test_groups_nested_too_deep_are_refused():
    wire = b"\x0b" * (protowire.MAX_GROUP_DEPTH + 1)
    with pytest.raises(MessageError, match="nested over 100 deep"):
        protowire.skip_group(wire, 0, len(wire), 1, 1)


@pytest.mark.parametrize("wire, entry", [
    (b"\x0a\x01k\x12\x01v", ("k", "v")),
    (b"\x12\x01v", ("", "v")),  # no key: the empty one
    (b"\x0a\x01k\x18\x05", None),  # another field inside: kept whole as an unknown field, as protobuf does
    (b"\x08\x01", None),  # the key with another wire type
])
def test_map_entries(wire, entry):
    assert protowire.map_entry(wire, 0, len(wire), "labels") == entry


def test_a_map_entry_that_is_not_utf8_is_refused():
    with pytest.raises(MessageError, match="field labels: a string that is not UTF-8"):
        protowire.map_entry(b"\x0a\x01\xff", 0, 3, "labels")


@pytest.mark.parametrize("kind, value, ok", [
    ("int32", -(1 << 31), True), ("int32", 1 << 31, False), ("uint32", -1, False), ("uint64", (1 << 64) - 1, True),
    ("uint64", 1 << 64, False), ("bool", 1, True), ("string", b"x", False), ("bytes", "x", False), ("int64", True, False),
])
def test_scalar_ranges(kind, value, ok):
    if ok:
        protowire.scalar(kind, value)
    else:
        with pytest.raises(TypeError):
            protowire.scalar(kind, value)
