# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``bin/kubecpu hook`` on its own: the OCI hook runs on every container's start path, so ``bin/kubecpu`` loads this
module instead of ``cli`` for it, and it imports only the hook's parser and service (``services.hook`` defers the
policy and the topology to an allocation). Same flags, configuration file and exit codes as every sub-command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Optional, Sequence, TextIO, cast

from ..services.hook import Hook
from .cli_args import build_parser, node_config, run_command


def cmd_hook(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """The OCI hook: 0 when the container may be created (its cgroup on its CPUs), 1 with one line when not."""
    result = Hook(node_config(args), args.lock_timeout).run(cast(IO[bytes], getattr(stdin, "buffer", stdin)))
    out.write(json.dumps(result.to_dict()) + "\n")
    return 0


def main(argv: Optional[Sequence[str]] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         stdin: TextIO = sys.stdin) -> int:
    return run_command(build_parser(only="hook"), {"hook": cmd_hook}, argv, out=out, err=err, stdin=stdin)
