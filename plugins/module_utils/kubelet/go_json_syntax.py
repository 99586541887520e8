# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Go's syntax check of a JSON document: ``json.Unmarshal`` runs ``checkValid`` over the bytes before it decodes
anything, and a document it refuses is refused in its words (encoding/json scanner.go, its states and texts):
``invalid character 'x' after top-level value``, ``unexpected end of JSON input``. ``go_json.parse`` asks it when
Python's json refuses a document, or reads a literal Go does not (NaN, Infinity).
"""

from __future__ import annotations

from typing import Callable, List, Optional

from .options import go_quote

MAX_NESTING = 10000  # scanner.go maxNestingDepth
_OBJECT_KEY, _OBJECT_VALUE, _ARRAY_VALUE = range(3)
_HEX = frozenset(b"0123456789abcdefABCDEF")
_SPACE = frozenset(b" \t\r\n")


def _quote_char(byte: int) -> str:
    """scanner.go quoteChar: the byte as a rune in single quotes (a byte of 0x80 or more is the rune of that value)."""
    if byte == 0x27:
        return "'\\''"
    if byte == 0x22:
        return "'\"'"
    return "'%s'" % go_quote(chr(byte))[1:-1]


class _Scanner:
    """scanner.go's state machine, one byte a step; ``err`` is the first SyntaxError's text."""

    def __init__(self) -> None:
        self.step: Callable[[int], bool] = self.begin_value
        self.stack: List[int] = []
        self.end_top = False
        self.err: Optional[str] = None

    def error(self, byte: int, context: str) -> bool:
        self.step = lambda byte: False
        self.err = "invalid character %s %s" % (_quote_char(byte), context)
        return False

    def push(self, byte: int, state: int, then: Callable[[int], bool]) -> bool:
        self.stack.append(state)
        self.step = then
        return True if len(self.stack) <= MAX_NESTING else self.error(byte, "exceeded max depth")

    def pop(self) -> None:
        self.stack.pop()
        self.step = self.end_value if self.stack else self.end_top_state
        self.end_top = not self.stack

    def begin_value_or_empty(self, byte: int) -> bool:
        if byte in _SPACE:
            return True
        return self.end_value(byte) if byte == 0x5D else self.begin_value(byte)

    def begin_value(self, byte: int) -> bool:
        if byte in _SPACE:
            return True
        char = chr(byte)
        if char == "{":
            return self.push(byte, _OBJECT_KEY, self.begin_string_or_empty)
        if char == "[":
            return self.push(byte, _ARRAY_VALUE, self.begin_value_or_empty)
        following = {'"': self.in_string, "-": self.negative, "0": self.zero, "t": self.literal("true"),
                     "f": self.literal("false"), "n": self.literal("null")}.get(char)
        if following is None and "1" <= char <= "9":
            following = self.digits
        if following is None:
            return self.error(byte, "looking for beginning of value")
        self.step = following
        return True

    def begin_string_or_empty(self, byte: int) -> bool:
        if byte in _SPACE:
            return True
        if byte == 0x7D:
            self.stack[-1] = _OBJECT_VALUE
            return self.end_value(byte)
        return self.begin_string(byte)

    def begin_string(self, byte: int) -> bool:
        if byte in _SPACE:
            return True
        if byte == 0x22:
            self.step = self.in_string
            return True
        return self.error(byte, "looking for beginning of object key string")

    def end_value(self, byte: int) -> bool:
        if not self.stack:
            self.step, self.end_top = self.end_top_state, True
            return self.end_top_state(byte)
        if byte in _SPACE:
            self.step = self.end_value
            return True
        char, state = chr(byte), self.stack[-1]
        if state == _OBJECT_KEY:
            if char == ":":
                self.stack[-1], self.step = _OBJECT_VALUE, self.begin_value
                return True
            return self.error(byte, "after object key")
        if state == _OBJECT_VALUE:
            if char == ",":
                self.stack[-1], self.step = _OBJECT_KEY, self.begin_string
                return True
            if char == "}":
                self.pop()
                return True
            return self.error(byte, "after object key:value pair")
        if char == ",":
            self.step = self.begin_value
            return True
        if char == "]":
            self.pop()
            return True
        return self.error(byte, "after array element")

    def end_top_state(self, byte: int) -> bool:
        if byte not in _SPACE:
            self.error(byte, "after top-level value")  # reported at the next byte, or at the end
        return True

    def in_string(self, byte: int) -> bool:
        if byte == 0x22:
            self.step = self.end_value
        elif byte == 0x5C:
            self.step = self.in_escape
        elif byte < 0x20:
            return self.error(byte, "in string literal")
        return True

    def in_escape(self, byte: int) -> bool:
        if chr(byte) in 'bfnrt\\/"':
            self.step = self.in_string
            return True
        if byte == 0x75:
            self.step = self.hex_digit(4)
            return True
        return self.error(byte, "in string escape code")

    def hex_digit(self, left: int) -> Callable[[int], bool]:
        def step(byte: int) -> bool:
            if byte not in _HEX:
                return self.error(byte, "in \\u hexadecimal character escape")
            self.step = self.hex_digit(left - 1) if left > 1 else self.in_string
            return True
        return step

    def negative(self, byte: int) -> bool:
        if byte == 0x30:
            self.step = self.zero
            return True
        if 0x31 <= byte <= 0x39:
            self.step = self.digits
            return True
        return self.error(byte, "in numeric literal")

    def digits(self, byte: int) -> bool:
        return True if 0x30 <= byte <= 0x39 else self.zero(byte)

    def zero(self, byte: int) -> bool:
        if byte == 0x2E:
            self.step = self.dot
            return True
        if byte in (0x65, 0x45):
            self.step = self.exponent
            return True
        return self.end_value(byte)

    def dot(self, byte: int) -> bool:
        if 0x30 <= byte <= 0x39:
            self.step = self.fraction
            return True
        return self.error(byte, "after decimal point in numeric literal")

    def fraction(self, byte: int) -> bool:
        if 0x30 <= byte <= 0x39:
            return True
        if byte in (0x65, 0x45):
            self.step = self.exponent
            return True
        return self.end_value(byte)

    def exponent(self, byte: int) -> bool:
        if byte in (0x2B, 0x2D):
            self.step = self.exponent_sign
            return True
        return self.exponent_sign(byte)

    def exponent_sign(self, byte: int) -> bool:
        if 0x30 <= byte <= 0x39:
            self.step = self.exponent_digits
            return True
        return self.error(byte, "in exponent of numeric literal")

    def exponent_digits(self, byte: int) -> bool:
        return True if 0x30 <= byte <= 0x39 else self.end_value(byte)

    def literal(self, word: str, at: int = 1) -> Callable[[int], bool]:
        """``true``, ``false`` or ``null`` after its first ``at`` letters."""
        def step(byte: int) -> bool:
            if byte != ord(word[at]):
                return self.error(byte, "in literal %s (expecting '%s')" % (word, word[at]))
            self.step = self.literal(word, at + 1) if at + 1 < len(word) else self.end_value
            return True
        return step


def syntax_error(data: bytes) -> Optional[str]:
    """What Go's json.Unmarshal says of ``data`` before decoding anything (checkValid): a SyntaxError's text, or
    None when Go's syntax check passes it."""
    scanner = _Scanner()
    for byte in data:
        if not scanner.step(byte):
            return scanner.err
    if scanner.err is not None:
        return scanner.err
    if not scanner.end_top:
        scanner.step(0x20)
        if not scanner.end_top:
            return scanner.err or "unexpected end of JSON input"
    return None
