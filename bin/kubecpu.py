#!/usr/bin/env python3
# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""kubecpu node agent: runs from a checkout or an installed collection with nothing but python3.

The core lives in the collection's plugins/module_utils; it is loaded here as a standalone package so
no Ansible is needed on the node.
"""

import importlib
import importlib.util
import os
import sys

if sys.version_info < (3, 9):
    sys.stderr.write("kubecpu needs Python 3.9 or newer (this is %s)\n" % sys.version.split()[0])
    sys.exit(2)


def _load_core():
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    utils = os.path.join(root, "plugins", "module_utils")
    spec = importlib.util.spec_from_file_location("kubecpu_core", os.path.join(utils, "__init__.py"),
                                                  submodule_search_locations=[utils])
    if spec is None or spec.loader is None:
        sys.stderr.write("kubecpu: cannot find the core in %s\n" % utils)
        sys.exit(2)
    package = importlib.util.module_from_spec(spec)
    sys.modules["kubecpu_core"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("kubecpu_core.cli")


if __name__ == "__main__":
    sys.exit(_load_core().main())
