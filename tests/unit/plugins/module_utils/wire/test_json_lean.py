"""JSON without the json package (wire/json_lean.py): the same values as ``json.loads`` for every text, the same
refusals (as ValueError), and ``json.dumps``'s text for the flat documents the hook writes."""

from __future__ import annotations

import json
import math

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import json_lean
from hypothesis import given
from hypothesis import strategies as st

VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                      max_leaves=20)
FLAT = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20)


def test_the_c_scanner_is_used_on_this_python():
    assert json_lean._SCAN is not None


@given(VALUES, st.sampled_from(["", " ", "\n\t", "\r\n "]))
def test_what_json_writes_is_read_back_as_json_reads_it(value, space):
    text = space + json.dumps(value, ensure_ascii=False) + space
    assert json_lean.loads(text.encode("utf-8")) == json.loads(text)


@pytest.mark.parametrize("text", [b"", b" ", b"{", b'{"a": 1,}', b"[1] [2]", b"1 x", b'"\x00"', b"\xff", b"nul",
                                  b'{"a" 1}', b"[1,]", b"\xef\xbb\xbf", b"\x0c1"])
def test_what_json_refuses_is_refused(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        json_lean.loads(text)


def test_a_byte_order_mark_is_skipped_as_json_skips_it():
    assert json_lean.loads(b"\xef\xbb\xbf{}") == json.loads(b"\xef\xbb\xbf{}") == {}


def test_nan_and_infinity_as_json_reads_them():
    value = json_lean.loads(b"[NaN, Infinity, -Infinity]")
    assert math.isnan(value[0]) and value[1:] == [math.inf, -math.inf]


@given(FLAT)
def test_flat_documents_are_written_as_json_writes_them(value):
    assert json_lean.dumps(value) == json.dumps(value)


def test_anything_else_is_not_written():
    with pytest.raises(TypeError):
        json_lean.dumps({"a": 1.5})
