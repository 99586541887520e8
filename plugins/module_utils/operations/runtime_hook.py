# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Installing ``bin/kubecpu hook`` into a container runtime, and taking it out again (``cpu_manager_fail_closed``).

* containerd (CRI; 1.6, 1.7, 2.1 and 2.4 tried): the runtime handler's ``base_runtime_spec`` names a spec file that
  holds the hook. The spec is the base spec containerd ran the handler with (the value it reads from all its files,
  ``containerd_config.effective``), else the runtime's default (``ctr oci spec``), with kubecpu's entry added to
  ``hooks.createRuntime``. One line goes into the file whose handler table containerd takes last (its value
  replaced in its own quotes, or a line after the table's header, or a table appended, with containerd's default
  ``runtime_type``), and every other byte of the operator's files stays. What the edit was is kept in
  ``<spec>.previous`` with the value containerd ran with before, so that removal gives the file back byte for byte.
* CRI-O: an OCI hooks.d file (``hooks.d`` schema 1.0.0) at the ``createRuntime`` stage, for every container.

Every file rewritten keeps its owner, group and mode (``atomic_write``): containerd's configuration can hold registry
credentials. The spec and the record kubecpu makes are 0600 (containerd reads them as root); the hooks.d file 0644
(podman reads the directory as the user who runs it).

Whether containerd took it is for containerd to say: ``containerd config dump`` (the configuration it would run
with) must show the file in the handler's table, which ``dumped_base_spec`` reads.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ..atomic import atomic_write
from ..errors import ConfigError
from ..paths import is_absolute_path
from .containerd_config import (ConfigFile, config_files, dumped_base_spec, effective, parse,
                                read_text, set_line, take_out)

__all__ = ["read_text"]  # daemon_dropins reads with it

Run = Callable[[List[str]], str]  # runs an argument list, returns its stdout; ConfigError when it fails

HOOK_STAGE = "createRuntime"
# containerd releases seen running a base_runtime_spec's hooks, in the suite: 1.6.20, 1.7.24, 2.1.9, 2.4.2
KEEPS_HOOKS = ((1, 6), (1, 7), (2, 1), (2, 4))
MAX_HOOK_TIMEOUT = 120  # seconds a runtime may give the hook: the kubelet's default runtimeRequestTimeout
_RECORD_KINDS = {"value": ("literal",), "line": ("inserted",), "table": ("appended", "tail")}


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


# The kubelet annotates every container it asks a runtime to create with its restart count; CRI-O matches a hooks.d
# file's annotations against the container's (tried on CRI-O 1.36.3: its own io.kubernetes.cri-o.ContainerType is not
# among them). hooks.d is read by podman too (rootful and rootless): a hook injected "always" ran for every podman
# container, and refused it when its configuration could not be read by the user running podman.
CRIO_CONTAINER = {"^io\\.kubernetes\\.container\\.restartCount$": ".*"}


def crio_hook(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The CRI-O hooks.d file for ``entry``: the kubelet's containers (oci-hooks(5): a hook is injected when all of its
    ``when`` conditions match; ``annotations`` are extended regular expressions over the container's annotations), at
    ``createRuntime``."""
    return {"version": "1.0.0", "hook": entry, "when": {"annotations": CRIO_CONTAINER}, "stages": [HOOK_STAGE]}


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


def _write(path: str, text: str, mode: int) -> None:
    """``path`` replaced by ``text``; a file that is there keeps its owner, group and mode, a new one gets ``mode``.
    A symlink stays one: the file it names is replaced (a config.toml linked from a managed tree)."""
    try:
        atomic_write(os.path.realpath(path), text.encode("utf-8"), durable=True, mode=mode)
    except OSError as exc:
        raise ConfigError("cannot write %s: %s" % (path, exc.strerror or exc)) from None


def _json_text(doc: Dict[str, Any]) -> str:
    """A spec or a hooks.d file as kubecpu writes it (stable: a second run compares equal)."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _record(path: str, record: Any) -> Dict[str, Any]:
    """An edit as ``set_line`` records it, checked: it is put back into the operator's file."""
    fields = _RECORD_KINDS.get(str(record.get("kind"))) if isinstance(record, dict) else None
    version_line = record.get("version_line") if isinstance(record, dict) else None
    if fields is None or not all(isinstance(record.get(name), str) for name in fields) or (
            record["kind"] != "table" and not record[fields[0]]) or not (
            version_line is None or re.match(r"version = [0-9]+\r?\n\Z", str(version_line))) or (
            record["kind"] == "value" and not re.match(r"(\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*')\Z", record["literal"])):
        raise ConfigError("the record of kubecpu's edit of %s is not one kubecpu writes: %r" % (path, record))
    return dict(record)


class Containerd:
    """containerd's CRI runtime handler ``handler`` in ``config`` (its ``config.toml``), the hook's spec at ``spec``
    (what containerd ran the handler with before, and kubecpu's edits, kept in ``<spec>.previous``); ``containerd``
    and ``ctr`` run through ``run``."""

    def __init__(self, config: str, handler: str, spec: str, run: Run, binaries: str = "") -> None:
        self.config, self.handler, self.spec, self.run = config, handler, spec, run
        self.containerd = os.path.join(binaries, "containerd") if binaries else "containerd"
        self.ctr = os.path.join(binaries, "ctr") if binaries else "ctr"

    @property
    def previous_path(self) -> str:
        return self.spec + ".previous"

    def version(self) -> Tuple[int, int]:
        return containerd_version(self.run([self.containerd, "--version"]))

    def check_version(self) -> Tuple[int, int]:
        version = self.version()
        if version not in KEEPS_HOOKS:
            raise ConfigError("containerd %d.%d was not seen running the hooks of a base_runtime_spec (kubecpu tried "
                              "%s): cpu_manager_fail_closed is refused on it; the NRI plugin or the agent loop pin "
                              "without it" % (version + (", ".join("%d.%d" % known for known in KEEPS_HOOKS),)))
        return version

    def install(self, entry: Dict[str, Any], check: bool) -> Installed:
        files = config_files(self.config)
        version = self.check_version()
        found = effective(files, self.handler, version)
        memory = self._memory()
        target = files[found.target]
        if found.value == self.spec:  # installed: containerd runs kubecpu's spec
            where = files[found.source or 0].path
            base = self._base(memory["base_runtime_spec"], installed=True)
            writes = [(self.spec, _json_text(with_hook(base, entry)))]
        else:  # the spec containerd ran the handler with gets the hook (a copy of it: the operator's stays)
            where = target.path
            base = self._base(found.value, installed=False)
            text, record = set_line(target, self.handler, self.spec,
                                    self._new_version(target, found.generation, version))
            memory = {"base_runtime_spec": found.value, "edits": dict(memory["edits"] or {}, **{target.path: record})}
            writes = [(self.previous_path, json.dumps(memory, sort_keys=True) + "\n"),
                      (self.spec, _json_text(with_hook(base, entry))), (target.path, text)]
        before = {name: read_text(name) for name, _content in writes}
        writes = [(name, content) for name, content in writes if before[name] != content]
        if writes and not check:
            try:
                os.makedirs(os.path.dirname(self.spec), mode=0o755, exist_ok=True)
            except OSError as exc:
                raise ConfigError("cannot create %s: %s" % (os.path.dirname(self.spec), exc.strerror)) from None
            for name, content in writes:
                _write(name, content, 0o600)  # a new spec or record: containerd (root) reads them
            try:
                self.verify(self.spec)
            except ConfigError:  # containerd would not run with it: every file as it was
                for name, _content in reversed(writes):
                    self._put_back(name, before[name])
                raise
        return Installed(bool(writes), [name for name, _content in writes], any(n == where for n, _c in writes),
                         "base_runtime_spec of handler %s: %s (in %s)" % (self.handler, self.spec, where))

    def remove(self, check: bool) -> Installed:
        if not os.path.exists(self.config):
            return Installed(False, [], False, "%s does not exist" % self.config)
        memory = self._memory()
        restored: List[ConfigFile] = []
        changed: List[Tuple[str, str]] = []
        for config in config_files(self.config):
            legacy = memory["edits"] is None  # no record: the value it had put back, or the line removed
            text = take_out(config, self.handler, self.spec, (memory["edits"] or {}).get(config.path),
                            memory["base_runtime_spec"] if legacy else None)
            if text is not None:  # only a line that still names kubecpu's spec (one someone changed is theirs)
                changed.append((config.path, text))
            restored.append(config if text is None else parse(config.path, text))
        if changed and not check:
            for path, text in changed:
                _write(path, text, 0o600)
            try:
                expected = effective(restored, self.handler, self.version()).value
            except ConfigError:
                expected = memory["base_runtime_spec"]
            self.verify(expected)
        leftovers = [path for path in (self.spec, self.previous_path) if os.path.exists(path)]
        if not check:
            for path in leftovers:
                os.unlink(path)
        return Installed(bool(changed or leftovers), [path for path, _text in changed] + leftovers, bool(changed),
                         "base_runtime_spec of handler %s: %s" % (self.handler, memory["base_runtime_spec"] or "none"))

    def _memory(self) -> Dict[str, Any]:
        """``<spec>.previous``: ``base_runtime_spec``, what containerd ran the handler with before (None: nothing,
        "": containerd 2's empty default), and ``edits``, each file's record (None: no file, or one written before
        kubecpu recorded its edits, which kept the value only)."""
        if not os.path.exists(self.previous_path):
            return {"base_runtime_spec": None, "edits": None}
        doc = _json_file(self.previous_path)
        previous, edits = doc.get("base_runtime_spec"), doc.get("edits")
        if not (previous is None or isinstance(previous, str)) or not (edits is None or isinstance(edits, dict)):
            raise ConfigError("%s is not a record kubecpu writes: kept; the handler's line can be taken out by hand"
                              % self.previous_path)
        if edits is not None:
            edits = {str(path): _record(path, record) for path, record in edits.items()}
        return {"base_runtime_spec": previous, "edits": edits}

    def _base(self, previous: Optional[str], installed: bool) -> Dict[str, Any]:
        """The spec the hook is added to: kubecpu's own without the hook when it is installed and there, else the
        one containerd ran the handler with, else containerd's default."""
        if installed and os.path.exists(self.spec):
            return without_hook(_json_file(self.spec))
        if previous:
            return _json_file(previous)
        return dict(json.loads(self.run([self.ctr, "oci", "spec"])))

    def _new_version(self, target: ConfigFile, generation: int, version: Tuple[int, int]) -> int:
        """The version a comment-only file gets: the one whose tables containerd takes, in what this containerd
        writes (version 2 on 1.x)."""
        if not target.empty or version[0] < 2 or generation == 2:
            return 2
        return parse("containerd config default", self.run([self.containerd, "config", "default"])).version

    @staticmethod
    def _put_back(path: str, text: Optional[str]) -> None:
        if text is not None:
            _write(path, text, 0o600)
        elif os.path.exists(path):
            os.unlink(path)

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
        _write(path, text, 0o644)  # podman reads hooks.d as the user who runs it
    return Installed(changed, [path] if changed else [], False, "OCI hooks.d: %s" % path)


def remove_crio(hooks_dir: str, check: bool) -> Installed:
    path = os.path.join(hooks_dir, "kubecpu.json")
    present = os.path.exists(path)
    if present and not check:
        os.unlink(path)
    return Installed(present, [path] if present else [], False, "OCI hooks.d: %s" % path)
