"""zip_import: inside a module's zip the core is compiled once per module (zipimport alone compiles it twice,
python/cpython#141276), tracebacks still show its source, and imported from files nothing changes.

Each case runs a fresh interpreter on a zip laid out as AnsiballZ lays out a module's payload, holding the real
zip_import.py and two small modules of the core; it counts the compiles of every module of the core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import zip_import

PACKAGE = "ansible_collections/kubecpu/cpu_manager/plugins/module_utils"
CORE = {
    "first.py": "from .second import VALUE\nDOUBLED = VALUE * 2\n",
    "second.py": "VALUE = 21\n\n\ndef fail():\n    raise ValueError('from the core')  # the line a traceback shows\n",
}
PROBE = r"""
import builtins, json, sys, traceback
sys.path.insert(0, sys.argv[1])
compiled = []
real_compile = builtins.compile
def counting(source, filename, *args, **kwargs):
    compiled.append(str(filename).rpartition("/")[2])
    return real_compile(source, filename, *args, **kwargs)
builtins.compile = counting
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import zip_import
if sys.argv[2] == "on":
    zip_import.compile_once()
    zip_import.compile_once()  # a second call changes nothing
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import first, second
try:
    second.fail()
except ValueError:
    shown = traceback.format_exc()
print(json.dumps({"doubled": first.DOUBLED, "compiled": compiled, "file": second.__file__, "traceback": shown,
                  "finders": sum(type(f).__name__ == "_CompileOnceFinder" for f in sys.meta_path)}))
"""


def payload(tmp_path):
    path = str(tmp_path / "payload.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        parts = PACKAGE.split("/")
        for depth in range(1, len(parts) + 1):
            archive.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        with open(zip_import.__file__, encoding="utf-8") as handle:
            archive.writestr(PACKAGE + "/zip_import.py", handle.read())
        for name, source in CORE.items():
            archive.writestr(PACKAGE + "/" + name, source)
    return path


def probe(path, mode):
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, path, mode], capture_output=True, text=True,
                         check=True, env={"PATH": os.environ.get("PATH", "")})
    return json.loads(out.stdout)


@pytest.mark.parametrize(("mode", "compiles_each"), [
    ("off", 2),  # what zipimport alone does (3.9 to 3.14: python/cpython#141276 is open)
    ("on", 1),
])
def test_compiles_per_module_in_a_zip(tmp_path, mode, compiles_each):
    result = probe(payload(tmp_path), mode)
    assert result["doubled"] == 42
    for name in CORE:
        assert result["compiled"].count(name) == compiles_each, result["compiled"]
    assert result["finders"] == (1 if mode == "on" else 0)


def test_tracebacks_and_file_point_into_the_zip(tmp_path):
    path = payload(tmp_path)
    result = probe(path, "on")
    assert result["file"] == path + "/" + PACKAGE + "/second.py"
    assert "raise ValueError('from the core')  # the line a traceback shows" in result["traceback"]


def test_from_files_it_installs_nothing():
    zip_import.compile_once()
    assert not any(isinstance(finder, zip_import._CompileOnceFinder) for finder in sys.meta_path)


def test_finder_leaves_other_names_to_the_default_machinery(tmp_path):
    finder = zip_import._CompileOnceFinder()
    path = payload(tmp_path) + "/" + PACKAGE
    assert finder.find_spec("json", None) is None
    assert finder.find_spec(zip_import.PACKAGE + ".missing", [path]) is None
    assert finder.find_spec(zip_import.PACKAGE + ".first", [str(tmp_path)]) is None  # a directory, not a zip
    spec = finder.find_spec(zip_import.PACKAGE + ".first", [path])
    assert spec is not None and spec.origin == path + "/first.py"
