"""One version, semantic, everywhere: galaxy.yml is the source; ``kubecpu --version`` says it, and the changelog
(changelogs/changelog.yaml, from which antsibull-changelog makes CHANGELOG.rst) has released it. CONTRIBUTING.md says
how a release is cut."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import VERSION
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ROOT

SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")  # no pre-release: Galaxy sorts those oddly


def load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def galaxy_version():
    return str(load("galaxy.yml")["version"])


def semver(text):
    match = SEMVER.fullmatch(text)
    assert match, "%r is not a semantic version X.Y.Z" % text
    return tuple(int(part) for part in match.groups())


def test_galaxy_yml_holds_a_semantic_version_and_the_cli_constant_is_that_version():
    semver(galaxy_version())
    assert VERSION == galaxy_version(), "plugins/module_utils/interfaces/cli_args.py VERSION differs from galaxy.yml"


def test_kubecpu_version_prints_the_galaxy_version():
    proc = subprocess.run([sys.executable, "-S", os.path.join(ROOT, "bin", "kubecpu"), "--version"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout.strip()) == (0, "kubecpu " + galaxy_version())


def test_the_changelog_has_released_the_galaxy_version_as_its_newest():
    releases = load("changelogs", "changelog.yaml")["releases"]
    assert releases, "changelogs/changelog.yaml has no release: antsibull-changelog release (CONTRIBUTING.md)"
    assert max(releases, key=semver) == galaxy_version()
    with open(os.path.join(ROOT, "CHANGELOG.rst"), encoding="utf-8") as handle:
        generated = handle.read()
    for version in releases:
        assert "\nv%s\n" % version in generated, "CHANGELOG.rst lacks v%s: antsibull-changelog generate" % version


def test_no_fragment_left_in_the_tree_was_released_already():
    """A released fragment left behind would be released again (changelogs/config.yaml: keep_fragments false)."""
    config = load("changelogs", "config.yaml")
    assert config["keep_fragments"] is False and config["changelog_filename_template"] == "../CHANGELOG.rst"
    released = {name for release in load("changelogs", "changelog.yaml")["releases"].values()
                for name in release.get("fragments", ())}
    waiting = set(os.listdir(os.path.join(ROOT, "changelogs", "fragments"))) - {".keep"}
    assert sorted(waiting & released) == []
