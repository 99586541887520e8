"""Installing the OCI hook into a runtime (operations/runtime_hook.py): containerd's config.toml gets one line in the
runtime handler's table and nothing else changes; the spec is the handler's base spec (or containerd's default) with
the hook added once; removal puts back what was there; CRI-O gets a hooks.d file. containerd itself is faked here
(its version, ``ctr oci spec``, and a ``config dump`` that echoes the file); tests/integration/test_runtime_hook.py
runs the real ones."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (
    Containerd, config_files, containerd_version, crio_hook, dumped_base_spec, hook_entry, install_crio, remove_crio,
    set_base_runtime_spec, target_file, with_hook, without_hook)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import generated
from hypothesis import given
from hypothesis import strategies as st

RUNC = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'
RUNC_V3 = "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]"
# what containerd 2.1.9's ``containerd config default`` writes, byte for byte
DEFAULT_V3 = open(os.path.join(os.path.dirname(generated.__file__), "containerd_2.1_config_default.toml"),
                  encoding="utf-8").read()
CONFIG = """version = 2
# the operator's comment
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
ENTRY = hook_entry("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 10)
SPEC = "/etc/kubecpu/base-runtime-spec.json"


@pytest.mark.parametrize("text, expected, previous", [
    (CONFIG, CONFIG.replace('runtime_type = "io.containerd.runc.v2"\n', 'runtime_type = "io.containerd.runc.v2"\n')
     .replace(RUNC + "\n", RUNC + '\n    base_runtime_spec = "%s"\n' % SPEC), None),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"/etc/mine.json\"  # theirs\n"),
     CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"\n" % SPEC), "/etc/mine.json"),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = '/etc/literal.json'\n"),
     CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"\n" % SPEC), "/etc/literal.json"),
    ("", 'version = 2\n\n%s\n  runtime_type = "io.containerd.runc.v2"\n  base_runtime_spec = "%s"\n' % (RUNC, SPEC),
     None),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n',
     'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n\n%s\n  runtime_type = '
     '"io.containerd.runc.v2"\n  base_runtime_spec = "%s"\n' % (RUNC, SPEC), None),
    ('version = 3\n[ plugins . "io.containerd.cri.v1.runtime" . containerd.runtimes.runc ] # spaced\n  x = 1\n',
     'version = 3\n[ plugins . "io.containerd.cri.v1.runtime" . containerd.runtimes.runc ] # spaced\n'
     "  base_runtime_spec = '%s'\n  x = 1\n" % SPEC, None),
    (DEFAULT_V3, DEFAULT_V3.replace("base_runtime_spec = ''", "base_runtime_spec = '%s'" % SPEC), ""),
    ("version = 3\n", "version = 3\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  base_runtime_spec = '%s'\n"
     % (RUNC_V3, SPEC), None),
    ("version = 4\n%s\n  base_runtime_spec = ''\n" % RUNC_V3,
     "version = 4\n%s\n  base_runtime_spec = '%s'\n" % (RUNC_V3, SPEC), ""),  # containerd 2.4's version
])
def test_one_line_in_the_handlers_table_and_nothing_else(text, expected, previous):
    assert set_base_runtime_spec(text, "runc", SPEC) == (expected, previous)
    assert dumped_base_spec(expected, "runc") == SPEC


def test_an_empty_file_gets_the_version_containerd_writes():
    assert set_base_runtime_spec("", "runc", SPEC, new_version=3)[0] == (
        "version = 3\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  base_runtime_spec = '%s'\n" % (RUNC_V3, SPEC))


@given(st.sampled_from([CONFIG, CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"/x.json\"\n"),
                        DEFAULT_V3]),
       st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='"\'\\'), min_size=1))
def test_set_then_put_back_is_the_file_as_it_was(text, path):
    changed, previous = set_base_runtime_spec(text, "runc", "/" + path)
    assert set_base_runtime_spec(changed, "runc", previous)[0] == text


@pytest.mark.parametrize("text, handler, path, message", [
    ("version = 1\n[plugins.cri]\n", "runc", SPEC, "config version 1"),
    ("[plugins.cri]\n", "runc", SPEC, "config version 1"),
    (CONFIG, "run c", SPEC, "runtime handler 'run c'"),
    (CONFIG, "runc", '/etc/"quoted".json', "has a quote"),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = [1]\n"), "runc", SPEC, "not a plain string"),
])
def test_what_it_cannot_edit_safely_is_refused(text, handler, path, message):
    with pytest.raises(ConfigError, match=message):
        set_base_runtime_spec(text, handler, path)


def test_the_hook_is_added_once_and_removed_leaving_the_others():
    theirs = {"path": "/usr/bin/theirs", "args": ["theirs"]}
    spec = {"ociVersion": "1.1.0", "hooks": {"createRuntime": [theirs], "poststop": [theirs]}}
    once = with_hook(spec, ENTRY)
    assert once["hooks"]["createRuntime"] == [theirs, ENTRY] and with_hook(once, ENTRY) == once
    assert without_hook(once) == spec and without_hook(with_hook({"ociVersion": "1"}, ENTRY)) == {"ociVersion": "1"}
    assert ENTRY["args"] == ["/usr/bin/python3", "-I", "-S", "/opt/kubecpu/bin/kubecpu", "hook", "--config",
                             "/etc/kubecpu/agent.json"]


@pytest.mark.parametrize("python, kubecpu, config, timeout, message", [
    ("python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 10, "the hook's python 'python3' is not an "
     "absolute path"),  # the OCI runtime spec wants the hook's path absolute
    ("/usr/bin/python3", "bin/kubecpu", "/etc/kubecpu/agent.json", 10, "the hook's kubecpu 'bin/kubecpu' is not"),
    ("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "agent.json", 10, "the hook's config 'agent.json' is not"),
    ("/usr/bin/python3\x00", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 10, "python"),
    ("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 0, "timeout must be 1-120 seconds "
     "\\(the kubelet's default runtimeRequestTimeout\\), got 0"),
    ("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", -5, "got -5"),
    ("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 121, "got 121"),
    ("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", True, "got True"),
])
def test_a_hook_the_runtime_could_not_run_is_refused(python, kubecpu, config, timeout, message):
    with pytest.raises(ConfigError, match=message):
        hook_entry(python, kubecpu, config, timeout)


def test_the_timeouts_bounds_are_taken():
    assert [hook_entry("/p", "/k", "/c", timeout)["timeout"] for timeout in (1, 120)] == [1, 120]


@pytest.mark.parametrize("text, version", [
    ("containerd github.com/containerd/containerd v1.7.24 61f9fd88f79f081d64d6fa3bb1a0dc71ec870523", (1, 7)),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6)),
    ("containerd containerd.io 2.0.2 c507a0257ea6462fbd6f5ba4f5c74facb04021f4", (2, 0)),
])
def test_containerd_versions_are_read(text, version):
    assert containerd_version(text) == version


class FakeContainerd:
    """containerd 1.7 whose ``config dump`` shows the file as written (or, ``broken``, as it was at the start)."""

    def __init__(self, tmp_path, text=CONFIG, version="v1.7.24"):
        self.config = tmp_path / "config.toml"
        self.config.write_text(text)
        self.version, self.broken, self.calls = version, None, []

    def __call__(self, argv):
        self.calls.append(argv[1:])
        if argv[1:] == ["--version"]:
            return "containerd github.com/containerd/containerd %s abc" % self.version
        if argv[1:] == ["oci", "spec"]:
            return json.dumps({"ociVersion": "1.1.0", "process": {"args": ["sh"]}})
        if argv[1:] == ["config", "default"]:  # the version each release writes
            return "version = %d\nroot = '/var/lib/containerd'\n" % {"v2.1.9": 3, "v2.4.2": 4}[self.version]
        assert argv[3:] == ["config", "dump"]
        return self.broken if self.broken is not None else self.config.read_text()


def installed(tmp_path, fake):
    return Containerd(str(fake.config), "runc", str(tmp_path / "spec.json"), fake)


def test_install_is_idempotent_and_removal_puts_the_file_back(tmp_path):
    fake = FakeContainerd(tmp_path)
    containerd = installed(tmp_path, fake)
    first = containerd.install(ENTRY, check=False)
    assert first.changed and first.restart and str(fake.config) in first.files
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["hooks"]["createRuntime"] == [ENTRY] and spec["process"] == {"args": ["sh"]}
    again = containerd.install(ENTRY, check=False)
    assert not again.changed and json.loads((tmp_path / "spec.json").read_text()) == spec
    assert containerd.remove(check=False).changed and fake.config.read_text() == CONFIG
    assert not os.path.exists(tmp_path / "spec.json") and not containerd.remove(check=False).changed


def test_the_operators_base_spec_gets_the_hook_and_comes_back(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"ociVersion": "1.1.0", "process": {"args": ["mine"]}}))
    text = CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"\n" % mine)
    fake = FakeContainerd(tmp_path, text)
    containerd = installed(tmp_path, fake)
    containerd.install(ENTRY, check=False)
    assert json.loads((tmp_path / "spec.json").read_text())["process"] == {"args": ["mine"]}
    assert not containerd.install(ENTRY, check=False).changed  # still remembers theirs
    containerd.remove(check=False)
    assert fake.config.read_text() == text and json.loads(mine.read_text())["process"] == {"args": ["mine"]}


def test_check_mode_writes_nothing(tmp_path):
    fake = FakeContainerd(tmp_path)
    done = installed(tmp_path, fake).install(ENTRY, check=True)
    assert done.changed and fake.config.read_text() == CONFIG and not os.path.exists(tmp_path / "spec.json")


def test_a_config_containerd_would_not_take_is_put_back(tmp_path):
    fake = FakeContainerd(tmp_path)
    fake.broken = CONFIG  # containerd's effective configuration shows no base spec
    with pytest.raises(ConfigError, match="base_runtime_spec None for handler runc"):
        installed(tmp_path, fake).install(ENTRY, check=False)
    assert fake.config.read_text() == CONFIG


@pytest.mark.parametrize("version", ["v2.0.2", "v2.3.1", "v1.5.18"])
def test_a_containerd_not_seen_running_base_spec_hooks_is_refused(tmp_path, version):
    fake = FakeContainerd(tmp_path, version=version)
    with pytest.raises(ConfigError, match="was not seen running the hooks of a base_runtime_spec"):
        installed(tmp_path, fake).install(ENTRY, check=False)
    assert fake.config.read_text() == CONFIG


def test_a_line_someone_else_changed_is_left_to_them(tmp_path):
    fake = FakeContainerd(tmp_path)
    containerd = installed(tmp_path, fake)
    containerd.install(ENTRY, check=False)
    theirs = fake.config.read_text().replace(str(tmp_path / "spec.json"), "/etc/other.json")
    fake.config.write_text(theirs)
    containerd.remove(check=False)
    assert fake.config.read_text() == theirs


def test_crio_gets_a_hooks_d_file(tmp_path):
    hooks = tmp_path / "hooks.d"
    assert install_crio(str(hooks), ENTRY, check=False).changed
    assert json.loads((hooks / "kubecpu.json").read_text()) == crio_hook(ENTRY) == {
        "version": "1.0.0", "hook": ENTRY, "when": {"always": True}, "stages": ["createRuntime"]}
    assert not install_crio(str(hooks), ENTRY, check=False).changed
    assert remove_crio(str(hooks), check=False).changed and not os.listdir(hooks)
    assert not remove_crio(str(hooks), check=False).changed


# --- containerd's imports ------------------------------------------------------------------------------------------
V3_RUNC = "version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n" % RUNC_V3
V3_OPTIONS = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
V3_IMAGES = "version = 3\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = 'p'\n"
V2_CRI = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n'


def _tree(tmp_path, main_imports, files):
    (tmp_path / "conf.d").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    main = tmp_path / "config.toml"
    main.write_text("version = 3\nimports = [%s]\n\n[grpc]\n  address = '/x'\n" % main_imports)
    return str(main)


def test_imports_are_read_in_containerds_order(tmp_path):
    """Relative to the importing file, a glob's matches sorted, breadth first, each file once (a cycle included)."""
    main = _tree(tmp_path, "'conf.d/*.toml', \"%s\"" % (tmp_path / "last.toml"), {
        "conf.d/20-b.toml": "version = 3\nimports = ['../nested.toml', '%s/config.toml']\n" % tmp_path,
        "conf.d/10-a.toml": "version = 3\n", "last.toml": "version = 3\n", "nested.toml": "version = 3\n"})
    assert [os.path.relpath(path, str(tmp_path)) for path, _text in config_files(main)] == [
        "config.toml", "conf.d/10-a.toml", "conf.d/20-b.toml", "last.toml", "nested.toml"]


@pytest.mark.parametrize("imports, message", [
    ("'/nowhere/x.toml'", "imports /nowhere/x.toml, which does not exist"),
    ("'conf.d/*.toml'", "more than 64 files"),
])
def test_imports_containerd_would_not_start_with_are_refused(tmp_path, imports, message):
    main = _tree(tmp_path, imports, {"conf.d/%03d.toml" % n: "version = 3\n" for n in range(70)})
    with pytest.raises(ConfigError, match=message):
        config_files(main)


@pytest.mark.parametrize("files, deep_merge, chosen", [
    ([V3_RUNC, V3_OPTIONS, V3_IMAGES], True, 0),  # containerd 2 merges key by key: the handler's table is in the main
    ([V3_OPTIONS, V3_RUNC, V3_IMAGES], True, 1),  # ... or in the import that has it
    ([V3_RUNC, V3_RUNC], True, 1),  # the last one wins
    ([V3_RUNC, "", "# only a comment\n"], True, 0),  # empty files change nothing
    ([CONFIG, V2_CRI], False, 1),  # containerd 1.x: an imported CRI plugin table replaces the whole plugin
    ([CONFIG, "version = 2\n[plugins.\"io.containerd.gc.v1.scheduler\"]\n  x = 1\n"], False, 0),
])
def test_the_line_goes_where_containerd_takes_it(files, deep_merge, chosen):
    assert target_file([("f%d" % n, text) for n, text in enumerate(files)], "runc", deep_merge) == chosen


class FakeContainerd2(FakeContainerd):
    """containerd 2.1 whose ``config dump`` merges the files the way containerd 2 does for this one line: the last
    file's value for the handler."""

    def __init__(self, tmp_path, main):
        super().__init__(tmp_path, open(main, encoding="utf-8").read(), version="v2.1.9")

    def __call__(self, argv):
        if argv[3:] != ["config", "dump"]:
            return super().__call__(argv)
        self.calls.append(argv[1:])
        value = "".join(line + "\n" for _path, text in config_files(str(self.config)) for line in text.splitlines()
                        if "base_runtime_spec" in line)
        return "version = 3\n%s\n%s" % (RUNC_V3, value.splitlines()[-1] if value else "")


def test_on_containerd_2_the_imported_handler_table_gets_the_line_and_removal_restores_every_file(tmp_path):
    imported = "version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  base_runtime_spec = ''\n" % RUNC_V3
    main = _tree(tmp_path, "'conf.d/*.toml'", {"conf.d/10-runc.toml": imported, "conf.d/20-options.toml": V3_OPTIONS})
    before = dict(config_files(main))
    fake = FakeContainerd2(tmp_path, main)
    containerd = installed(tmp_path, fake)
    done = containerd.install(ENTRY, check=False)
    runc = str(tmp_path / "conf.d/10-runc.toml")
    assert done.restart and runc in done.files and str(fake.config) not in done.files
    assert open(runc, encoding="utf-8").read() == imported.replace("= ''", "= '%s'" % (tmp_path / "spec.json"))
    assert not containerd.install(ENTRY, check=False).changed
    assert containerd.remove(check=False).changed
    assert dict(config_files(main)) == before


@pytest.mark.parametrize("version, written", [("v1.7.24", 2), ("v2.1.9", 3), ("v2.4.2", 4)])
def test_an_empty_file_gets_the_version_the_running_containerd_writes(tmp_path, version, written):
    fake = FakeContainerd(tmp_path, "# placeholder\n", version=version)
    installed(tmp_path, fake).install(ENTRY, check=False)
    text = fake.config.read_text()
    assert text.startswith("version = %d\n" % written) and dumped_base_spec(text, "runc") == str(tmp_path / "spec.json")
    assert (["config", "default"] in fake.calls) == (written > 2)  # asked only where 1.x's answer is not known
