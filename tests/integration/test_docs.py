"""ansible-doc renders every module and every role of the installed collection, with its options, examples and
return values (modules) or its entry point and variables (roles); the JSON form agrees with the argument specs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from test_modules import ROOT, collections_path

MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))
ROLES = sorted(os.listdir(os.path.join(ROOT, "roles")))


def ansible_doc(*args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1", PAGER="cat")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def module_pages():
    """Every module's page as ansible-doc renders it (text and JSON), from one ansible-doc run each for all of them
    (ansible-doc's start, about 2 s, is most of a page's cost)."""
    names = ["kubecpu.cpu_manager." + module for module in MODULES]
    text = ansible_doc(*names)
    page = re.compile(r"^> MODULE (\S+).*?(?=^> MODULE |\Z)", re.M | re.S)
    pages = {match.group(1): match.group(0) for match in page.finditer(text)}
    return pages, json.loads(ansible_doc("--json", *names))


@pytest.mark.parametrize("module", MODULES)
def test_module_page(module, module_pages):
    name = "kubecpu.cpu_manager." + module
    pages, docs = module_pages
    text = pages[name]
    assert "OPTIONS" in text and "EXAMPLES" in text
    doc = docs[name]
    assert doc["doc"]["short_description"] and doc["examples"].strip() and doc["return"]
    for option, spec in doc["doc"]["options"].items():
        assert spec.get("description"), "%s: option %s has no description" % (name, option)


@pytest.mark.parametrize("role", ROLES)
def test_role_page(role):
    name = "kubecpu.cpu_manager." + role
    text = ansible_doc("-t", "role", name)
    assert re.search(r"ENTRY POINT: \W*main\W* - \w", text), text[:300]
    doc = json.loads(ansible_doc("-t", "role", "--json", name))[name]
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    rendered = doc["entry_points"]["main"]["options"]
    assert set(rendered) == set(specs)
    for variable in specs:
        assert variable in text and rendered[variable].get("description"), variable


def test_the_module_list_names_every_module():
    listed = ansible_doc("-l", "kubecpu.cpu_manager")
    for module in MODULES:
        assert "kubecpu.cpu_manager." + module in listed
