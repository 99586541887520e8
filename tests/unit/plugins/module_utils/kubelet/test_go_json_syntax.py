"""Go's syntax check (encoding/json scanner.go): each state's refusal in Go's words, and over generated documents,
the same verdict as a strict JSON reader (the real kubelets' texts for whole files are in test_checkpoint_formats'
table)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.go_json_syntax import syntax_error
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("data, error", [  # each text as Go 1.26.8's json.Unmarshal printed it for these bytes
    (b"", "unexpected end of JSON input"),
    (b"  \n", "unexpected end of JSON input"),
    (b"{", "unexpected end of JSON input"),
    (b'{"a":"b', "unexpected end of JSON input"),
    (b"x", "invalid character 'x' looking for beginning of value"),
    (b"{1:2}", "invalid character '1' looking for beginning of object key string"),
    (b'{"a"}', "invalid character '}' after object key"),
    (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b'{"a":1]', "invalid character ']' after object key:value pair"),
    (b"{} {}", "invalid character '{' after top-level value"),
    (b"01", "invalid character '1' after top-level value"),
    (b'"a\x01"', "invalid character '\\x01' in string literal"),
    (b'"a\tb"', "invalid character '\\t' in string literal"),
    (b'"\\q"', "invalid character 'q' in string escape code"),
    (b'"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"),
    (b"-a", "invalid character 'a' in numeric literal"),
    (b"1.e5", "invalid character 'e' after decimal point in numeric literal"),
    (b"1e+x", "invalid character 'x' in exponent of numeric literal"),
    (b"trx", "invalid character 'x' in literal true (expecting 'u')"),
    (b"fals0", "invalid character '0' in literal false (expecting 'e')"),
    (b"nul1", "invalid character '1' in literal null (expecting 'l')"),
    (b"'a'", "invalid character '\\'' looking for beginning of value"),
    (b"\\", "invalid character '\\\\' looking for beginning of value"),
    (b"\xc3\xa9", "invalid character '\u00c3' looking for beginning of value"),  # the first byte, as a rune
    (b"\x85", "invalid character '\\u0085' looking for beginning of value"),  # U+0085 and U+00AD do not print
    (b"\xad", "invalid character '\\u00ad' looking for beginning of value"),
    (b"[" * 10001, "invalid character '[' exceeded max depth"),
    (b"[" * 10000 + b"]" * 10000, None),
    (b' {"a" : [1, -0.5e-3, true, false, null, "\\u00e9\\n"]} ', None),
])
def test_each_refusal_in_gos_words(data, error):
    assert syntax_error(data) == error


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_every_document_a_json_writer_writes_passes(value, ascii_only):
    assert syntax_error(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")) is None


def _strict_json_accepts(text):
    def refuse(name):
        raise ValueError(name)
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet='{}[]:,"\\ \t\n\r0123456789.eE+-trufalsnxu\x01\u00e9', max_size=14))
def test_go_refuses_what_a_strict_json_reader_refuses_and_no_more(text):
    assert (syntax_error(text.encode("utf-8")) is None) == _strict_json_accepts(text)
