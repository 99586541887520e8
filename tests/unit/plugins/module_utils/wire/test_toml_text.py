"""A TOML file's statements (wire/toml_text.py): every header and key/value found where it is, its keys unquoted, its
value's text exactly what ``tomllib`` reads there, across quoting, spacing, comments, CRLF and values that span
lines; what it cannot follow is an error naming the file and the line."""

from __future__ import annotations

import tomllib

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire.toml_text import (decode_string,
                                                                                         is_plain_string,
                                                                                         statements, strings_in)
from hypothesis import given, settings
from hypothesis import strategies as st

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def basic(text, escape_all):
    """``text`` as a TOML basic string: quotes, backslashes and control characters escaped, and with ``escape_all``
    every other character beyond ASCII too (\\u or \\U)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 32 or char == "\x7f" or (escape_all and ord(char) > 126):
            out.append("\\u%04x" % ord(char) if ord(char) < 0x10000 else "\\U%08x" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def key_literal(draw, name):
    style = draw(st.sampled_from(["bare", "basic", "literal"]))
    if style == "bare" and name.replace("_", "a").replace("-", "a").isalnum() and name.isascii():
        return name
    if style == "literal" and not any(c in name for c in "'\n\r") and all(ord(c) >= 32 and c != "\x7f" for c in name):
        return "'%s'" % name
    return basic(name, draw(st.booleans()))


@st.composite
def values(draw, depth=0):
    kind = draw(st.sampled_from(["int", "bool", "basic", "literal", "multi", "date"] + (["array", "inline"]
                                                                                        if depth < 2 else [])))
    if kind == "int":
        return str(draw(st.integers(-10**6, 10**6)))
    if kind == "bool":
        return draw(st.sampled_from(["true", "false"]))
    if kind == "date":
        return draw(st.sampled_from(["1979-05-27 07:32:00Z", "1979-05-27T00:32:00.999999-07:00", "07:32:00"]))
    if kind == "basic":
        return basic(draw(TEXT), draw(st.booleans()))
    if kind == "literal":
        return "'%s'" % draw(st.text(st.characters(blacklist_characters="'\n\r\x7f", min_codepoint=32), max_size=12))
    if kind == "multi":
        body = draw(st.text(st.characters(blacklist_characters='"\\\r\x7f', min_codepoint=32,
                                          whitelist_characters="\n"), max_size=12))
        return '"""%s"""' % body
    items = draw(st.lists(values(depth + 1), max_size=3))
    if kind == "inline":
        names = draw(st.lists(st.from_regex(r"[a-z]{1,4}", fullmatch=True), min_size=len(items),
                              max_size=len(items), unique=True))
        return "{ %s }" % ", ".join("%s = %s" % pair for pair in zip(names, items))
    sep = draw(st.sampled_from([", ", ",\n  ", ",  # a comment, [with] 'quotes\"\n    "]))
    end = draw(st.sampled_from(["", ",", ",\n"])) if items else draw(st.sampled_from(["", "\n"]))
    return "[" + draw(st.sampled_from(["", "\n  "])) + sep.join(items) + end + "]"


@st.composite
def documents(draw):
    """A TOML text, and what each of its key/values and headers is: (table, key) -> value text, and the tables."""
    lines, expected, tables = [], {}, []
    count = draw(st.integers(0, 4))
    for number in range(count + 1):
        table = () if number == 0 else ("t%d" % number,) + tuple(draw(st.lists(TEXT, max_size=2)))
        if number:
            keys = [key_literal(draw, name) for name in table]
            dot = draw(st.sampled_from([".", " . "]))
            array = draw(st.booleans())
            header = ("[[%s]]" if array else "[%s]") % dot.join(keys)
            lines.append(draw(st.sampled_from(["", "  "])) + header + draw(st.sampled_from(["", "  # a header"])))
            tables.append((table, array))
        names = draw(st.lists(TEXT, max_size=3, unique=True))
        for name in names:
            dotted = ("k" + name,) if not draw(st.booleans()) else ("d", "k" + name)
            if ("d",) in expected.get(table, {}):
                dotted = ("k" + name,)
            value = draw(values())
            literal = draw(st.sampled_from([" . ", "."])).join(key_literal(draw, part) for part in dotted)
            lines.append("%s%s%s=%s%s%s" % (draw(st.sampled_from(["", "    "])), literal, draw(st.sampled_from(["", " "])),
                                            draw(st.sampled_from(["", " "])), value,
                                            draw(st.sampled_from(["", "  ", " # with = and [x] 'q'"]))))
            expected.setdefault(table, {})[dotted] = value
        lines.extend(draw(st.sampled_from([[], [""], ["# only a comment"]])))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return eol.join(lines) + draw(st.sampled_from(["", eol])), expected, tables


@settings(max_examples=400)
@given(documents())
def test_every_statement_is_where_tomllib_reads_it(document):
    text, expected, tables = document
    doc = tomllib.loads(text)  # the generator writes valid TOML
    found = statements(text, "generated.toml")
    headers = [(s.table, s.array) for s in found if not s.key]
    assert headers == tables
    values = {}
    for statement in found:
        if statement.key:
            written = text[statement.value[0]:statement.value[1]]
            assert written == expected[statement.table][statement.key]  # the value's text, exactly
            values[(statement.table, statement.key)] = written
            assert text[statement.end - 1:statement.end] in ("\n", "") or statement.end == len(text)
    assert set(values) == {(table, key) for table, keys in expected.items() for key in keys}
    for (table, key), written in values.items():
        where = doc
        for part in table:
            where = where[part][-1] if isinstance(where[part], list) else where[part]
        for part in key:
            where = where[part]
        assert where == tomllib.loads("x = " + written)["x"]


@pytest.mark.parametrize("text, line, what", [
    ("a = 'open\n", 1, "an unterminated string"),
    ("x = 1\n[a.b\nc = 1\n", 2, "a table header without its ']'"),
    ("x = 1\ny 2\n", 2, "a key without '='"),
    ("x = [1, 2\n", 1, "an unterminated array"),
    ("x = [1, 2}\n", 1, "a '}' closes a '\\['"),
    ('x = """never\nclosed\n', 1, "an unterminated multi-line string"),
    ("x = 1 y\n", 1, "unexpected 'y'"),
    ("x = 1 2\n", 1, "unexpected"),
    ("x =\n", 1, "a value was expected"),
    ("[a]] \n", 1, "unexpected"),
])
def test_what_it_cannot_follow_is_an_error_naming_the_file_and_line(text, line, what):
    with pytest.raises(ConfigError, match=r"config.toml is not TOML kubecpu can read \(line %d: (%s)" % (line, what)):
        statements(text, "config.toml")


@pytest.mark.parametrize("literal, text", [
    ('"a\\"b\\\\c\\u00e9\\U0001F600\\t"', 'a"b\\c\u00e9\U0001F600\t'),
    ("'C:\\path\\'", "C:\\path\\"),
    ('""', ""),
])
def test_one_line_strings_are_decoded_as_toml_reads_them(literal, text):
    assert is_plain_string(literal) and decode_string(literal) == text == tomllib.loads("x = " + literal)["x"]


@pytest.mark.parametrize("literal", ['"""a"""', "'''a'''", "1", "'a\nb'", '"a\\q"', "'", "[\"a\"]"])
def test_anything_else_is_not_a_one_line_string(literal):
    with pytest.raises(ConfigError):
        decode_string(literal)


def test_the_strings_of_an_array_skip_its_comments():
    assert strings_in("[\n  'conf.d/*.toml',  # 'not/this.toml'\n  \"/etc/x\\u002etoml\", # \"nor this\"\n]") == [
        "conf.d/*.toml", "/etc/x.toml"]
