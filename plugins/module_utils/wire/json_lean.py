# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""JSON for the OCI hook's start-up, without the ``json`` package.

``json`` imports ``re`` (and through it ``enum``, ``functools`` and ``collections``): 17 ms of a hook run on the 2-CPU
host, where the interpreter itself starts in 10 ms and the hook's whole check takes 28 ms. The parsing and the string
quoting are C code in ``_json`` either way; this module calls it directly:

* ``loads``: ``_json.make_scanner`` with the same settings ``json.loads`` gives it (strict strings, plain dicts,
  ``float``/``int``, the NaN and Infinity constants), on the text decoded as UTF-8 (a byte order mark skipped;
  UTF-16 and UTF-32, which ``json.loads`` also detects, are not read), with only JSON whitespace
  around the value. Its results are ``json.loads``'s (a property test holds the two together).
* ``dumps``: flat documents (dicts, lists, strings, integers, booleans, None) as ``json.dumps`` writes them.

Private: a CPython without ``_json``, or a version outside 3.9-3.14 (the ones whose scanner reads these context
attributes), gets the ``json`` package instead. A malformed text is a ``ValueError`` either way.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

_WHITESPACE = " \t\n\r"


def _scanner() -> Callable[[str, int], Any] | None:
    if not (3, 9) <= sys.version_info[:2] <= (3, 14):
        return None
    try:
        import _json  # noqa: PLC0415
    except ImportError:
        return None
    if not hasattr(_json, "make_scanner"):
        return None

    class _Settings:  # what json.JSONDecoder hands the C scanner, with json.loads's defaults
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__

    return _json.make_scanner(_Settings())  # type: ignore[arg-type]  # typeshed knows only JSONDecoder


_SCAN = _scanner()


def loads(data: bytes | str) -> Any:
    """The JSON value in ``data`` (text, or UTF-8); ValueError when it is not exactly one JSON value."""
    if _SCAN is None:
        import json  # noqa: PLC0415

        return json.loads(data)
    text = data if isinstance(data, str) else data.decode("utf-8-sig")  # UnicodeDecodeError is a ValueError
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _SCAN(text, start)
    except StopIteration as stop:
        raise ValueError("Expecting value: char %s" % stop.value) from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError("Extra data: char %d" % end)
    return value


def dumps(value: Any) -> str:
    """``value`` (dicts, lists, strings, integers, booleans, None) as ``json.dumps`` writes it."""
    try:
        from _json import encode_basestring_ascii as quote  # noqa: PLC0415
    except ImportError:  # pragma: no cover  # CPython always has it
        import json  # noqa: PLC0415

        return json.dumps(value)
    if isinstance(value, str):
        return quote(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, dict):
        return "{" + ", ".join("%s: %s" % (quote(str(key)), dumps(item)) for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(item) for item in value) + "]"
    raise TypeError("%s is not a flat JSON value" % type(value).__name__)
