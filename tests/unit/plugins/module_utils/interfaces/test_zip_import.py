"""zip_import: the core behaves the same inside a module's zip with the finder as without it (same values, same
errors, tracebacks with the source line, ``__file__`` in the zip), the finder serves only the core's own modules, and
it retires itself where it is not needed (imported from files; interpreters outside the affected versions).

Each case runs a fresh interpreter on a zip laid out as AnsiballZ lays out a module's payload, holding the real
zip_import.py and two small modules of the core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
import zipimport

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import zip_import

PACKAGE = "ansible_collections/kubecpu/cpu_manager/plugins/module_utils"
CORE = {  # two layers, one importing the other, as the core's layers do
    "upper/first.py": "from ..lower.second import VALUE\nDOUBLED = VALUE * 2\n",
    "lower/second.py": "VALUE = 21\n\n\ndef fail():\n    raise ValueError('from the core')  # the line a traceback shows\n",
}
PROBE = r"""
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import zip_import
if sys.argv[2] == "on":
    zip_import.compile_once()
    zip_import.compile_once()  # a second call changes nothing
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.upper import first
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.lower import second
try:
    second.fail()
except ValueError:
    shown = traceback.format_exc()
print(json.dumps({"doubled": first.DOUBLED, "file": second.__file__, "traceback": shown,
                  "finders": sum(type(f).__name__ == "_CompileOnceFinder" for f in sys.meta_path),
                  "loaders": [type(m.__loader__).__name__ for m in (first, second)]}))
"""


def payload(tmp_path):
    path = str(tmp_path / "payload.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        parts = PACKAGE.split("/")
        for depth in range(1, len(parts) + 1):
            archive.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        for layer in ("interfaces", "upper", "lower"):
            archive.writestr(PACKAGE + "/" + layer + "/__init__.py", "")
        with open(zip_import.__file__, encoding="utf-8") as handle:
            archive.writestr(PACKAGE + "/interfaces/zip_import.py", handle.read())
        for name, source in CORE.items():
            archive.writestr(PACKAGE + "/" + name, source)
    return path


def probe(path, mode):
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, path, mode], capture_output=True, text=True,
                         check=True, env={"PATH": os.environ.get("PATH", "")})
    return json.loads(out.stdout)


@pytest.mark.skipif(not zip_import._AFFECTED, reason="the finder retires itself on this interpreter")
def test_the_core_behaves_the_same_with_and_without_the_finder(tmp_path):
    path = payload(tmp_path)
    plain, served = probe(path, "off"), probe(path, "on")
    assert served["finders"] == 1 and plain["finders"] == 0  # installed once, however often it is asked
    assert served["loaders"] == ["_ZipSourceLoader"] * 2 and plain["loaders"] == ["zipimporter"] * 2  # every layer
    for result in (plain, served):
        assert result["doubled"] == 42 and result["file"] == path + "/" + PACKAGE + "/lower/second.py"
    assert served["traceback"].splitlines()[-2:] == plain["traceback"].splitlines()[-2:]


def test_it_retires_itself_outside_the_affected_interpreters(tmp_path, monkeypatch):
    monkeypatch.setattr(zip_import, "_AFFECTED", False)
    monkeypatch.setitem(zip_import.__dict__, "__loader__", zipimport.zipimporter(payload(tmp_path)))
    before = list(sys.meta_path)
    zip_import.compile_once()
    assert sys.meta_path == before


@pytest.mark.skipif(not zip_import._AFFECTED, reason="the finder retires itself on this interpreter")
def test_tracebacks_and_file_point_into_the_zip(tmp_path):
    path = payload(tmp_path)
    result = probe(path, "on")
    assert result["file"] == path + "/" + PACKAGE + "/lower/second.py"
    assert "raise ValueError('from the core')  # the line a traceback shows" in result["traceback"]


def test_from_files_it_installs_nothing():
    zip_import.compile_once()
    assert not any(isinstance(finder, zip_import._CompileOnceFinder) for finder in sys.meta_path)


def test_finder_leaves_other_names_to_the_default_machinery(tmp_path):
    finder = zip_import._CompileOnceFinder()
    path = payload(tmp_path) + "/" + PACKAGE
    assert finder.find_spec("json", None) is None
    assert finder.find_spec(zip_import.CORE + ".upper.missing", [path + "/upper"]) is None
    assert finder.find_spec(zip_import.CORE + ".upper", [path]) is None  # a layer's package: the default machinery's
    assert finder.find_spec(zip_import.CORE + ".upper.first", [str(tmp_path)]) is None  # a directory, not a zip
    assert finder.find_spec("elsewhere.upper.first", [path + "/upper"]) is None  # not the core
    spec = finder.find_spec(zip_import.CORE + ".upper.first", [path + "/upper"])
    assert spec is not None and spec.origin == path + "/upper/first.py"
