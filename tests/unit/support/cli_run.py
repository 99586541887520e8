"""bin/kubecpu in process: its exit code, stdout and stderr for an argument list (and stdin)."""

from __future__ import annotations

import io

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli


def run(argv, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out, err, io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()
