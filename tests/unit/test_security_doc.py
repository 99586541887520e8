"""docs/SECURITY.md names a test for every line of its threat model: each one it names exists, so a renamed or
removed test cannot leave a guarantee standing on nothing."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ROOT

with open(os.path.join(ROOT, "docs", "SECURITY.md"), encoding="utf-8") as _handle:
    TEXT = _handle.read()
NAMED = sorted(set(re.findall(r"`((?:unit|integration)/[\w/]+\.py)((?:::\w+)?)`", TEXT)))
SHORT = sorted(set(re.findall(r"`::(\w+)`", TEXT)))  # a second test of the file named just before it
BARE = sorted(set(re.findall(r"\(`(test_\w+)`\)", TEXT)))  # a test named alone, in prose


def defined(name):
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "tests")):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file), encoding="utf-8") as handle:
                    if re.search(r"^def %s\(" % name, handle.read(), re.M):
                        return True
    return False


def test_every_section_names_tests():
    assert len(NAMED) >= 20 and "HOOK_" not in TEXT  # no placeholder left


@pytest.mark.parametrize("path, test", NAMED)
def test_each_named_test_exists(path, test):
    file = os.path.join(ROOT, "tests", path)
    assert os.path.isfile(file), path
    if test:
        with open(file, encoding="utf-8") as handle:
            assert re.search(r"^def %s\(" % test[2:], handle.read(), re.M), "%s%s" % (path, test)


@pytest.mark.parametrize("test", SHORT + BARE)
def test_each_test_named_in_prose_exists(test):
    assert defined(test), test
