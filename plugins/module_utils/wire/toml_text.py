# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A TOML file as a list of statements, each with where it is in the text, so that one value can be replaced, or one
line added or removed, and every other byte stays (containerd's ``config.toml``: kubecpu edits one line of the
operator's file).

Not a TOML parser: it finds where each table header and each key/value starts and ends (strings, multi-line strings,
arrays and inline tables spanning lines, comments), with the keys unquoted, and leaves the values as text. A file it
cannot follow is an error naming the line (containerd would not read it either). Python 3.9 has no ``tomllib``.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Tuple

from ..errors import ConfigError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# a number, a boolean, a date and time (a space may stand for its T)
_SCALAR = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9][^\s#,\[\]{}]*|[^\s#,\[\]{}\"']+")
_TOKEN = re.compile(r"[^\s#,=\[\]{}\"']+")  # inside an array or an inline table: a key, a number, a date part
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}
_HEX = {"x": 2, "u": 4, "U": 8}


class Statement(NamedTuple):
    """A table header (``key`` empty) or a key/value, as offsets into the text."""

    line: int  # its first line, from 1
    start: int  # its first character
    end: int  # after its last line's end (the newline included; the text's length on a last line without one)
    table: Tuple[str, ...]  # a header: its keys; a key/value: the table it is in
    key: Tuple[str, ...]  # a key/value's dotted key, unquoted; () for a header
    array: bool  # an array of tables' header ([[...]])
    value: Tuple[int, int]  # a key/value's value as written [start, end) (no comment, no trailing blank)

    @property
    def path(self) -> Tuple[str, ...]:
        return self.table + self.key


class _Scanner:
    def __init__(self, text: str, name: str) -> None:
        self.text, self.name, self.pos = text, name, 0

    def fail(self, what: str, at: Optional[int] = None) -> ConfigError:
        line = self.text.count("\n", 0, self.pos if at is None else at) + 1
        return ConfigError("%s is not TOML kubecpu can read (line %d: %s)" % (self.name, line, what))

    def blanks(self, newlines: bool = False) -> None:
        """Past spaces and tabs; with ``newlines`` past line ends and comments too."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t":
                self.pos += 1
            elif newlines and (char == "\n" or text.startswith("\r\n", self.pos)):
                self.pos += 1 if char == "\n" else 2
            elif newlines and char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def line_end(self) -> int:
        """Past blanks and a comment to the end of the line (its newline included)."""
        self.blanks()
        text = self.text
        if text.startswith("#", self.pos):
            end = text.find("\n", self.pos)
            self.pos = len(text) if end < 0 else end
        if self.pos == len(text):
            return self.pos
        if text[self.pos] == "\n":
            return self.pos + 1
        if text.startswith("\r\n", self.pos):
            return self.pos + 2
        raise self.fail("unexpected %r after a value or a header" % text[self.pos])

    def key(self) -> Tuple[str, ...]:
        parts: List[str] = []
        while True:
            self.blanks()
            start = self.pos
            if self.text.startswith(('"', "'"), self.pos):
                self.string()
                parts.append(decode_string(self.text[start:self.pos]))
            else:
                found = _BARE_KEY.match(self.text, self.pos)
                if found is None:
                    raise self.fail("a key was expected")
                parts.append(found.group(0))
                self.pos = found.end()
            self.blanks()
            if not self.text.startswith(".", self.pos):
                return tuple(parts)
            self.pos += 1

    def string(self) -> None:
        """Past a string of any of the four kinds."""
        text, start = self.text, self.pos
        for quotes, escapes in (('"""', True), ("'''", False)):
            if text.startswith(quotes, start):
                at = start + 3
                while True:
                    end = text.find(quotes, at)
                    back = text.find("\\", at, end) if escapes and end >= 0 else -1
                    if end < 0:
                        raise self.fail("an unterminated multi-line string", start)
                    if back >= 0:  # an escape before the quotes: the character after it is not one of them
                        at = back + 2
                        continue
                    self.pos = end + 3
                    while self.pos < end + 5 and text.startswith(quotes[0], self.pos):  # up to two quotes inside
                        self.pos += 1
                    return
        quote, at = text[start], start + 1
        while at < len(text) and text[at] not in (quote, "\n"):
            at += 2 if quote == '"' and text[at] == "\\" else 1
        if at >= len(text) or text[at] != quote:
            raise self.fail("an unterminated string", start)
        self.pos = at + 1

    def value(self) -> None:
        text = self.text
        if self.pos >= len(text):
            raise self.fail("a value was expected")
        char = text[self.pos]
        if char in "\"'":
            self.string()
        elif char in "[{":
            self.container()
        else:
            found = _SCALAR.match(text, self.pos)
            if found is None:
                raise self.fail("a value was expected")
            self.pos = found.end()

    def container(self) -> None:
        """Past an array or an inline table (nested, across lines, with comments)."""
        start, closing = self.pos, []
        while True:
            if self.pos >= len(self.text):
                raise self.fail("an unterminated array or inline table", start)
            char = self.text[self.pos]
            if char in "[{":
                closing.append("]" if char == "[" else "}")
                self.pos += 1
            elif char in "]}":
                if char != closing.pop():
                    raise self.fail("a %r closes a %r" % (char, "[" if char == "}" else "{"), self.pos)
                self.pos += 1
                if not closing:
                    return
            elif char in ",=.":
                self.pos += 1
            elif char in "\"'":
                self.string()
            else:
                found = _TOKEN.match(self.text, self.pos)
                if found is None:
                    raise self.fail("unexpected %r" % char)
                self.pos = found.end()
            self.blanks(newlines=True)


def statements(text: str, name: str) -> List[Statement]:
    """Every table header and key/value of ``text`` (``name`` says which file in errors), in order."""
    scan = _Scanner(text, name)
    table: Tuple[str, ...] = ()
    found: List[Statement] = []
    while True:
        scan.blanks(newlines=True)
        start = scan.pos
        if start >= len(text):
            return found
        line = text.count("\n", 0, start) + 1
        if text[start] == "[":
            array = text.startswith("[[", start)
            scan.pos += 2 if array else 1
            table = scan.key()
            closing = "]]" if array else "]"
            if not text.startswith(closing, scan.pos):
                raise scan.fail("a table header without its %r" % closing)
            scan.pos += len(closing)
            found.append(Statement(line, start, scan.line_end(), table, (), array, (0, 0)))
        else:
            key = scan.key()
            if not text.startswith("=", scan.pos):
                raise scan.fail("a key without '='")
            scan.pos += 1
            scan.blanks()
            value = scan.pos
            scan.value()
            value_end = scan.pos
            found.append(Statement(line, start, scan.line_end(), table, key, False, (value, value_end)))
        scan.pos = found[-1].end


def is_plain_string(literal: str) -> bool:
    """A one-line basic ("...") or literal ('...') string, and nothing else."""
    return len(literal) >= 2 and literal[0] in "\"'" and literal[-1] == literal[0] and not literal.startswith(
        ('"""', "'''")) and "\n" not in literal


def decode_string(literal: str) -> str:
    """The text of a one-line string as written (``"..."`` with its escapes, or ``'...'``); ConfigError otherwise."""
    if not is_plain_string(literal):
        raise ConfigError("not a one-line TOML string: %s" % literal[:200])
    if literal[0] == "'":
        return literal[1:-1]
    out, at, body = [], 0, literal[1:-1]
    while at < len(body):
        char = body[at]
        if char != "\\":
            out.append(char)
            at += 1
            continue
        escape = body[at + 1: at + 2]
        if escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            at += 2
        elif escape in _HEX and re.match(r"[0-9A-Fa-f]{%d}\Z" % _HEX[escape], body[at + 2: at + 2 + _HEX[escape]]) \
                and _scalar(int(body[at + 2: at + 2 + _HEX[escape]], 16)):
            out.append(chr(int(body[at + 2: at + 2 + _HEX[escape]], 16)))
            at += 2 + _HEX[escape]
        else:
            raise ConfigError("an unknown escape in the TOML string %s" % literal[:200])
    return "".join(out)


def _scalar(code: int) -> bool:
    """A Unicode scalar value (no surrogate), as TOML wants an escape to be."""
    return code < 0xD800 or 0xDFFF < code <= 0x10FFFF


def strings_in(value: str) -> List[str]:
    """The one-line strings in an array's text (comments skipped), in order: ``imports = [...]``."""
    found: List[str] = []
    scan = _Scanner(value, "an array")
    while scan.pos < len(value):
        if value[scan.pos] in "\"'":
            start = scan.pos
            scan.string()
            found.append(decode_string(value[start:scan.pos]))
        elif value[scan.pos] == "#":
            scan.blanks(newlines=True)
        else:
            scan.pos += 1
    return found
