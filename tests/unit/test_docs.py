"""The specification ships with the code: every document the code cites is in docs/, equal to the ground truth. The
README is the one a collection's user expects: short, in the order they read it, its support matrix made from what the
suite runs (scripts/support_matrix.py); every playbook has a page on the docsite."""

from __future__ import annotations

import ast
import importlib.util
import os
import re

import pytest
import yaml

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
    return found - {"README.md", "CHANGELOG.md", "CONTRIBUTING.md", "DEVELOPERS.md", "ENVIRONMENT.md", "STYLE.md"}


KUBECPU_OWN = ("README.md", "VERSIONS_IN_KUBECPU.md", "ARCHITECTURE.md", "HOUSEKEEPING.md", "RUNTIMES_TESTED.md",
               "REAL_KUBELET.md", "TESTING.md", "USAGE.md", "SECURITY.md",
               "COMPARISON.md")  # not copies of the ground truth


def test_every_cited_document_is_in_docs():
    names = cited()
    assert {"ALGORITHM.md", "RUNTIME.md", "TOPOLOGY.md", "HINTS.md"} <= names
    assert sorted(n for n in names if not os.path.exists(os.path.join(ROOT, "docs", n))) == []


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="the ground truth is not beside this copy")
@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(ROOT, "docs"))
                                        if n.endswith(".md") and n not in KUBECPU_OWN))
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


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def test_the_readme_is_short_and_in_the_order_its_users_read_it():
    text = readme()
    lines = text.splitlines()
    assert len(lines) <= 200
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == ["Support matrix", "Install", "Quick start: the collection on this machine", "Which mode to use",
                        "Uninstall", "Troubleshooting", "Links"]
    assert "**Why pick it:**" in text.split("\n## ", 1)[0]


def test_no_readme_table_cell_is_over_40_words():
    cells = [cell for line in readme().splitlines() if line.startswith("|") for cell in line.strip("|").split("|")]
    assert cells and max(len(cell.split()) for cell in cells) <= 40


def test_the_readme_keeps_its_two_set_up_commands_for_a_fresh_debian_12():
    blocks = re.findall(r"```bash\n(.*?)```", readme(), re.S)
    commands = [line for block in blocks for line in block.splitlines() if line and not line.startswith("#")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def support_matrix():
    spec = importlib.util.spec_from_file_location("support_matrix", os.path.join(ROOT, "scripts", "support_matrix.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_support_matrix_is_the_one_made_from_what_the_suite_runs():
    """Made from docs/RUNTIMES_TESTED.md, scripts/kubelet.sh, kubelet_versions.KNOWN, meta/runtime.yml and the
    rest: a runtime or kubelet added to the suite, or one dropped, changes the README (support_matrix.py --write)."""
    made = support_matrix()
    block = made.matrix()
    text = readme()
    assert text[text.index(made.BEGIN):text.index(made.END) + len(made.END) + 1] == block
    for shown in ("containerd 1.6.20", "containerd 2.4.2", "CRI-O 1.36.3", "1.35, 1.36, 1.37, 1.38", "1.37.2"):
        assert shown in block


def test_the_support_matrix_follows_its_sources():
    """A runtime whose NRI cell names no test is shown without it; the kubelets come from kubelet.sh's releases."""
    made = support_matrix()
    assert made.tested("`tests/integration/test_nri.py::test_x[containerd 1.7.24]`") == "tested"
    assert made.tested("none in 1.6 (the cgroup watch and the period)") == "none in 1.6"
    assert made.cgroups("cgroup v1: `tests/a.py::t`", "`tests/b.py::t`") == ("cgroupfs", "systemd")
    assert made.cgroups("cgroup v1: `x`; cgroup v2: `y`", "none") == ("cgroupfs", "cgroupfs")


def test_the_readme_installs_the_version_galaxy_yml_builds():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    named = set(re.findall(r"kubecpu-cpu_manager-([\d.]+)\.tar\.gz", readme()))
    assert named == {version}


def test_every_playbook_has_a_docsite_page_that_names_only_variables_it_reads():
    with open(os.path.join(ROOT, "docs", "docsite", "extra-docs.yml"), encoding="utf-8") as handle:
        pages = {page for section in yaml.safe_load(handle)["sections"] for page in section["toctree"]}
    playbooks = sorted(name[:-4] for name in os.listdir(os.path.join(ROOT, "playbooks")) if name.endswith(".yml"))
    assert playbooks and {"playbook_" + name for name in playbooks} <= pages
    for name in playbooks:
        with open(os.path.join(ROOT, "playbooks", name + ".yml"), encoding="utf-8") as handle:
            playbook = handle.read()
        with open(os.path.join(ROOT, "docs", "docsite", "rst", "playbook_%s.rst" % name), encoding="utf-8") as handle:
            page = handle.read()
        assert ".. _ansible_collections.kubecpu.cpu_manager.docsite.playbook_%s:" % name in page
        named = set(re.findall(r"``(kubecpu_\w+)``", page))
        assert named and sorted(v for v in named if v not in playbook) == [], name


MODULES = sorted(name for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))


@pytest.mark.parametrize("module", MODULES)
def test_every_module_documentation_parses_as_yaml(module):
    """A ": " inside a plain YAML scalar makes ansible-doc, the docsite and the changelog's plugin scan fail on the
    whole module (twice in issue 63's work): caught here, in the unit stage, before they run."""
    with open(os.path.join(ROOT, "plugins", "modules", module), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    blocks = {node.targets[0].id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and isinstance(node.targets[0], ast.Name) and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    assert sorted(blocks) == ["DOCUMENTATION", "EXAMPLES", "RETURN"]
    for name, text in blocks.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            pytest.fail("%s %s is not YAML: %s" % (module, name, error))
