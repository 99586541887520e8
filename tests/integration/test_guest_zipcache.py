# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""scripts/guest_zipcache.py, the test guest's bytecode for modules imported from zip files (Ansible's payloads):
what runs is what the zip holds, compiled once; a payload elsewhere reuses it under its own file name; a changed
source or a torn cache file is compiled again."""

import importlib.util
import os
import sys
import traceback
import zipfile
import zipimport

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = "def answer():\n    return %d\n\n\ndef fail():\n    raise RuntimeError('from the zip')\n"


@pytest.fixture(name="zipcache")
def fixture_zipcache(tmp_path, monkeypatch):
    """The cache installed in this process with its directory under tmp_path; zipimport as it was afterwards. Each
    call of compile_source, the original, is counted."""
    original = zipimport._compile_source  # pylint: disable=protected-access
    compiled = []

    def counting(pathname, source):
        compiled.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(zipimport, "_compile_source", counting)
    spec = importlib.util.spec_from_file_location("kubecpu_zipcache_test",
                                                  os.path.join(ROOT, "scripts", "guest_zipcache.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # installs it over the counting one
    module.CACHE_DIR = str(tmp_path / "cache")
    return module, compiled  # monkeypatch puts zipimport's own back


def _payload(tmp_path, name, value):
    """A zip holding package ``pkg`` with module ``mod`` (SOURCE with ``value``), as AnsiballZ lays one out."""
    where = tmp_path / name
    where.mkdir()
    path = where / "payload.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", SOURCE % value)
    return str(path)


def _load(path):
    """pkg.mod imported from ``path``, fresh (as a new module run would)."""
    for name in ("pkg.mod", "pkg"):
        sys.modules.pop(name, None)
    sys.path.insert(0, path)
    try:
        return importlib.import_module("pkg.mod")
    finally:
        sys.path.remove(path)
        for name in ("pkg.mod", "pkg"):
            sys.modules.pop(name, None)


def test_compiled_once_then_loaded_under_the_new_payloads_name(zipcache, tmp_path):
    module, compiled = zipcache
    first = _load(_payload(tmp_path, "run1", 41))
    assert first.answer() == 41
    assert len(compiled) == 2  # the package and the module
    assert len(os.listdir(module.CACHE_DIR)) == 2
    second_path = _payload(tmp_path, "run2", 41)
    second = _load(second_path)
    assert second.answer() == 41
    assert len(compiled) == 2, "the second payload was compiled again"
    with pytest.raises(RuntimeError) as raised:
        second.fail()
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert frames[-1].filename == os.path.join(second_path, "pkg", "mod.py")  # not run1's payload


def test_a_changed_source_is_compiled_not_served_stale(zipcache, tmp_path):
    _module, compiled = zipcache
    assert _load(_payload(tmp_path, "old", 1)).answer() == 1
    assert _load(_payload(tmp_path, "new", 2)).answer() == 2
    assert compiled.count(os.path.join(str(tmp_path / "new" / "payload.zip"), "pkg", "mod.py")) == 1


def test_a_torn_cache_file_is_compiled_again_and_replaced(zipcache, tmp_path):
    module, compiled = zipcache
    _load(_payload(tmp_path, "run1", 7))
    for name in os.listdir(module.CACHE_DIR):
        with open(os.path.join(module.CACHE_DIR, name), "r+b") as handle:
            handle.truncate(5)
    assert _load(_payload(tmp_path, "run2", 7)).answer() == 7
    assert len(compiled) == 4
    assert _load(_payload(tmp_path, "run3", 7)).answer() == 7
    assert len(compiled) == 4  # the rewritten files serve the third
