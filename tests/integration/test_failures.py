# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""scripts/failures.py, which prints a run's failed tests just before scripts/test.sh's timing table: every failure
and error of the JUnit files named, each with the end of its report; a file that cannot be read is named, never the
end of the run's output."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("kubecpu_failures", os.path.join(ROOT, "scripts", "failures.py"))
FAILURES = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(FAILURES)


def junit(path, *cases):
    """A JUnit file of ``cases``: (class, name, kind, text), kind "pass", "failure" or "error"."""
    body = []
    for classname, name, kind, text in cases:
        inner = "" if kind == "pass" else '<%s message="m">%s</%s>' % (kind, text, kind)
        body.append('<testcase classname="%s" name="%s" time="1">%s</testcase>' % (classname, name, inner))
    path.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">%s</testsuite></testsuites>'
                    % "".join(body))
    return str(path)


@pytest.fixture(name="run")
def fixture_run(capsys):
    """scripts/failures.py's main on the paths given: what it printed."""
    def run(*paths):
        assert FAILURES.main(list(paths)) == 0  # it never fails the run it reports on
        out, err = capsys.readouterr()
        assert not err
        return out
    return run


REPORT = "\n".join("line %d" % n for n in range(40)) + "\nE   assert 1 == 2"


@pytest.mark.parametrize("cases, shown, not_shown", [
    ([("a.b", "test_ok", "pass", "")], [], ["FAILED"]),
    ([("a.b", "test_bad", "failure", REPORT)],
     ["failed tests (1)", "FAILED a.b::test_bad", "  E   assert 1 == 2", "  line 39", "  line 16"], ["line 15\n"]),
    ([("a.b", "test_ok", "pass", ""), ("c.d", "test_setup", "error", "fixture broke")],
     ["failed tests (1)", "FAILED c.d::test_setup", "  fixture broke"], ["test_ok"]),
])
def test_each_failure_and_error_is_printed_with_the_end_of_its_report(tmp_path, run, cases, shown, not_shown):
    out = run(junit(tmp_path / "junit.xml", *cases))
    for text in shown:
        assert text in out
    for text in not_shown:
        assert text not in out


def test_failures_of_several_files_are_counted_and_the_first_eight_shown(tmp_path, run):
    first = junit(tmp_path / "one.xml", *[("m", "test_%d" % n, "failure", "boom %d" % n) for n in range(6)])
    second = junit(tmp_path / "two.xml", *[("n", "test_%d" % n, "error", "bang %d" % n) for n in range(4)])
    out = run(first, second)
    assert "failed tests (10)" in out and out.count("FAILED ") == 8
    assert "FAILED n::test_1" in out and "FAILED n::test_2" not in out and "... and 2 more" in out


def test_a_missing_or_broken_file_is_named_and_the_others_still_read(tmp_path, run):
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites><testsuite>")
    good = junit(tmp_path / "good.xml", ("a.b", "test_bad", "failure", "boom"))
    out = run(str(tmp_path / "missing.xml"), str(broken), good)
    assert "missing.xml: not read" in out and "broken.xml: not read" in out and "FAILED a.b::test_bad" in out


def test_a_very_long_line_is_cut(tmp_path, run):
    out = run(junit(tmp_path / "junit.xml", ("a.b", "test_long", "failure", "x" * 1000)))
    assert "  " + "x" * 300 + "\n" in out and "x" * 301 not in out
