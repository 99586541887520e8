# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Installing ``bin/kubecpu hook`` into a container runtime, and taking it out again (``cpu_manager_fail_closed``).

* containerd (CRI, 1.6 and 1.7 tried): the runtime handler's ``base_runtime_spec`` names a spec file that holds the
  hook. The spec is the handler's own base spec when it has one, else the runtime's default (``ctr oci spec``), with
  kubecpu's entry added to ``hooks.createRuntime``. The handler's table in ``config.toml`` gets one line
  (``base_runtime_spec = "<file>"``), edited in the text so that every other byte of the operator's file stays;
  what the line said before is returned, to be put back on removal. A config with no table for the handler gets
  one, with containerd's default ``runtime_type``. containerd's ``imports`` are no help: an imported file replaces
  a plugin's whole table, so the line goes into the main file.
* CRI-O: an OCI hooks.d file (``hooks.d`` schema 1.0.0) at the ``createRuntime`` stage, for every container.

Whether containerd took it is for containerd to say: ``containerd config dump`` (the configuration it would run
with) must show the file in the handler's table, which ``dumped_base_spec`` reads.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..atomic import atomic_write
from ..errors import ConfigError

Run = Callable[[List[str]], str]  # runs an argument list, returns its stdout; ConfigError when it fails

HOOK_STAGE = "createRuntime"
KEEPS_HOOKS = ((1, 6), (1, 7))  # containerd releases seen running a base_runtime_spec's hooks (1.6.20, 1.7.24)
MAX_FILE_BYTES = 4 * 1024 * 1024  # config.toml, a spec, a dump
DEFAULT_RUNTIME_TYPE = "io.containerd.runc.v2"
# The CRI plugin's table per config version: 2 (containerd 1.x) and 3 (containerd 2.x).
_CRI_TABLES = {2: 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes',
               3: 'plugins."io.containerd.cri.v1.runtime".containerd.runtimes'}
_HANDLER = re.compile(r"[A-Za-z0-9_.-]+\Z")
_KEY = re.compile(r"\s*base_runtime_spec\s*=\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*')\s*(#.*)?\Z")
_HEADER = re.compile(r"\s*\[([^\[\]]+)\]\s*(#.*)?\Z")
_VERSION = re.compile(r"\s*version\s*=\s*([0-9]+)\s*(#.*)?\Z")


def hook_entry(python: str, kubecpu: str, config: str, timeout: int) -> Dict[str, Any]:
    """kubecpu's OCI hook entry: the node's interpreter isolated and without site packages (the hook's start-up),
    ``bin/kubecpu hook`` with the agent's configuration file."""
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


def _toml_string(value: str) -> str:
    if any(ord(char) < 32 or char in '"\\' for char in value):
        raise ConfigError("base_runtime_spec path %r has a quote, a backslash or a control character" % value)
    return '"%s"' % value


def _unquote(literal: str) -> str:
    return literal[1:-1].replace('\\"', '"').replace("\\\\", "\\") if literal.startswith('"') else literal[1:-1]


def _table_name(header: str) -> str:
    """A TOML table header's key path with the spaces around the dots removed."""
    parts = re.findall(r'\s*("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)\s*(?:\.|$)', header)
    return ".".join(parts)


def _version(lines: Sequence[str]) -> int:
    for line in lines:
        if _HEADER.match(line):
            break
        found = _VERSION.match(line)
        if found:
            return int(found.group(1))
    return 1


def _handler_table(lines: Sequence[str], handler: str) -> Tuple[str, Optional[Tuple[int, int]]]:
    """The handler's table name for this config's version, and its lines [start, end) when the file has it."""
    if not _HANDLER.match(handler):
        raise ConfigError("runtime handler %r: expected letters, digits, '_', '.' or '-'" % handler)
    version = _version(lines)
    if version not in _CRI_TABLES:
        raise ConfigError("containerd config version %d: kubecpu writes versions 2 (containerd 1.6, 1.7) and 3 "
                          "(2.x); migrate it with containerd config migrate" % version)
    name = "%s.%s" % (_CRI_TABLES[version], handler)
    start = None
    for number, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        if start is not None:
            return name, (start, number)
        if _table_name(header.group(1)) == name:
            start = number
    return name, None if start is None else (start, len(lines))


def set_base_runtime_spec(text: str, handler: str, path: Optional[str]) -> Tuple[str, Optional[str]]:
    """``config.toml`` with the handler's ``base_runtime_spec`` set to ``path`` (None: the line removed), and what it
    was before (None: no such line). Only that line changes (or a table for the handler is appended)."""
    lines = text.split("\n")
    if path is not None and not any(line.strip() and not line.lstrip().startswith("#") for line in lines):
        text = "version = 2\n" + text  # an empty file (a distribution's placeholder) would be read as version 1
        lines = text.split("\n")
    name, table = _handler_table(lines, handler)
    if table is None:
        if path is None:
            return text, None
        block = ["[%s]" % name, '  runtime_type = "%s"' % DEFAULT_RUNTIME_TYPE,
                 "  base_runtime_spec = %s" % _toml_string(path)]
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
                lines[number] = "%sbase_runtime_spec = %s" % (indent, _toml_string(path))
            return "\n".join(lines), previous
        if re.match(r"\s*base_runtime_spec\s*=", lines[number]):
            raise ConfigError("the %s table's base_runtime_spec line is not a plain string: %s" % (name, lines[number]))
    if path is None:
        return text, None
    indent = re.match(r"\s*", lines[start]).group(0) + "  "  # type: ignore[union-attr]  # always matches
    lines.insert(start + 1, "%sbase_runtime_spec = %s" % (indent, _toml_string(path)))
    return "\n".join(lines), None


def dumped_base_spec(dump: str, handler: str) -> Optional[str]:
    """The handler's ``base_runtime_spec`` in ``containerd config dump``'s output (None when it has none)."""
    lines = dump.split("\n")
    _name, table = _handler_table(lines, handler)
    if table is None:
        return None
    for line in lines[table[0] + 1: table[1]]:
        found = _KEY.match(line)
        if found:
            return _unquote(found.group(1)) or None
    return None


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
        text = read_text(self.config)
        if text is None:
            raise ConfigError("%s does not exist: write containerd's configuration first (containerd config default)"
                              % self.config)
        self.check_version()
        new_text, previous = set_base_runtime_spec(text, self.handler, self.spec)
        if previous == self.spec:  # installed before: the base it was made from is remembered
            previous = self._remembered()
            base = without_hook(_json_file(self.spec))
        elif previous:
            base = _json_file(previous)  # the operator's own base spec: the hook is added to a copy of it
        else:
            base = json.loads(self.run([self.ctr, "oci", "spec"]))
        writes = [(path, content) for path, content, now in (
            (self.previous_path, json.dumps({"base_runtime_spec": previous}) + "\n", read_text(self.previous_path)),
            (self.spec, _json_text(with_hook(base, entry)), read_text(self.spec)),
            (self.config, new_text, text)) if now != content]
        if writes and not check:
            try:
                os.makedirs(os.path.dirname(self.spec), mode=0o755, exist_ok=True)
            except OSError as exc:
                raise ConfigError("cannot create %s: %s" % (os.path.dirname(self.spec), exc.strerror)) from None
            for path, content in writes:
                _write(path, content, 0o600 if path == self.previous_path else 0o644)
            try:
                self.verify(self.spec)
            except ConfigError:
                _write(self.config, text)  # containerd would not run with it: the operator's file as it was
                raise
        return Installed(bool(writes), [path for path, _content in writes], any(p == self.config for p, _c in writes),
                         "base_runtime_spec of handler %s: %s" % (self.handler, self.spec))

    def remove(self, check: bool) -> Installed:
        text = read_text(self.config)
        if text is None:
            return Installed(False, [], False, "%s does not exist" % self.config)
        remembered = self._remembered()
        new_text, current = set_base_runtime_spec(text, self.handler, remembered)
        changed: List[str] = []
        if current == self.spec:  # still kubecpu's: what it was before put back (a line someone changed is theirs)
            changed.append(self.config)
            if not check:
                _write(self.config, new_text)
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
        return previous if isinstance(previous, str) and previous else None

    def verify(self, expected: Optional[str]) -> None:
        """containerd reads the file and would run with ``expected`` as the handler's base spec."""
        dump = self.run([self.containerd, "--config", self.config, "config", "dump"])
        found = dumped_base_spec(dump, self.handler)
        if found != expected:
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
