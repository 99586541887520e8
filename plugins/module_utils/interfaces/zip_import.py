# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The core compiled once per module run inside Ansible's module zip (AnsiballZ). Private to the modules.

An Ansible module ships its module_utils in a zip, where Python keeps no bytecode and compiles every module from
source on every run, and CPython's zipimport compiles each module twice (python/cpython#141276, open through 3.14):
its ``find_spec`` asks ``get_filename``, which compiles the module only to learn its path, and the loader then
compiles it again. ``compile_once()``, called by each module before it imports the core, puts a finder in front that
serves the core's modules from the same zip, each compiled once.

Measured benefit (2-CPU VM, ``benchmarks/reconcile.py`` section 3): the node-side run of cpu_manager_allocate
went from 126 to 90 ms over ``ansible.builtin.ping``'s. It retires itself: it does nothing on interpreters other
than CPython 3.9 to 3.14 (``_AFFECTED``; the issue is open through 3.14, so later versions are not assumed to need
it until measured), and nothing when the core was imported from files (``bin/kubecpu``, the tests).
"""

from __future__ import annotations

import sys
import zipimport
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Dict, Optional, Sequence, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # importing it costs 25 ms (importlib.resources): only for the types

CORE = __name__.rsplit(".", 2)[0]  # plugins.module_utils: every layer below it is served
_AFFECTED = sys.implementation.name == "cpython" and (3, 9) <= sys.version_info[:2] <= (3, 14)


class _ZipSourceLoader:
    """Loads one module of the core from the zip: read, compile once, execute."""

    def __init__(self, importer: zipimport.zipimporter, fullname: str, origin: str) -> None:
        self.importer = importer
        self.fullname = fullname
        self.origin = origin

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        source = self.get_source(self.fullname)
        if source is None:
            raise ImportError("no source for %s in %s" % (self.fullname, self.importer.archive), name=self.fullname)
        exec(compile(source, self.origin, "exec", dont_inherit=True), module.__dict__)

    def get_source(self, fullname: str) -> Optional[str]:  # also for tracebacks (linecache)
        return self.importer.get_source(fullname)


class _CompileOnceFinder:
    """Finds the plain modules of the core (in any of its layers) in a zip; packages and anything else are left to the
    default machinery."""

    def __init__(self) -> None:
        self.importers: Dict[str, Optional[zipimport.zipimporter]] = {}

    def _importer(self, entry: str) -> Optional[zipimport.zipimporter]:
        if entry not in self.importers:
            try:
                self.importers[entry] = zipimport.zipimporter(entry)
            except zipimport.ZipImportError:
                self.importers[entry] = None  # not a zip: the default machinery's
        return self.importers[entry]

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        name = fullname.rpartition(".")[2]
        if not fullname.startswith(CORE + ".") or not path:
            return None
        for entry in path:
            importer = self._importer(entry)
            if importer is None:
                continue
            try:
                if importer.is_package(fullname):
                    return None
            except zipimport.ZipImportError:
                continue  # not in this entry
            origin = "%s/%s%s.py" % (importer.archive, importer.prefix, name)
            spec = ModuleSpec(fullname, cast("Loader", _ZipSourceLoader(importer, fullname, origin)), origin=origin)
            spec.has_location = True
            return spec
        return None


def compile_once() -> None:
    """Installs the finder when the core was imported from a zip on an affected CPython (once, however often it is
    called)."""
    if _AFFECTED and isinstance(globals().get("__loader__"), zipimport.zipimporter) and not any(
            isinstance(finder, _CompileOnceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CompileOnceFinder())
