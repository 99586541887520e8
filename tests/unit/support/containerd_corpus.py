"""containerd 2 configurations as operators and distributions write them, and containerd's way of reading them
(``containerd_reads``), written again from containerd's source (v2.1.4 and v2.4.2,
cmd/containerd/server/config/config.go: LoadConfig, resolveImports, mergeConfig; plugins/cri/runtime/plugin.go:
configMigration) with ``tomllib``, apart from the module's own reading: the oracle the unit tests judge it by. The
integration test asks a real containerd (``containerd config dump``) about the same cases.

Each case is a set of files under a directory (``{dir}`` in a text is that directory), ``config.toml`` the main
one. The operator's base spec, ``{dir}/theirs.json``, holds their rlimits (``THEIRS``)."""

from __future__ import annotations

import glob
import json
import os
import tomllib
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import generated

# A containerd 1.x configuration (version 2) as an operator keeps it: a comment, the runc runtime with its options
CONFIG = """version = 2
# the operator's comment
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
THEIRS = {"ociVersion": "1.1.0", "process": {"args": ["theirs"], "cwd": "/",
                                             "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 4242, "soft": 4242}]}}
R3 = "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]"
R2 = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'
DEFAULT_V3 = open(os.path.join(os.path.dirname(generated.__file__), "containerd_2.1_config_default.toml"),
                  encoding="utf-8").read()
OPTIONS3 = "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
GRPC3 = "version = 3\n\n[grpc]\n  address = '/run/containerd/containerd.sock'\n"

# name -> files (path under the directory -> text)
CASES: Dict[str, Dict[str, str]] = {
    "default, base spec empty": {"config.toml": DEFAULT_V3},
    "default, the operator's base spec": {
        "config.toml": DEFAULT_V3.replace("base_runtime_spec = ''", "base_runtime_spec = '{dir}/theirs.json'")},
    "glob import, a comment-only drop-in (63.5)": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n"
                       "  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/00-placeholder.toml": "# drop-ins for containerd go here\n# (none yet)\n"},
    "a drop-in redefines the runc table without the key (63.6)": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n"
                       "  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/50-runc.toml": "version = 3\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n\n  %s" % (
            R3, OPTIONS3.replace("\n  Sys", "\n    Sys"))},
    "two drop-ins by glob, the second redefines the table": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n",
        "conf.d/10-a.toml": "version = 3\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/20-b.toml": "version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  privileged_without_host_devices"
                            " = true\n" % R3,
        "conf.d/notes.txt": "not a .toml: not imported\n"},
    "no runc table: one appended (63.7)": {"config.toml": GRPC3 + "\n[plugins.'io.containerd.cri.v1.images']\n"
                                           "  snapshotter = 'overlayfs'\n"},
    "an empty placeholder (63.7)": {"config.toml": "# containerd's configuration: see containerd config default\n"},
    "a zero-byte placeholder": {"config.toml": ""},
    "CRLF, the operator's base spec (63.7)": {
        "config.toml": ("version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  base_runtime_spec = "
                        "'{dir}/theirs.json'\n" % R3).replace("\n", "\r\n")},
    "CRLF, no runc table (63.7)": {"config.toml": GRPC3.replace("\n", "\r\n")},
    "CRLF, the runc table without the key": {
        "config.toml": ("version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n" % R3).replace("\n", "\r\n")},
    "a relative import": {
        "config.toml": "version = 3\nimports = [\"extra/runc.toml\"]\n",
        "extra/runc.toml": "version = 3\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3},
    "an absolute import, then a nested one": {
        "config.toml": "version = 3\nimports = ['{dir}/abs.toml']\n",
        "abs.toml": "version = 3\nimports = ['nested/*.toml']\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "nested/runc.toml": "version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n" % R3},
    "an empty imports list and a zero-byte drop-in": {
        "config.toml": "version = 3\nimports = []\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/empty.toml": ""},
    "a multi-line imports list with comments": {
        "config.toml": "version = 3\nimports = [\n  # the distribution's\n  'conf.d/*.toml', # and ours\n]\n",
        "conf.d/runc.toml": "version = 3\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3},
    "quoted keys in double quotes": {
        "config.toml": 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc"]\n'
                       '  runtime_type = "io.containerd.runc.v2"\n  base_runtime_spec = "{dir}/theirs.json"\n'},
    "trailing comments on the header and the line": {
        "config.toml": "version = 3  # containerd 2\n%s  # the default handler\n  runtime_type = 'io.containerd.runc.v2'"
                       "\n  base_runtime_spec = '{dir}/theirs.json'  # our rlimits\n" % R3},
    "the runc table's header is the last line, no newline": {"config.toml": "version = 3\n" + R3},
    "no newline at the end, no runc table": {"config.toml": "version = 3\n[grpc]\n  address = '/x'"},
    "arrays across lines and an inline table in the runc table": {
        "config.toml": "version = 3\n%s\n  pod_annotations = [\n    'a.example/x',  # theirs\n    \"b\",\n  ]\n"
                       "  options = { SystemdCgroup = true, BinaryName = '/usr/bin/runc' }\n"
                       "  base_runtime_spec = '{dir}/theirs.json'\n" % R3},
    "a drop-in empties the operator's base spec": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/runc.toml": "version = 3\n%s\n  base_runtime_spec = ''\n" % R3},
    "version 2 on containerd 2": {
        "config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"'
                       '\n  [plugins."io.containerd.grpc.v1.cri".containerd]\n    default_runtime_name = "runc"\n'
                       '    %s\n      runtime_type = "io.containerd.runc.v2"\n      base_runtime_spec = '
                       '"{dir}/theirs.json"\n' % R2},
    "version 2 with a version 2 drop-in that redefines runc": {
        "config.toml": 'version = 2\nimports = ["conf.d/*.toml"]\n%s\n  base_runtime_spec = "{dir}/theirs.json"\n' % R2,
        "conf.d/runc.toml": 'version = 2\n%s\n  runtime_type = "io.containerd.runc.v2"\n' % R2},
    "version 3 with a version 2 drop-in": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/old.toml": 'version = 2\n%s\n  runtime_type = "io.containerd.runc.v2"\n' % R2},
    "a version 2 drop-in names its own base spec (2.1 ignores it, 2.4 takes it)": {
        "config.toml": "version = 3\nimports = ['conf.d/*.toml']\n%s\n  base_runtime_spec = '{dir}/theirs.json'\n" % R3,
        "conf.d/old.toml": 'version = 2\n%s\n  base_runtime_spec = "{dir}/older.json"\n' % R2,
        "older.json": json.dumps(dict(THEIRS, process=dict(THEIRS["process"], args=["older"])))},
}


def write_case(directory: str, name: str) -> Dict[str, str]:
    """The case's files under ``directory``, and the operator's spec; returns every file's text by path."""
    texts = {}
    for relative, text in CASES[name].items():
        path = os.path.join(directory, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text.replace("{dir}", directory))
        texts[path] = text.replace("{dir}", directory)
    with open(os.path.join(directory, "theirs.json"), "w", encoding="utf-8") as handle:
        json.dump(THEIRS, handle)
    return texts


# --- containerd's reading, from its source ------------------------------------------------------------------------
_V1_NAMES = {"cri": "io.containerd.grpc.v1.cri"}
_SKIP_TOP = {"cni", "containerd", "sandbox_image", "registry", "image_decryption", "max_concurrent_downloads",
             "image_pull_progress_timeout", "image_pull_with_sync_fs", "stats_collect_period", "disable_tcp_service",
             "stream_server_address", "stream_server_port", "stream_idle_timeout", "enable_tls_streaming",
             "x509_key_pair_streaming"}


def _files(main: str) -> List[Tuple[str, Dict[str, Any]]]:
    """LoadConfig's order: breadth first, each path once; resolveImports: Clean, relative to the file's directory,
    a path with '*' globbed (Go's Glob: sorted, hidden files too)."""
    pending, loaded, found = [main], set(), []
    while pending:
        path = pending.pop(0)
        if path in loaded:
            continue
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
        found.append((path, doc))
        loaded.add(path)
        for name in doc.get("imports", []):
            full = os.path.normpath(name if os.path.isabs(name) else os.path.join(os.path.dirname(path), name))
            pending.extend(sorted(glob.glob(full, include_hidden=True)) if "*" in full else [full])
    return found


def _merge(to: Dict[str, Any], src: Dict[str, Any]) -> None:
    """mergo.Merge(WithOverride) with containerd's slice transformer: maps key by key, a value over the one before
    (an empty string too: they are interfaces in the plugins' map), lists appended without repeats."""
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(to.get(key), dict):
            _merge(to[key], value)
        elif isinstance(value, list) and isinstance(to.get(key), list):
            to[key] = to[key] + [item for item in value if item not in to[key]]
        else:
            to[key] = value


def _v1_migrate(doc: Dict[str, Any]) -> None:
    plugins = doc.get("plugins", {})
    for name in list(plugins):
        if name in _V1_NAMES:
            plugins[_V1_NAMES[name]] = plugins.pop(name)


def _cri_migrate(plugins: Dict[str, Any]) -> None:
    """configMigration of io.containerd.cri.v1.runtime: version 2's CRI settings into it, where it has none."""
    src = plugins.get("io.containerd.grpc.v1.cri")
    if not isinstance(src, dict):
        return
    dst = plugins.setdefault("io.containerd.cri.v1.runtime", {})
    for key, value in src.items():
        if key not in _SKIP_TOP and key not in dst:
            dst[key] = value
    if isinstance(src.get("containerd"), dict):
        containerd = dst.setdefault("containerd", {})
        for key, value in src["containerd"].items():
            if key not in ("snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers") and \
                    key not in containerd:
                containerd[key] = value


def containerd_reads(main: str, runtime: Tuple[int, int], handler: str = "runc") -> Optional[str]:
    """The handler's base_runtime_spec containerd ``runtime`` (major, minor) runs with (None: none set)."""
    if runtime[0] < 2:
        plugins: Dict[str, Any] = {}
        for _path, doc in _files(main):
            plugins.update(doc.get("plugins", {}))  # 1.x: an imported plugin's table replaces the whole table
        cri = plugins.get("io.containerd.grpc.v1.cri", {})
    else:
        current = 4 if runtime >= (2, 4) else 3
        out: Dict[str, Any] = {"version": current, "plugins": {}}
        for _path, doc in _files(main):
            version = doc.get("version", 0)
            if version < current:
                if version <= 1:
                    _v1_migrate(doc)
                if runtime >= (2, 4):  # 2.4: each file migrated, plugins included, before the merge
                    _cri_migrate(doc.setdefault("plugins", {}))
                    doc["version"] = current
                elif version <= 1:  # 2.0-2.3: the server's migrations only, to the version read so far
                    doc["version"] = out["version"]
            _merge(out, doc)
        if out["version"] < 3:  # 2.0-2.3: the plugins migrated once, after the merge
            _cri_migrate(out["plugins"])
        cri = out["plugins"].get("io.containerd.cri.v1.runtime", {})
    runc = cri.get("containerd", {}).get("runtimes", {}).get(handler, {})
    return runc.get("base_runtime_spec")
