# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Installing ``bin/kubecpu hook`` into a container runtime, and taking it out again (``cpu_manager_fail_closed``).

* containerd (CRI; 1.6, 1.7, 2.1 and 2.4 tried): the runtime handler's ``base_runtime_spec`` names a spec file that
  holds the hook. The spec is the handler's own base spec when it has one, else the runtime's default
  (``ctr oci spec``), with kubecpu's entry added to ``hooks.createRuntime``. One line in one configuration file
  (``base_runtime_spec = "<file>"``; ``'<file>'`` in a version 3 file, as containerd 2 writes its strings) is
  edited in the text so that every other byte of the operator's files stays; what the line said before is
  returned, to be put back on removal. A configuration with no table for the handler gets one, with containerd's
  default ``runtime_type``.
* containerd's ``imports``: the files are read in containerd's order (the main file, then each import, a glob's
  matches sorted, breadth first, each file once), and the line goes into the file whose value containerd takes:
  containerd 2 merges imported tables key by key, so the last file with the handler's table; containerd 1.x
  replaces a plugin's whole table with an imported one, so the last file with a table of the CRI plugin.
* CRI-O: an OCI hooks.d file (``hooks.d`` schema 1.0.0) at the ``createRuntime`` stage, for every container.

Whether containerd took it is for containerd to say: ``containerd config dump`` (the configuration it would run
with) must show the file in the handler's table, which ``dumped_base_spec`` reads.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..atomic import atomic_write
from ..errors import ConfigError
from ..paths import is_absolute_path

Run = Callable[[List[str]], str]  # runs an argument list, returns its stdout; ConfigError when it fails

HOOK_STAGE = "createRuntime"
# containerd releases seen running a base_runtime_spec's hooks, in the suite: 1.6.20, 1.7.24, 2.1.9, 2.4.2
KEEPS_HOOKS = ((1, 6), (1, 7), (2, 1), (2, 4))
MAX_FILE_BYTES = 4 * 1024 * 1024  # config.toml, an imported file, a spec, a dump
MAX_IMPORTS = 64  # configuration files read through ``imports``
MAX_HOOK_TIMEOUT = 120  # seconds a runtime may give the hook: the kubelet's default runtimeRequestTimeout
DEFAULT_RUNTIME_TYPE = "io.containerd.runc.v2"
# The CRI plugin (its first two keys) per config version: 2 (containerd 1.x), 3 (2.0-2.3), 4 (2.4: the servers'
# sections moved into plugins, the CRI plugin's did not); its runtimes' table is below it.
_CRI_PLUGINS = {2: ("plugins", "io.containerd.grpc.v1.cri"), 3: ("plugins", "io.containerd.cri.v1.runtime"),
                4: ("plugins", "io.containerd.cri.v1.runtime")}
_RUNTIMES = ("containerd", "runtimes")
_QUOTES = {2: '"', 3: "'", 4: "'"}  # how each version's files quote (containerd config default)
_HANDLER = re.compile(r"[A-Za-z0-9_.-]+\Z")
_KEY = re.compile(r"\s*base_runtime_spec\s*=\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*')\s*(#.*)?\Z")
_HEADER = re.compile(r"\s*\[([^\[\]]+)\]\s*(#.*)?\Z")
_VERSION = re.compile(r"\s*version\s*=\s*([0-9]+)\s*(#.*)?\Z")
_IMPORTS = re.compile(r"^imports\s*=\s*\[([^\]]*)\]", re.MULTILINE)
_STRING = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'([^']*)'")


def hook_entry(python: str, kubecpu: str, config: str, timeout: int) -> Dict[str, Any]:
    """kubecpu's OCI hook entry: the node's interpreter isolated and without site packages (the hook's start-up),
    ``bin/kubecpu hook`` with the agent's configuration file. Refused before anything is written: a path that is not
    absolute (the OCI runtime spec wants the hook's path absolute, and the runtime runs it from a directory of its
    own) and a timeout outside 1-``MAX_HOOK_TIMEOUT`` seconds (the spec wants it greater than zero, and the hook is
    fail-closed: a hook the runtime cannot run lets no container start)."""
    for name, path in (("python", python), ("kubecpu", kubecpu), ("config", config)):
        if not is_absolute_path(path):
            raise ConfigError("the hook's %s %r is not an absolute path" % (name, path))
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_HOOK_TIMEOUT:
        raise ConfigError("the hook's timeout must be 1-%d seconds (the kubelet's default runtimeRequestTimeout), "
                          "got %r" % (MAX_HOOK_TIMEOUT, timeout))
    return {"path": python, "args": [python, "-I", "-S", kubecpu, "hook", "--config", config], "timeout": timeout}


def _is_ours(entry: Any) -> bool:
    args = entry.get("args") if isinstance(entry, dict) else None
    return isinstance(args, list) and "hook" in args and any(str(arg).endswith("/bin/kubecpu") for arg in args)


def with_hook(spec: Dict[str, Any], entry: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` with ``entry`` as its one kubecpu ``createRuntime`` hook (an older kubecpu entry replaced, every other
    hook kept in its place)."""
    hooks = dict(spec.get("hooks") or {})
    hooks[HOOK_STAGE] = [item for item in hooks.get(HOOK_STAGE) or [] if not _is_ours(item)] + [entry]
    return dict(spec, hooks=hooks)


def without_hook(spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` without kubecpu's hook; a stage, or the whole ``hooks``, left empty by it goes too."""
    hooks = dict(spec.get("hooks") or {})
    hooks[HOOK_STAGE] = [item for item in hooks.get(HOOK_STAGE) or [] if not _is_ours(item)]
    hooks = {stage: items for stage, items in hooks.items() if stage != HOOK_STAGE or items}
    return dict(spec, hooks=hooks) if hooks else {key: value for key, value in spec.items() if key != "hooks"}


def crio_hook(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The CRI-O hooks.d file for ``entry``: every container, at ``createRuntime``."""
    return {"version": "1.0.0", "hook": entry, "when": {"always": True}, "stages": [HOOK_STAGE]}


def _toml_string(value: str, version: int) -> str:
    if any(ord(char) < 32 or char in "\"'\\" for char in value):
        raise ConfigError("base_runtime_spec path %r has a quote, a backslash or a control character" % value)
    return _quoted(value, version)


def _quoted(text: str, version: int) -> str:
    """``text`` as a TOML string in the quotes a file of ``version`` uses (it holds no quote or backslash)."""
    return _QUOTES[version] + text + _QUOTES[version]


def _unquote(literal: str) -> str:
    return literal[1:-1].replace('\\"', '"').replace("\\\\", "\\") if literal.startswith('"') else literal[1:-1]


def _table_name(header: str) -> Tuple[str, ...]:
    """A TOML table header's keys, unquoted (``plugins."a.b".c`` and ``plugins.'a.b'.c`` are the same table)."""
    parts = re.findall(r'\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*(?:\.|$)', header)
    return tuple(_unquote(part) if part[0] in "\"'" else part for part in parts)


def _header(keys: Sequence[str], version: int) -> str:
    return "[%s]" % ".".join(key if re.match(r"[A-Za-z0-9_-]+\Z", key) else _quoted(key, version) for key in keys)


def _empty(lines: Sequence[str]) -> bool:
    """Nothing but blank lines and comments."""
    return not any(line.strip() and not line.lstrip().startswith("#") for line in lines)


def _version(lines: Sequence[str]) -> int:
    for line in lines:
        if _HEADER.match(line):
            break
        found = _VERSION.match(line)
        if found:
            return int(found.group(1))
    return 1


def _handler_keys(lines: Sequence[str], handler: str) -> Tuple[int, Tuple[str, ...]]:
    """The file's config version and the handler's table's keys in it."""
    if not _HANDLER.match(handler):
        raise ConfigError("runtime handler %r: expected letters, digits, '_', '.' or '-'" % handler)
    version = _version(lines)
    if version not in _CRI_PLUGINS:
        raise ConfigError("containerd config version %d: kubecpu writes versions 2 (containerd 1.6, 1.7), 3 and 4 "
                          "(containerd 2); migrate it with containerd config migrate" % version)
    return version, _CRI_PLUGINS[version] + _RUNTIMES + (handler,)


def _tables(lines: Sequence[str]) -> Iterator[Tuple[Tuple[str, ...], int, int]]:
    """Every table of the file: its keys and its lines [start, end)."""
    start: Optional[int] = None
    keys: Tuple[str, ...] = ()
    for number, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        if start is not None:
            yield keys, start, number
        start, keys = number, _table_name(header.group(1))
    if start is not None:
        yield keys, start, len(lines)


def _handler_table(lines: Sequence[str], handler: str) -> Tuple[int, Tuple[str, ...], Optional[Tuple[int, int]]]:
    """The file's version, the handler's table's keys, and its lines [start, end) when the file has it."""
    version, keys = _handler_keys(lines, handler)
    for name, start, end in _tables(lines):
        if name == keys:
            return version, keys, (start, end)
    return version, keys, None


def set_base_runtime_spec(text: str, handler: str, path: Optional[str], *,
                          new_version: int = 2) -> Tuple[str, Optional[str]]:
    """``config.toml`` with the handler's ``base_runtime_spec`` set to ``path`` (None: the line removed), and what it
    was before (None: no such line). Only that line changes (or a table for the handler is appended). An empty
    file (a distribution's placeholder) gets ``version = new_version`` first: it would be read as version 1."""
    lines = text.split("\n")
    if path is not None and _empty(lines):
        text = "version = %d\n" % new_version + text
        lines = text.split("\n")
    version, keys, table = _handler_table(lines, handler)
    if table is None:
        if path is None:
            return text, None
        block = [_header(keys, version), "  runtime_type = %s" % _quoted(DEFAULT_RUNTIME_TYPE, version),
                 "  base_runtime_spec = %s" % _toml_string(path, version)]
        return text.rstrip("\n") + "\n\n" + "\n".join(block) + "\n", None
    start, end = table
    for number in range(start + 1, end):
        found = _KEY.match(lines[number])
        if found:
            previous = _unquote(found.group(1))
            if path is None:
                del lines[number]
            else:
                indent = lines[number][: len(lines[number]) - len(lines[number].lstrip())]
                lines[number] = "%sbase_runtime_spec = %s" % (indent, _toml_string(path, version))
            return "\n".join(lines), previous
        if re.match(r"\s*base_runtime_spec\s*=", lines[number]):
            raise ConfigError("the %s table's base_runtime_spec line is not a plain string: %s"
                              % (".".join(keys), lines[number]))
    if path is None:
        return text, None
    indent = re.match(r"\s*", lines[start]).group(0) + "  "  # type: ignore[union-attr]  # always matches
    lines.insert(start + 1, "%sbase_runtime_spec = %s" % (indent, _toml_string(path, version)))
    return "\n".join(lines), None


def dumped_base_spec(text: str, handler: str) -> Optional[str]:
    """The handler's ``base_runtime_spec`` in a configuration file or in ``containerd config dump``'s output (None
    when it has none or it is empty)."""
    lines = text.split("\n")
    table = _handler_table(lines, handler)[2]
    if table is None:
        return None
    for line in lines[table[0] + 1: table[1]]:
        found = _KEY.match(line)
        if found:
            return _unquote(found.group(1)) or None
    return None


def _imports(text: str, path: str) -> List[str]:
    """The files a configuration imports, as containerd resolves them: relative to the file's directory, a glob's
    matches sorted."""
    top = text.split("\n[", 1)[0]  # ``imports`` is a top-level key
    found = _IMPORTS.search(top)
    if found is None:
        return []
    files: List[str] = []
    for basic, literal in _STRING.findall(found.group(1)):
        name = os.path.normpath(os.path.join(os.path.dirname(path), basic or literal))
        files.extend(sorted(glob.glob(name)) if glob.has_magic(name) else [name])
    return files


def config_files(config: str) -> List[Tuple[str, str]]:
    """The main configuration file and every file it imports, with their texts, in the order containerd merges them
    (breadth first, each file once)."""
    pending, seen = [os.path.normpath(config)], set()
    files: List[Tuple[str, str]] = []
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
        files.append((path, text))
        if len(files) > MAX_IMPORTS:
            raise ConfigError("%s imports more than %d files" % (config, MAX_IMPORTS))
        pending.extend(_imports(text, path))
    return files


def target_file(files: Sequence[Tuple[str, str]], handler: str, deep_merge: bool) -> int:
    """Which file's line containerd takes (an index into ``files``): with ``deep_merge`` (containerd 2) the last file
    with the handler's table, else (1.x: an imported plugin table replaces the whole table) the last with a table of
    the CRI plugin. The main file when none has one."""
    chosen = 0
    for index, (_path, text) in enumerate(files):
        lines = text.split("\n")
        if _empty(lines):
            continue
        keys = _handler_keys(lines, handler)[1]
        if any(name == keys if deep_merge else name[:2] == keys[:2] for name, _start, _end in _tables(lines)):
            chosen = index
    return chosen


def containerd_version(text: str) -> Tuple[int, int]:
    """(major, minor) from ``containerd --version`` (``containerd github.com/containerd/containerd v1.7.24 ...``;
    Debian's packages print ``1.6.20~ds1``)."""
    found = re.search(r"\bv?([0-9]+)\.([0-9]+)\.[0-9]+", text)
    if found is None:
        raise ConfigError("cannot read a containerd version from %r" % text.strip()[:200])
    return int(found.group(1)), int(found.group(2))


class Installed(NamedTuple):
    changed: bool
    files: List[str]  # what was (or, in check mode, would be) written or removed
    restart: bool  # the runtime must restart to take it (containerd; CRI-O watches hooks.d)
    detail: str


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


def _json_file(path: str) -> Dict[str, Any]:
    text = read_text(path)
    if text is None:
        raise ConfigError("%s does not exist" % path)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError("%s is not JSON: %s" % (path, exc)) from None
    if not isinstance(doc, dict):
        raise ConfigError("%s is not a JSON object" % path)
    return doc


def _write(path: str, text: str, mode: int = 0o644) -> None:
    try:
        atomic_write(path, text.encode("utf-8"), durable=True, mode=mode)
    except OSError as exc:
        raise ConfigError("cannot write %s: %s" % (path, exc.strerror or exc)) from None


def _json_text(doc: Dict[str, Any]) -> str:
    """A spec or a hooks.d file as kubecpu writes it (stable: a second run compares equal)."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


class Containerd:
    """containerd's CRI runtime handler ``handler`` in ``config`` (its ``config.toml``), the hook's spec at ``spec``
    (its previous ``base_runtime_spec`` kept in ``<spec>.previous``); ``containerd`` and ``ctr`` run through ``run``."""

    def __init__(self, config: str, handler: str, spec: str, run: Run, binaries: str = "") -> None:
        self.config, self.handler, self.spec, self.run = config, handler, spec, run
        self.containerd = os.path.join(binaries, "containerd") if binaries else "containerd"
        self.ctr = os.path.join(binaries, "ctr") if binaries else "ctr"

    @property
    def previous_path(self) -> str:
        return self.spec + ".previous"

    def check_version(self) -> Tuple[int, int]:
        version = containerd_version(self.run([self.containerd, "--version"]))
        if version not in KEEPS_HOOKS:
            raise ConfigError("containerd %d.%d was not seen running the hooks of a base_runtime_spec (kubecpu tried "
                              "%s): cpu_manager_fail_closed is refused on it; the NRI plugin or the agent loop pin "
                              "without it" % (version + (", ".join("%d.%d" % known for known in KEEPS_HOOKS),)))
        return version

    def install(self, entry: Dict[str, Any], check: bool) -> Installed:
        files = config_files(self.config)
        version = self.check_version()
        path, text = files[target_file(files, self.handler, deep_merge=version[0] >= 2)]
        new_version = 2  # an empty file gets the version this containerd writes
        if _empty(text.split("\n")) and version[0] >= 2:
            new_version = _version(self.run([self.containerd, "config", "default"]).split("\n"))
        new_text, previous = set_base_runtime_spec(text, self.handler, self.spec, new_version=new_version)
        if previous == self.spec:  # installed before: the base it was made from is remembered
            previous = self._remembered()
            base = without_hook(_json_file(self.spec))
        elif previous:
            base = _json_file(previous)  # the operator's own base spec: the hook is added to a copy of it
        else:
            base = json.loads(self.run([self.ctr, "oci", "spec"]))
        writes = [(name, content) for name, content, now in (
            (self.previous_path, json.dumps({"base_runtime_spec": previous}) + "\n", read_text(self.previous_path)),
            (self.spec, _json_text(with_hook(base, entry)), read_text(self.spec)),
            (path, new_text, text)) if now != content]
        if writes and not check:
            try:
                os.makedirs(os.path.dirname(self.spec), mode=0o755, exist_ok=True)
            except OSError as exc:
                raise ConfigError("cannot create %s: %s" % (os.path.dirname(self.spec), exc.strerror)) from None
            for name, content in writes:
                _write(name, content, 0o600 if name == self.previous_path else 0o644)
            try:
                self.verify(self.spec)
            except ConfigError:
                _write(path, text)  # containerd would not run with it: the operator's file as it was
                raise
        return Installed(bool(writes), [name for name, _content in writes], any(n == path for n, _c in writes),
                         "base_runtime_spec of handler %s: %s (in %s)" % (self.handler, self.spec, path))

    def remove(self, check: bool) -> Installed:
        if not os.path.exists(self.config):
            return Installed(False, [], False, "%s does not exist" % self.config)
        remembered = self._remembered()
        changed: List[str] = []
        for path, text in config_files(self.config):
            if dumped_base_spec(text, self.handler) != self.spec:  # not kubecpu's (a line someone changed is theirs)
                continue
            changed.append(path)  # what it was before put back
            if not check:
                _write(path, set_base_runtime_spec(text, self.handler, remembered)[0])
        if changed and not check:
            self.verify(remembered)
        leftovers = [path for path in (self.spec, self.previous_path) if os.path.exists(path)]
        if not check:
            for path in leftovers:
                os.unlink(path)
        return Installed(bool(changed or leftovers), changed + leftovers, bool(changed),
                         "base_runtime_spec of handler %s: %s" % (self.handler, remembered or "none"))

    def _remembered(self) -> Optional[str]:
        if not os.path.exists(self.previous_path):
            return None
        previous = _json_file(self.previous_path).get("base_runtime_spec")
        return previous if isinstance(previous, str) else None  # "": an empty line (containerd 2's default)

    def verify(self, expected: Optional[str]) -> None:
        """containerd reads the file and would run with ``expected`` as the handler's base spec."""
        dump = self.run([self.containerd, "--config", self.config, "config", "dump"])
        found = dumped_base_spec(dump, self.handler)
        if found != (expected or None):
            raise ConfigError("containerd reads %s with base_runtime_spec %r for handler %s, not %r"
                              % (self.config, found, self.handler, expected))


def install_crio(hooks_dir: str, entry: Dict[str, Any], check: bool) -> Installed:
    """CRI-O: ``<hooks_dir>/kubecpu.json`` (CRI-O watches the directory: no restart)."""
    path = os.path.join(hooks_dir, "kubecpu.json")
    text = _json_text(crio_hook(entry))
    changed = read_text(path) != text
    if changed and not check:
        os.makedirs(hooks_dir, mode=0o755, exist_ok=True)
        _write(path, text)
    return Installed(changed, [path] if changed else [], False, "OCI hooks.d: %s" % path)


def remove_crio(hooks_dir: str, check: bool) -> Installed:
    path = os.path.join(hooks_dir, "kubecpu.json")
    present = os.path.exists(path)
    if present and not check:
        os.unlink(path)
    return Installed(present, [path] if present else [], False, "OCI hooks.d: %s" % path)
