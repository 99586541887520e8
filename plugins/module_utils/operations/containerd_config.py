# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""containerd's configuration as containerd reads it, for one runtime handler's ``base_runtime_spec``: the files
(``imports``), the value containerd runs with, the file whose table it takes, and one line set in it and taken out
again, every other byte of the operator's files as it was.

How containerd reads them (cmd/containerd/server/config/config.go, plugins/cri/runtime/plugin.go):

* the main file, then each import, breadth first, each file once; an import relative to its file's directory; a path
  with ``*`` a glob (its matches sorted, hidden files included), any other path a file that must exist;
* containerd 2 merges the files key by key (mergo), a later file's key over an earlier one's, an empty string
  included. 2.4 migrates each file to its version before the merge, so every file counts. 2.0-2.3 migrate after
  it, once, and only when the last file that names a version names 2: then the version 2 tables
  (``io.containerd.grpc.v1.cri``) count unless a version 3 file has a ``runtimes`` table; otherwise only version
  3 and 4 files (``io.containerd.cri.v1.runtime``) count;
* containerd 1.x replaces a plugin's whole table with an imported one: only the last file with a table of the CRI
  plugin counts.

A comment-only file (a drop-in directory's placeholder) has no version and no table: it counts for nothing.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..wire.toml_text import Statement, decode_string, is_plain_string, statements, strings_in

MAX_FILE_BYTES = 4 * 1024 * 1024  # config.toml, an imported file, a spec, a dump
MAX_IMPORTS = 64  # configuration files read through ``imports``
DEFAULT_RUNTIME_TYPE = "io.containerd.runc.v2"
WRITABLE = (2, 3, 4)  # the versions kubecpu edits: 2 (containerd 1.6, 1.7), 3 (2.0-2.3), 4 (2.4)
# The CRI plugin's runtime settings per generation of the format: 1 (no version), 2, 3 (versions 3 and 4: 2.4 moved
# the servers' sections into plugins, not the CRI plugin's); the runtimes' table is below it.
_PLUGINS = {1: ("plugins", "cri"), 2: ("plugins", "io.containerd.grpc.v1.cri"),
            3: ("plugins", "io.containerd.cri.v1.runtime")}
_RUNTIMES = ("containerd", "runtimes")
_HANDLER = re.compile(r"[A-Za-z0-9_.-]+\Z")
_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")


class ConfigFile(NamedTuple):
    path: str
    text: str
    version: int  # as written; 0: none (containerd reads it as version 1)
    statements: List[Statement]

    @property
    def empty(self) -> bool:
        """Blank lines and comments only."""
        return not self.statements

    @property
    def generation(self) -> int:
        return 1 if self.version <= 1 else 2 if self.version == 2 else 3


def read_text(path: str, limit: int = MAX_FILE_BYTES) -> Optional[str]:
    """A UTF-8 file of at most ``limit`` bytes, or None when there is none (daemon_dropins reads with it too)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > limit:
        raise ConfigError("%s is larger than %d bytes" % (path, limit))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("%s is not UTF-8" % path) from None


def parse(path: str, text: str) -> ConfigFile:
    found = statements(text, path)
    version = 0
    for statement in found:
        if statement.path == ("version",):
            literal = text[statement.value[0]:statement.value[1]]
            if not re.match(r"[0-9]{1,3}\Z", literal):
                raise ConfigError("%s: version = %s is not a config version" % (path, literal))
            version = int(literal)
    return ConfigFile(path, text, version, found)


def _top_level(config: ConfigFile, key: str) -> Optional[str]:
    for statement in config.statements:
        if statement.path == (key,):
            return config.text[statement.value[0]:statement.value[1]]
    return None


def _glob(pattern: str) -> List[str]:
    """Go's filepath.Glob: each directory's matches sorted, hidden files included."""
    directory, base = os.path.split(pattern)
    parents = _glob(directory) if re.search(r"[*?\[]", directory) else [directory]
    found: List[str] = []
    for parent in parents:
        if not re.search(r"[*?\[]", base):
            found.extend([os.path.join(parent, base)] if os.path.lexists(os.path.join(parent, base)) else [])
            continue
        try:
            names = sorted(os.listdir(parent or "."))
        except OSError:
            continue
        found.extend(os.path.join(parent, name) for name in names if fnmatch.fnmatchcase(name, base))
    return found


def _imports(config: ConfigFile) -> List[str]:
    """The files a configuration imports, as containerd resolves them."""
    value = _top_level(config, "imports")
    if value is None:
        return []
    if not value.startswith("["):
        raise ConfigError("%s: imports = %s is not an array (containerd would not start)" % (config.path, value[:200]))
    files: List[str] = []
    for name in strings_in(value):
        path = os.path.normpath(os.path.join(os.path.dirname(config.path), name))
        files.extend(_glob(path) if "*" in path else [path])
    return files


def config_files(config: str) -> List[ConfigFile]:
    """The main configuration file and every file it imports, read, in the order containerd merges them."""
    pending, seen = [os.path.normpath(config)], set()
    files: List[ConfigFile] = []
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = read_text(path)
        if text is None:
            if not files:
                raise ConfigError("%s does not exist: write containerd's configuration first (containerd config "
                                  "default)" % config)
            raise ConfigError("%s imports %s, which does not exist (containerd would not start)" % (config, path))
        files.append(parse(path, text))
        if len(files) > MAX_IMPORTS:
            raise ConfigError("%s imports more than %d files" % (config, MAX_IMPORTS))
        pending.extend(_imports(files[-1]))
    return files


def handler_keys(generation: int, handler: str) -> Tuple[str, ...]:
    if not _HANDLER.match(handler):
        raise ConfigError("runtime handler %r: expected letters, digits, '_', '.' or '-'" % handler)
    return _PLUGINS[generation] + _RUNTIMES + (handler,)


class HandlerTable(NamedTuple):
    header: Optional[Statement]  # [...runtimes.<handler>]
    line: Optional[Statement]  # its base_runtime_spec


def handler_table(config: ConfigFile, handler: str) -> HandlerTable:
    """The handler's table in the file (in its version's plugin). Refused: the table set with dotted keys or inline
    (kubecpu edits a [table]), and a base_runtime_spec that is not a one-line string."""
    keys = handler_keys(config.generation, handler)
    header = line = None
    for statement in config.statements:
        if statement.path[:len(keys)] != keys:
            continue
        if len(statement.table) < len(keys) or (statement.array and statement.table == keys):
            raise ConfigError("%s line %d sets the %s table with a dotted key, inline or as an array: kubecpu edits a "
                              "[table] of its own only" % (config.path, statement.line, ".".join(keys)))
        if statement.table == keys and not statement.key:
            header = statement
        elif statement.table == keys and statement.key == ("base_runtime_spec",):
            if not is_plain_string(config.text[statement.value[0]:statement.value[1]]):
                raise ConfigError("%s line %d: the %s table's base_runtime_spec is not a one-line string"
                                  % (config.path, statement.line, ".".join(keys)))
            line = statement
    return HandlerTable(header, line)


def line_value(config: ConfigFile, line: Statement) -> str:
    return decode_string(config.text[line.value[0]:line.value[1]])


class Effective(NamedTuple):
    value: Optional[str]  # the handler's base_runtime_spec containerd runs with (None: no file sets it)
    source: Optional[int]  # the file that sets it
    target: int  # the file whose handler table containerd takes last: the line goes there (or a table is added)
    generation: int  # where containerd takes the handler from: 2 (io.containerd.grpc.v1.cri) or 3


def effective(files: Sequence[ConfigFile], handler: str, runtime: Tuple[int, int]) -> Effective:
    """What containerd ``runtime`` (major, minor) reads from ``files`` (in its order) for the handler."""
    present = [index for index, config in enumerate(files) if not config.empty]
    if runtime[0] < 2:  # an imported table of the CRI plugin replaces the whole plugin
        cri = [index for index in present if any(statement.path[:2] in (_PLUGINS[1], _PLUGINS[2])
                                                 for statement in files[index].statements)]
        taken, generation = cri[-1:], 2
        target = cri[-1] if cri else 0
    else:
        if runtime >= (2, 4):  # each file migrated before the merge
            generation = 3
            taken = present
        else:  # migrated after it, when the last version named is 2
            final = ([files[index].version for index in present if files[index].version >= 2] or [3])[-1]
            runtimes3 = any(files[index].generation == 3 and any(
                statement.path[:4] == _PLUGINS[3] + _RUNTIMES for statement in files[index].statements)
                for index in present)
            generation = 3 if final >= 3 or runtimes3 else 2
            taken = [index for index in present if (files[index].generation == 3) == (generation == 3)]
        target = 0 if files[0].empty or 0 in taken else (taken or [0])[-1]
    value: Optional[str] = None
    source: Optional[int] = None
    for index in taken:
        table = handler_table(files[index], handler)
        if table.header is not None:
            target = index
        if table.line is not None:
            value, source = line_value(files[index], table.line), index
    return Effective(value, source, target, generation)


def dumped_base_spec(text: str, handler: str) -> Optional[str]:
    """The handler's ``base_runtime_spec`` in ``containerd config dump``'s output (None: none, or empty)."""
    dump = parse("containerd's config dump", text)
    line = handler_table(dump, handler).line
    return (line_value(dump, line) or None) if line is not None else None


def _quoted(text: str, quote: str) -> str:
    if any(ord(char) < 32 or char in "\"'\\" or char == "\x7f" for char in text):
        raise ConfigError("base_runtime_spec path %r has a quote, a backslash or a control character" % text)
    return quote + text + quote


def _header(keys: Sequence[str], quote: str) -> str:
    return "[%s]" % ".".join(key if _BARE.match(key) else _quoted(key, quote) for key in keys)


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def set_line(config: ConfigFile, handler: str, spec: str, new_version: int) -> Tuple[str, Dict[str, Any]]:
    """The file's text with the handler's ``base_runtime_spec`` set to ``spec``, and the record that takes it out
    again byte for byte (``take_out``): the value replaced in its own quotes, else a line after the table's header,
    else a table appended (with containerd's default ``runtime_type``). A comment-only file gets ``version =
    new_version`` first: it would be read as version 1. Line ends as the file's (CRLF stays CRLF)."""
    text = config.text
    record: Dict[str, Any] = {}
    eol = "\r\n" if "\r\n" in text else "\n"
    if config.empty:
        record["version_line"] = "version = %d%s" % (new_version, eol)
        text = record["version_line"] + text
        config = parse(config.path, text)
    if config.version not in WRITABLE:
        raise ConfigError("%s: containerd config version %s: kubecpu writes versions 2 (containerd 1.6, 1.7), 3 and 4 "
                          "(containerd 2); migrate it with containerd config migrate"
                          % (config.path, config.version or "1 (none written)"))
    quote = '"' if config.version == 2 else "'"  # as containerd config default writes each version
    table = handler_table(config, handler)
    if table.line is not None:
        start, end = table.line.value
        record.update(kind="value", literal=text[start:end])
        return text[:start] + _quoted(spec, text[start]) + text[end:], record
    line = "base_runtime_spec = %s" % _quoted(spec, quote)
    if table.header is not None:
        header = table.header
        first = next((s for s in config.statements if s.table == header.table and s.key and s.start > header.start),
                     None)
        indent_from = first.start if first is not None else header.start
        indent = text[_line_start(text, indent_from):indent_from] + ("" if first is not None else "  ")
        if header.end == len(text) and not text.endswith("\n"):
            inserted = eol + indent + line
        else:
            inserted = indent + line + ("\r\n" if text[:header.end].endswith("\r\n") else "\n")
        record.update(kind="line", inserted=inserted)
        return text[:header.end] + inserted + text[header.end:], record
    keys = handler_keys(config.generation, handler)
    stripped = text.rstrip("\r\n")
    block = [_header(keys, quote), "  runtime_type = %s" % _quoted(DEFAULT_RUNTIME_TYPE, quote), "  " + line]
    appended = (eol * 2 if stripped else "") + eol.join(block) + eol
    record.update(kind="table", appended=appended, tail=text[len(stripped):])
    return stripped + appended, record


def kubecpus_lines(config: ConfigFile, handler: str, spec: str) -> List[Statement]:
    """The handler's base_runtime_spec lines that name ``spec``, in any generation's table (nothing refused: removal
    reads what install wrote, whatever else the file holds)."""
    found = []
    for generation in _PLUGINS:
        keys = handler_keys(generation, handler)
        for statement in config.statements:
            if statement.table == keys and statement.key == ("base_runtime_spec",):
                literal = config.text[statement.value[0]:statement.value[1]]
                if is_plain_string(literal) and decode_string(literal) == spec:
                    found.append(statement)
    return found


def _cut(text: str, statement: Statement) -> str:
    """``text`` without the statement's line (a last line without a newline takes the newline before it)."""
    start = _line_start(text, statement.start)
    if statement.end == len(text) and not text.endswith("\n") and start > 0:
        start -= 2 if text[:start].endswith("\r\n") else 1
    return text[:start] + text[statement.end:]


def take_out(config: ConfigFile, handler: str, spec: str, record: Optional[Dict[str, Any]],
             previous: Optional[str]) -> Optional[str]:
    """The file's text with kubecpu's line taken out (None: it has none). With the ``record`` ``set_line`` made the
    file is byte for byte what it was, unless someone changed it since around the line: then the line alone goes (a
    table kubecpu added and someone filled stays theirs). Without one (a line written before kubecpu recorded its
    edits): the value ``previous`` put back in the line, or the line removed."""
    lines = kubecpus_lines(config, handler, spec)
    if not lines:
        return None
    done: Dict[str, Any] = dict(record or {})
    text, line, kind = config.text, lines[-1], done.get("kind")
    start = _line_start(text, line.start)
    if kind == "value" or (kind is None and previous is not None):
        literal = done["literal"] if kind == "value" else _quoted(str(previous), text[line.value[0]])
        text = text[:line.value[0]] + literal + text[line.value[1]:]
    elif kind == "table" and text.endswith(done["appended"]):
        text = text[:len(text) - len(done["appended"])] + done["tail"]
    elif kind == "line" and text.startswith(done["inserted"], start):
        text = text[:start] + text[start + len(done["inserted"]):]
    elif kind == "line" and done["inserted"][0] in "\r\n" and text.endswith(done["inserted"]):
        text = text[:len(text) - len(done["inserted"])]
    else:
        text = _cut(text, line)
    version_line = done.get("version_line")
    if isinstance(version_line, str) and text.startswith(version_line) and parse(
            config.path, text[len(version_line):]).empty:  # the placeholder as it was
        text = text[len(version_line):]
    return text
