"""The core's layers (docs/ARCHITECTURE.md) import one way: every import of every file under plugins/module_utils,
lazy ones included, read from the source and checked against the layer table."""

from __future__ import annotations

import ast
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins import module_utils

CORE = os.path.dirname(module_utils.__file__)
PACKAGE = "ansible_collections.kubecpu.cpu_manager.plugins.module_utils"
# Bottom to top; a layer may import the layers of a lower rank. kubelet and wire share the bottom and ignore each other.
RANK = {"kubelet": 0, "wire": 0, "runtime": 1, "node": 2, "services": 3, "operations": 4, "interfaces": 5}
ROOT = {"errors", "atomic", "paths"}  # shared by every layer
MAX_LINES = 450
LIMITS = {"node/manager.py": 270}  # orchestration only: a pass in three phases (observe, decide and commit under the lock, push)


def core_files():
    for folder, _dirs, names in os.walk(CORE):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(folder, name), CORE)


def module_of(path):
    """'node/manager.py' -> ('node', 'manager'); 'errors.py' -> ('', 'errors')."""
    parts = path[:-3].split(os.sep)
    return ("", parts[0]) if len(parts) == 1 else (parts[0], ".".join(parts[1:]))


def imported(path):
    """The core modules a file imports, as (layer, module) pairs; every other import is the standard library's."""
    layer, _name = module_of(path)
    package = [p for p in [layer] if p]  # where a relative import starts
    with open(os.path.join(CORE, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level - 1 > len(package):
                raise AssertionError("%s: a relative import above the core (line %d)" % (path, node.lineno))
            target = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            if not target or (len(target) == 1 and target[0] in RANK):  # from . import x, from ..layer import x
                targets = [target + [alias.name] for alias in node.names]
            else:
                targets = [target]
            for parts in targets:
                yield (parts[0], ".".join(parts[1:])) if parts[0] in RANK else ("", parts[0])
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                assert not module.startswith(PACKAGE), "%s imports the core by its absolute name: %s" % (path, module)


FILES = list(core_files())


def test_every_file_is_in_a_layer_or_shared_at_the_root():
    for path in FILES:
        layer, name = module_of(path)
        assert layer in RANK or (layer == "" and name in ROOT | {"__init__"}), path
    assert {module_of(p)[0] for p in FILES} - {""} == set(RANK)


@pytest.mark.parametrize("layer", sorted(RANK))
def test_each_layer_says_what_it_is_and_what_it_may_import(layer):
    with open(os.path.join(CORE, layer, "__init__.py"), encoding="utf-8") as handle:
        doc = ast.get_docstring(ast.parse(handle.read()))
    assert doc and "import" in doc.lower()


@pytest.mark.parametrize("path", FILES)
def test_imports_go_down(path):
    layer, _name = module_of(path)
    for target_layer, target in imported(path):
        if target_layer == "":
            assert target in ROOT, "%s imports %s, which is not a core module" % (path, target)
            continue
        assert layer != "", "%s (shared at the root) imports %s/%s" % (path, target_layer, target)
        if target_layer == layer:
            continue
        if RANK[layer] == 0:
            raise AssertionError("%s may import nothing outside %s/ but errors; it imports %s/%s"
                                 % (path, layer, target_layer, target))
        assert RANK[target_layer] < RANK[layer], "%s imports %s/%s, a layer above or beside it" % (
            path, target_layer, target)


def test_the_bottom_layers_import_only_errors_from_the_root():
    for path in FILES:
        if module_of(path)[0] in ("kubelet", "wire"):
            assert {t for layer, t in imported(path) if layer == ""} <= {"errors"}, path


def test_no_cycle_between_modules():
    graph = {module_of(p): {t for t in imported(p) if t != ("", "__init__")} for p in FILES}
    done, active = set(), []

    def visit(node):
        if node in active:
            cycle = active[active.index(node):] + [node]
            raise AssertionError("import cycle: %s" % " -> ".join("/".join(filter(None, n)) for n in cycle))
        if node in done:
            return
        active.append(node)
        for target in graph.get(node, ()):
            visit(target)
        active.pop()
        done.add(node)

    for node in graph:
        visit(node)


@pytest.mark.parametrize("path", FILES)
def test_files_stay_small(path):
    with open(os.path.join(CORE, path), encoding="utf-8") as handle:
        lines = sum(1 for _line in handle)
    assert lines <= LIMITS.get(path.replace(os.sep, "/"), MAX_LINES), "%s has %d lines" % (path, lines)
