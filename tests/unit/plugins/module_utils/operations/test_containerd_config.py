"""containerd's configuration as containerd reads it (operations/containerd_config.py): the files in containerd's
order, the handler's base_runtime_spec containerd runs with (judged against containerd's rules written again from its
source with tomllib, tests/unit/support/containerd_corpus.py, for 1.x, 2.0-2.3 and 2.4), one line set in the file
whose table containerd takes, and that line taken out again leaving the file byte for byte as it was."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.containerd_config import (
    config_files, dumped_base_spec, effective, handler_table, kubecpus_lines, parse, set_line, take_out)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.containerd_corpus import (
    CASES, CONFIG, DEFAULT_V3, R2, R3, containerd_reads, write_case)
from hypothesis import given, settings
from hypothesis import strategies as st

SPEC = "/etc/kubecpu/base-runtime-spec.json"
RUNTIMES = [(1, 7), (2, 1), (2, 4)]


def edited(text, new_version=3):
    return set_line(parse("config.toml", text), "runc", SPEC, new_version)


@pytest.mark.parametrize("text, expected, kind", [
    (CONFIG, CONFIG.replace(R2 + "\n", R2 + '\n    base_runtime_spec = "%s"\n' % SPEC), "line"),  # as its first key
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"/etc/mine.json\"  # theirs\n"),
     CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"  # theirs\n" % SPEC), "value"),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec='/etc/literal.json'\n"),  # its own quotes
     CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec='%s'\n" % SPEC), "value"),
    ("", "version = 3\n\n%s\n  runtime_type = 'io.containerd.runc.v2'\n  base_runtime_spec = '%s'\n" % (R3, SPEC),
     "table"),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n',
     'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n\n%s\n  runtime_type = '
     '"io.containerd.runc.v2"\n  base_runtime_spec = "%s"\n' % (R2, SPEC), "table"),
    ('version = 3\n[ plugins . "io.containerd.cri.v1.runtime" . containerd.runtimes.runc ] # spaced\n    x = 1\n',
     'version = 3\n[ plugins . "io.containerd.cri.v1.runtime" . containerd.runtimes.runc ] # spaced\n'
     "    base_runtime_spec = '%s'\n    x = 1\n" % SPEC, "line"),
    (DEFAULT_V3, DEFAULT_V3.replace("base_runtime_spec = ''", "base_runtime_spec = '%s'" % SPEC), "value"),
    ("version = 4\n%s\n  base_runtime_spec = ''\n" % R3, "version = 4\n%s\n  base_runtime_spec = '%s'\n" % (R3, SPEC),
     "value"),  # containerd 2.4's version
    ("version = 3\r\n%s\r\n  x = 1\r\n" % R3, "version = 3\r\n%s\r\n  base_runtime_spec = '%s'\r\n  x = 1\r\n"
     % (R3, SPEC), "line"),
    ("# placeholder\r\n", "version = 3\r\n# placeholder\r\n\r\n%s\r\n  runtime_type = 'io.containerd.runc.v2'\r\n  "
     "base_runtime_spec = '%s'\r\n" % (R3, SPEC), "table"),
    ("version = 3\n" + R3, "version = 3\n%s\n  base_runtime_spec = '%s'" % (R3, SPEC), "line"),
])
def test_one_line_in_the_handlers_table_and_nothing_else(text, expected, kind):
    new, record = edited(text)
    assert new == expected and record["kind"] == kind
    assert dumped_base_spec(new, "runc") == SPEC
    assert take_out(parse("config.toml", new), "runc", SPEC, record, None) == text  # byte for byte


BASES = [CONFIG, CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"/x.json\" # c\n"), DEFAULT_V3,
         "", "# a placeholder\n", "\n\n", "version = 3\n[grpc]\n  address = '/x'", "version = 3\r\n[grpc]\r\n",
         "version = 3\n" + R3, "version = 2 # two\n%s # ours\n\n  runtime_type = 'x'\n" % R2]


@settings(max_examples=300)
@given(st.sampled_from(BASES), st.sampled_from([3, 4]),
       st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_characters='"\'\\\x7f'), min_size=1))
def test_set_then_taken_out_is_the_file_as_it_was(text, new_version, path):
    new, record = set_line(parse("c.toml", text), "runc", "/" + path, new_version)
    assert dumped_base_spec(new, "runc") == "/" + path
    assert take_out(parse("c.toml", new), "runc", "/" + path, record, None) == text


def test_a_table_the_operator_filled_since_stays_theirs_and_only_the_line_goes():
    new, record = edited("version = 3\n")
    filled = new + "  privileged_without_host_devices = true\n"
    back = take_out(parse("c.toml", filled), "runc", SPEC, record, None)
    assert back == filled.replace("  base_runtime_spec = '%s'\n" % SPEC, "")
    assert back.startswith("version = 3\n") and not kubecpus_lines(parse("c.toml", back), "runc", SPEC)


def test_a_placeholder_given_content_since_keeps_its_version_line():
    new, record = edited("# placeholder\n")
    changed = new.replace("# placeholder\n", "# placeholder\n[grpc]\n  address = '/x'\n")
    assert take_out(parse("c.toml", changed), "runc", SPEC, record, None).startswith("version = 3\n")


@pytest.mark.parametrize("previous, expected", [
    ("/etc/mine.json", CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"/etc/mine.json\"\n")),
    (None, CONFIG),
])
def test_without_a_record_the_value_it_had_is_put_back_or_the_line_goes(previous, expected):
    """A line written by a kubecpu that kept the value only (before the record)."""
    installed = CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = \"%s\"\n" % SPEC)
    assert take_out(parse("c.toml", installed), "runc", SPEC, None, previous) == expected


def test_a_line_someone_changed_is_not_kubecpus():
    new, record = edited(CONFIG)
    theirs = new.replace(SPEC, "/etc/other.json")
    assert take_out(parse("c.toml", theirs), "runc", SPEC, record, None) is None


@pytest.mark.parametrize("text, message", [
    ("version = 1\n[plugins.cri]\n", "config version 1"),
    ("[plugins.cri]\n  x = 1\n", "config version 1 \\(none written\\)"),
    ("version = 5\n", "config version 5"),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = [1]\n"), "not a one-line string"),
    (CONFIG.replace("runc.v2\"\n", "runc.v2\"\n    base_runtime_spec = '''/x'''\n"), "not a one-line string"),
    ("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]\n  runc = { runtime_type = 'x' }\n",
     "line 3 sets the plugins.io.containerd.cri.v1.runtime.containerd.runtimes.runc table with a dotted key, inline"),
    ("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  runtimes.runc.base_runtime_spec = '/x'\n",
     "with a dotted key"),
    ("version = 3\n[[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]]\n", "as an array"),
])
def test_what_it_cannot_edit_safely_is_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        edited(text)


@pytest.mark.parametrize("handler, path, message", [
    ("run c", SPEC, "runtime handler 'run c'"),
    ("runc", '/etc/"quoted".json', "has a quote"),
])
def test_a_handler_or_path_it_cannot_write_is_refused(handler, path, message):
    with pytest.raises(ConfigError, match=message):
        set_line(parse("c.toml", CONFIG), handler, path, 2)


# --- which files containerd reads, in which order, and what it takes ----------------------------------------------
def _tree(tmp_path, main_imports, files):
    (tmp_path / "conf.d").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    main = tmp_path / "config.toml"
    main.write_text("version = 3\nimports = [%s]\n\n[grpc]\n  address = '/x'\n" % main_imports)
    return str(main)


def test_imports_are_read_in_containerds_order(tmp_path):
    """Relative to the importing file, a glob's matches sorted (hidden files too, as Go's Glob), breadth first, each
    file once (a cycle included); a path without '*' is a file, brackets and all."""
    main = _tree(tmp_path, "'conf.d/*.toml', \"%s\"" % (tmp_path / "last.toml"), {
        "conf.d/20-b.toml": "version = 3\nimports = ['../nested.toml', '%s/config.toml', '../[x].toml']\n" % tmp_path,
        "conf.d/10-a.toml": "version = 3\n", "conf.d/.hidden.toml": "", "last.toml": "version = 3\n",
        "nested.toml": "version = 3\n", "[x].toml": ""})
    assert [os.path.relpath(config.path, str(tmp_path)) for config in config_files(main)] == [
        "config.toml", "conf.d/.hidden.toml", "conf.d/10-a.toml", "conf.d/20-b.toml", "last.toml", "nested.toml",
        "[x].toml"]


@pytest.mark.parametrize("imports, message", [
    ("'/nowhere/x.toml'", "imports /nowhere/x.toml, which does not exist"),
    ("'conf.d/*.toml'", "more than 64 files"),
])
def test_imports_containerd_would_not_start_with_are_refused(tmp_path, imports, message):
    main = _tree(tmp_path, imports, {"conf.d/%03d.toml" % n: "version = 3\n" for n in range(70)})
    with pytest.raises(ConfigError, match=message):
        config_files(main)


V3_RUNC = "version = 3\n%s\n  runtime_type = 'io.containerd.runc.v2'\n" % R3
V3_SPEC = "version = 3\n%s\n  base_runtime_spec = '/three.json'\n" % R3
V3_OPTIONS = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  X = 1\n"
V3_IMAGES = "version = 3\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = 'p'\n"
V3_CONTAINERD = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'runc'\n"
V2_CRI = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n'
V2_SPEC = 'version = 2\n%s\n  base_runtime_spec = "/two.json"\n' % R2
V2_OTHER = 'version = 2\n[plugins."io.containerd.gc.v1.scheduler"]\n  x = 1\n'


@pytest.mark.parametrize("files, runtime, value, target", [
    ([V3_RUNC, V3_OPTIONS, V3_IMAGES], (2, 1), None, 0),  # 2.x merges key by key: the handler's table in the main
    ([V3_OPTIONS, V3_RUNC, V3_IMAGES], (2, 1), None, 1),  # ... or in the import that has it
    ([V3_SPEC, V3_RUNC], (2, 1), "/three.json", 1),  # the last table takes the line; the value is the main's (63.6)
    ([V3_RUNC, "", "# only a comment\n"], (2, 1), None, 0),  # empty files count for nothing
    (["# a placeholder\n", V3_IMAGES], (2, 1), None, 0),  # an empty main file gets the table
    ([V3_IMAGES, V3_SPEC, V2_SPEC], (2, 1), "/three.json", 1),  # 2.1: the last version named is 2, but version 3
    ([V3_IMAGES, V3_SPEC, V2_SPEC], (2, 4), "/two.json", 2),  # has runtimes; 2.4 migrates each file first
    ([V3_CONTAINERD, V2_SPEC], (2, 1), "/two.json", 1),  # 2.1: version 3 has no runtimes: version 2's are migrated
    ([V2_SPEC, V3_IMAGES], (2, 1), None, 1),  # 2.1: the last version named is 3: version 2's CRI tables are ignored
    ([V2_SPEC, V3_IMAGES], (2, 4), "/two.json", 0),
    ([CONFIG, V2_CRI], (1, 7), None, 1),  # 1.x: an imported CRI plugin table replaces the whole plugin
    ([V2_SPEC, V2_CRI], (1, 7), None, 1),
    ([V2_SPEC, V2_OTHER], (1, 7), "/two.json", 0),
])
def test_the_value_is_containerds_and_the_line_goes_where_containerd_takes_it(tmp_path, files, runtime, value, target):
    names = ["f%d.toml" % n for n in range(len(files))]
    for name, text in zip(names, files):
        (tmp_path / name).write_text(text)
    (tmp_path / "config.toml").write_text("version = %d\nimports = [%s]\n" % (
        2 if files[0].startswith("version = 2") else 3, ", ".join("'%s'" % name for name in names)))
    found = effective([parse(str(tmp_path / n), t) for n, t in zip(names, files)], "runc", runtime)
    assert (found.value, found.target) == (value, target)
    assert containerd_reads(str(tmp_path / "config.toml"), runtime) == value  # the oracle from containerd's source


@pytest.mark.parametrize("runtime", RUNTIMES[1:])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_corpus_case_is_read_as_containerd_reads_it(tmp_path, case, runtime):
    write_case(str(tmp_path), case)
    main = str(tmp_path / "config.toml")
    assert effective(config_files(main), "runc", runtime).value == containerd_reads(main, runtime)


def test_the_handlers_table_is_found_under_its_versions_plugin():
    assert handler_table(parse("c", V2_SPEC), "runc").line is not None
    assert handler_table(parse("c", V2_SPEC.replace("version = 2", "version = 3")), "runc").header is None
