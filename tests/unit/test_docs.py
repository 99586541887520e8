"""The specification ships with the code: every document the code cites is in docs/, equal to the ground truth."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ROOT, SHARED

CITED = re.compile(r"\b([A-Z][A-Z_]+\.md)\b")
SOURCES = ("plugins", "bin", "roles", "playbooks", "scripts", "benchmarks", "README.md")


def cited():
    found = set()
    for source in SOURCES:
        path = os.path.join(ROOT, source)
        files = [path] if os.path.isfile(path) else [
            os.path.join(d, f) for d, _dirs, names in os.walk(path) for f in names if f.endswith((".py", ".yml", ".md", ".j2")) or f == "kubecpu"]
        for name in files:
            with open(name, encoding="utf-8") as handle:
                found.update(CITED.findall(handle.read()))
    return found - {"README.md", "CHANGELOG.md", "DEVELOPERS.md", "ENVIRONMENT.md", "STYLE.md"}


KUBECPU_OWN = ("README.md", "VERSIONS_IN_KUBECPU.md", "ARCHITECTURE.md", "HOUSEKEEPING.md", "RUNTIMES_TESTED.md",
               "REAL_KUBELET.md")  # not copies of the ground truth


def test_every_cited_document_is_in_docs():
    names = cited()
    assert {"ALGORITHM.md", "RUNTIME.md", "TOPOLOGY.md", "HINTS.md"} <= names
    assert sorted(n for n in names if not os.path.exists(os.path.join(ROOT, "docs", n))) == []


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="the ground truth is not beside this copy")
@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(ROOT, "docs"))
                                        if n not in KUBECPU_OWN))
def test_the_copies_equal_the_ground_truth(name):
    with open(os.path.join(ROOT, "docs", name), "rb") as copy, open(os.path.join(SHARED, name), "rb") as truth:
        assert copy.read() == truth.read(), "docs/%s differs from the ground truth: copy it again" % name


@pytest.mark.parametrize("page, least", [("RUNTIMES_TESTED.md", 30), ("REAL_KUBELET.md", 1)])
def test_every_test_a_tested_table_names_exists_and_runs_for_that_runtime(page, least):
    """docs/RUNTIMES_TESTED.md and docs/REAL_KUBELET.md back each cell with a test: the file defines it, and a
    ``[run]`` it names is one of the test's parameters (each of ``a-b``'s parts appears in the file, quoted)."""
    with open(os.path.join(ROOT, "docs", page), encoding="utf-8") as handle:
        table = handle.read()
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[([^\]]+)\])?`", table)
    assert len(named) >= least
    for path, test, run in named:
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            source = handle.read()
        assert "def %s(" % test in source, "%s::%s" % (path, test)
        assert not run or _parameters(run.split("-"), source), "%s::%s[%s]: no such parameters" % (path, test, run)


def _parameters(tokens, source):
    """Whether ``tokens`` (an id split at "-") are parameter ids quoted in ``source``: pytest joins the ids of several
    parameters with "-", which one id may hold too ("cri-o 1.36.3-cri")."""
    return not tokens or any('"%s"' % "-".join(tokens[:end]) in source and _parameters(tokens[end:], source)
                             for end in range(len(tokens), 0, -1))
