"""Installing the OCI hook into a runtime (operations/runtime_hook.py): the spec is the base spec containerd ran the
runtime handler with (or its default) with the hook added once; one line goes where containerd takes it; removal
gives every file back byte for byte and the base spec containerd runs with is the operator's again; every file
rewritten keeps its owner, group and mode; CRI-O gets a hooks.d file. containerd itself is faked here: its version,
``ctr oci spec``, and a ``config dump`` that says what containerd's rules (written again from its source,
tests/unit/support/containerd_corpus.py) read from the files; tests/integration/test_runtime_hook.py runs the real
ones on the same corpus."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.containerd_config import config_files
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (
    Containerd, containerd_version, crio_hook, hook_entry, install_crio, remove_crio, with_hook, without_hook)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.containerd_corpus import (
    CASES, CONFIG, R2, R3, THEIRS, containerd_reads, write_case)

ENTRY = hook_entry("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 10)
SPEC = "/etc/kubecpu/base-runtime-spec.json"


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


# --- containerd ----------------------------------------------------------------------------------------------------
DEFAULT_SPEC = {"ociVersion": "1.1.0", "process": {"args": ["sh"]}}


class FakeContainerd:
    """containerd ``version`` whose ``config dump`` shows what containerd reads from the files (or, with ``broken``,
    no base spec at all)."""

    def __init__(self, tmp_path, text=CONFIG, version="v1.7.24"):
        self.config = tmp_path / "config.toml"
        if text is not None:  # else the test writes the files
            self.config.write_text(text)
        self.version, self.broken, self.calls = version, False, []

    @property
    def runtime(self):
        return containerd_version(self.version)

    def __call__(self, argv):
        self.calls.append(argv[1:])
        if argv[1:] == ["--version"]:
            return "containerd github.com/containerd/containerd %s abc" % self.version
        if argv[1:] == ["oci", "spec"]:
            return json.dumps(DEFAULT_SPEC)
        if argv[1:] == ["config", "default"]:  # the version each release writes
            return "version = %d\nroot = '/var/lib/containerd'\n" % {"v2.1.9": 3, "v2.4.2": 4}[self.version]
        assert argv[1] == "--config" and argv[3:] == ["config", "dump"]
        value = None if self.broken else containerd_reads(argv[2], self.runtime)
        table = R2 if self.runtime[0] < 2 else R3
        return "version = %d\n%s\n  runtime_type = 'io.containerd.runc.v2'\n%s" % (
            2 if self.runtime[0] < 2 else 3, table, "" if value is None else "  base_runtime_spec = '%s'\n" % value)


def installed(tmp_path, fake):
    return Containerd(str(fake.config), "runc", str(tmp_path / "spec.json"), fake)


def texts(main):
    return {config.path: config.text for config in config_files(main)}


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
    assert os.listdir(tmp_path) == ["config.toml"] and not containerd.remove(check=False).changed


def test_the_operators_base_spec_gets_the_hook_and_comes_back(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(THEIRS))
    text = CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"  # ours\n" % mine)
    fake = FakeContainerd(tmp_path, text)
    containerd = installed(tmp_path, fake)
    containerd.install(ENTRY, check=False)
    assert without_hook(json.loads((tmp_path / "spec.json").read_text())) == THEIRS
    assert not containerd.install(ENTRY, check=False).changed  # still remembers theirs
    containerd.remove(check=False)
    assert fake.config.read_text() == text and json.loads(mine.read_text()) == THEIRS


def test_check_mode_writes_nothing(tmp_path):
    fake = FakeContainerd(tmp_path)
    done = installed(tmp_path, fake).install(ENTRY, check=True)
    assert done.changed and fake.config.read_text() == CONFIG and os.listdir(tmp_path) == ["config.toml"]


def test_a_config_containerd_would_not_take_is_put_back_with_every_file_kubecpu_wrote(tmp_path):
    fake = FakeContainerd(tmp_path)
    fake.broken = True  # containerd's effective configuration shows no base spec
    with pytest.raises(ConfigError, match="base_runtime_spec None for handler runc"):
        installed(tmp_path, fake).install(ENTRY, check=False)
    assert fake.config.read_text() == CONFIG and os.listdir(tmp_path) == ["config.toml"]


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


def test_crio_gets_a_hooks_d_file_readable_by_podman_and_a_rewrite_keeps_the_files_mode(tmp_path):
    hooks = tmp_path / "hooks.d"
    assert install_crio(str(hooks), ENTRY, check=False).changed
    assert json.loads((hooks / "kubecpu.json").read_text()) == crio_hook(ENTRY) == {
        "version": "1.0.0", "hook": ENTRY, "stages": ["createRuntime"],
        "when": {"annotations": {"^io\\.kubernetes\\.container\\.restartCount$": ".*"}}}
    assert os.stat(hooks / "kubecpu.json").st_mode & 0o7777 == 0o644
    assert not install_crio(str(hooks), ENTRY, check=False).changed
    os.chmod(hooks / "kubecpu.json", 0o640)
    assert install_crio(str(hooks), dict(ENTRY, timeout=5), check=False).changed
    assert os.stat(hooks / "kubecpu.json").st_mode & 0o7777 == 0o640
    assert remove_crio(str(hooks), check=False).changed and not os.listdir(hooks)
    assert not remove_crio(str(hooks), check=False).changed


@pytest.mark.parametrize("version, written", [("v1.7.24", 2), ("v2.1.9", 3), ("v2.4.2", 4)])
def test_an_empty_file_gets_the_version_the_running_containerd_writes(tmp_path, version, written):
    fake = FakeContainerd(tmp_path, "# placeholder\n", version=version)
    containerd = installed(tmp_path, fake)
    containerd.install(ENTRY, check=False)
    assert fake.config.read_text().startswith("version = %d\n# placeholder\n" % written)
    assert containerd_reads(str(fake.config), fake.runtime) == str(tmp_path / "spec.json")
    assert (["config", "default"] in fake.calls) == (written > 2)  # asked only where 1.x's answer is not known
    containerd.remove(check=False)
    assert fake.config.read_text() == "# placeholder\n"


# --- the corpus: install, install again, absent --------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v2.1.9", "v2.4.2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_corpus_case_installs_once_keeps_the_operators_spec_and_comes_back_byte_for_byte(tmp_path, case,
                                                                                               version):
    """For each configuration: containerd runs kubecpu's spec after install, made from the base spec it ran with
    before (the operator's rlimits kept) with the hook added; a second install changes nothing; absent gives every
    file back byte for byte, and containerd the base spec it had."""
    before = write_case(str(tmp_path), case)
    main = str(tmp_path / "config.toml")
    fake = FakeContainerd(tmp_path, None, version=version)
    ran_with = containerd_reads(main, fake.runtime)
    containerd = Containerd(main, "runc", str(tmp_path / "kubecpu" / "spec.json"), fake)
    done = containerd.install(ENTRY, check=False)
    assert done.changed and done.restart
    assert containerd_reads(main, fake.runtime) == containerd.spec
    spec = json.loads(open(containerd.spec, encoding="utf-8").read())
    assert spec["hooks"]["createRuntime"] == [ENTRY]
    base = json.loads(open(ran_with, encoding="utf-8").read()) if ran_with else DEFAULT_SPEC
    assert without_hook(spec) == base  # the operator's values (their rlimits) kept, or containerd's default
    changed = [path for path, text in texts(main).items() if before.get(path) != text]
    assert len(changed) == 1  # one file, one line (or one table)
    again = containerd.install(ENTRY, check=False)
    assert not again.changed and not again.files
    assert containerd.remove(check=False).changed
    assert set(texts(main)) <= set(before)
    for path, text in before.items():
        with open(path, "rb") as handle:
            assert handle.read() == text.encode("utf-8")  # byte for byte, CRLF included
    assert containerd_reads(main, fake.runtime) == ran_with
    assert not os.listdir(tmp_path / "kubecpu") and not containerd.remove(check=False).changed


def corpus_containerd(tmp_path, case, version="v2.1.9"):
    before = write_case(str(tmp_path), case)
    fake = FakeContainerd(tmp_path, None, version=version)
    return Containerd(str(fake.config), "runc", str(tmp_path / "kubecpu" / "spec.json"), fake), fake, before


def test_finding_62_3_containerds_config_keeps_its_owner_and_mode_on_install_removal_and_roll_back(tmp_path):
    """Finding 62.3: containerd's config (which can hold registry credentials) was rewritten 0644. The main file and
    the drop-in kubecpu edits keep their owner, group and mode (0600 here) whatever kubecpu does; the spec and the
    record it makes are 0600."""
    containerd, fake, _before = corpus_containerd(tmp_path, "a drop-in redefines the runc table without the key (63.6)")
    dropin = tmp_path / "conf.d" / "50-runc.toml"
    for path, owner in ((fake.config, (1234, 5678)), (dropin, (4321, 8765))):
        os.chown(path, *owner)
        os.chmod(path, 0o600)

    def kept():
        return [(os.stat(p).st_uid, os.stat(p).st_gid, os.stat(p).st_mode & 0o7777) for p in (fake.config, dropin)]

    assert kept() == [(1234, 5678, 0o600), (4321, 8765, 0o600)]
    done = containerd.install(ENTRY, check=False)
    assert str(dropin) in done.files and kept() == [(1234, 5678, 0o600), (4321, 8765, 0o600)]
    assert {os.stat(p).st_mode & 0o7777 for p in (containerd.spec, containerd.previous_path)} == {0o600}
    containerd.remove(check=False)
    assert kept() == [(1234, 5678, 0o600), (4321, 8765, 0o600)]
    fake.broken = True  # the roll-back after a failed verify
    with pytest.raises(ConfigError, match="base_runtime_spec None"):
        containerd.install(ENTRY, check=False)
    assert kept() == [(1234, 5678, 0o600), (4321, 8765, 0o600)]


def test_finding_63_5_removal_works_where_install_worked_with_a_comment_only_drop_in(tmp_path):
    """Finding 63.5: with imports = ['conf.d/*.toml'] and a comment-only drop-in, install worked and absent refused
    ("containerd config version 1 ... migrate it"), so fail-closed could not be switched off."""
    containerd, fake, before = corpus_containerd(tmp_path, "glob import, a comment-only drop-in (63.5)")
    containerd.install(ENTRY, check=False)
    assert containerd_reads(str(fake.config), fake.runtime) == containerd.spec
    done = containerd.remove(check=False)
    assert done.changed and texts(str(fake.config)) == before
    assert containerd_reads(str(fake.config), fake.runtime) == str(tmp_path / "theirs.json")


def test_finding_63_6_the_base_spec_a_drop_in_inherits_from_the_main_file_is_the_one_the_hook_is_added_to(tmp_path):
    """Finding 63.6: the main file names the operator's base spec, a drop-in redefines the runc table without it;
    containerd 2 merges key by key, so the operator's spec is the one containerd ran with. kubecpu's spec is that
    spec with the hook, not ``ctr oci spec``'s; removal leaves the main file's line in force again."""
    containerd, fake, before = corpus_containerd(tmp_path, "a drop-in redefines the runc table without the key (63.6)")
    containerd.install(ENTRY, check=False)
    spec = json.loads(open(containerd.spec, encoding="utf-8").read())
    assert without_hook(spec) == THEIRS and spec["process"]["rlimits"] == THEIRS["process"]["rlimits"]
    assert ["oci", "spec"] not in fake.calls
    assert texts(str(fake.config))[str(fake.config)] == before[str(fake.config)]  # the line is the drop-in's
    assert containerd_reads(str(fake.config), fake.runtime) == containerd.spec
    containerd.remove(check=False)
    assert containerd_reads(str(fake.config), fake.runtime) == str(tmp_path / "theirs.json")


@pytest.mark.parametrize("case", ["no runc table: one appended (63.7)", "an empty placeholder (63.7)",
                                  "CRLF, the operator's base spec (63.7)", "CRLF, no runc table (63.7)"])
def test_finding_63_7_install_then_absent_gives_the_file_back_byte_for_byte(tmp_path, case):
    """Finding 63.7: an appended runc table kept its header and runtime_type, an empty placeholder kept
    ``version = 3``, a CRLF file lost its ``\\r``."""
    containerd, fake, before = corpus_containerd(tmp_path, case)
    containerd.install(ENTRY, check=False)
    containerd.remove(check=False)
    assert fake.config.read_bytes() == before[str(fake.config)].encode("utf-8")


def test_an_operators_later_drop_in_gets_the_line_too_and_removal_takes_out_both(tmp_path):
    """The operator names another base spec in a new drop-in after install: containerd runs theirs, so install
    adds the hook to it there; absent takes both of kubecpu's lines out, each file as it was."""
    containerd, fake, before = corpus_containerd(tmp_path, "glob import, a comment-only drop-in (63.5)")
    containerd.install(ENTRY, check=False)
    later = tmp_path / "conf.d" / "90-later.toml"
    later.write_text("version = 3\n%s\n  base_runtime_spec = '%s'\n" % (R3, tmp_path / "older.json"))
    (tmp_path / "older.json").write_text(json.dumps(dict(THEIRS, process={"args": ["older"]})))
    before[str(later)] = later.read_text()
    assert containerd.install(ENTRY, check=False).changed
    assert without_hook(json.loads(open(containerd.spec, encoding="utf-8").read()))["process"] == {"args": ["older"]}
    containerd.remove(check=False)
    assert texts(str(fake.config)) == before


def test_a_record_from_a_kubecpu_that_kept_the_value_only_still_comes_out(tmp_path):
    fake = FakeContainerd(tmp_path, CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"\n"
                                                   % (tmp_path / "spec.json")))
    (tmp_path / "spec.json").write_text(json.dumps(with_hook(DEFAULT_SPEC, ENTRY)))
    (tmp_path / "spec.json.previous").write_text(json.dumps({"base_runtime_spec": None}))
    assert installed(tmp_path, fake).remove(check=False).changed
    assert fake.config.read_text() == CONFIG and os.listdir(tmp_path) == ["config.toml"]


@pytest.mark.parametrize("record", [
    {"base_runtime_spec": 3},
    {"base_runtime_spec": None, "edits": {"/x": {"kind": "value", "literal": "'a' \n[evil]"}}},
    {"base_runtime_spec": None, "edits": {"/x": {"kind": "table", "appended": "\n[x]\n"}}},
    {"base_runtime_spec": None, "edits": {"/x": {"kind": "line", "inserted": ""}}},
    {"base_runtime_spec": None, "edits": {"/x": {"kind": "line", "inserted": "a\n", "version_line": "[x]\n"}}},
    {"base_runtime_spec": None, "edits": {"/x": {"kind": "rewrite"}}},
])
def test_a_record_kubecpu_did_not_write_is_reported_and_kept(tmp_path, record):
    fake = FakeContainerd(tmp_path)
    containerd = installed(tmp_path, fake)
    containerd.install(ENTRY, check=False)
    installed_text = fake.config.read_text()
    (tmp_path / "spec.json.previous").write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=r"is not (a record|one) kubecpu writes"):
        containerd.remove(check=False)
    assert fake.config.read_text() == installed_text and (tmp_path / "spec.json.previous").exists()


@pytest.mark.parametrize("linked,case", [("config.toml", "default, the operator's base spec"),
                                         ("conf.d/50-runc.toml", "a drop-in redefines the runc table without the key (63.6)")])
def test_review_63_a_symlinked_config_stays_a_symlink_through_install_and_absent(tmp_path, linked, case):
    """(Review of issue 63.) A config.toml or drop-in that is a symlink into a managed tree: install replaced the
    link with a regular file (the operator's tree no longer in force, the link gone after absent too). The file the
    link names gets the line, the link stays, and absent gives that file back byte for byte."""
    before = write_case(str(tmp_path), case)
    managed = tmp_path / "managed"
    managed.mkdir()
    path = tmp_path / linked
    os.rename(path, managed / path.name)
    os.symlink(os.path.relpath(managed / path.name, path.parent), path)
    fake = FakeContainerd(tmp_path, None, version="v2.1.9")
    containerd = Containerd(str(fake.config), "runc", str(tmp_path / "kubecpu" / "spec.json"), fake)
    containerd.install(ENTRY, check=False)
    assert os.path.islink(path) and containerd_reads(str(fake.config), fake.runtime) == containerd.spec
    containerd.remove(check=False)
    assert os.path.islink(path) and os.readlink(path) == os.path.relpath(managed / path.name, path.parent)
    for name, text in before.items():
        with open(name, "rb") as handle:
            assert handle.read() == text.encode("utf-8")
    assert containerd_reads(str(fake.config), fake.runtime) == str(tmp_path / "theirs.json")
