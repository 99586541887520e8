# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller side of every kubecpu module: ansible-core's normal module execution, with Python's cyclic
garbage collector off in the worker that runs it.

ansible-core builds a module's payload in the worker it forks for the task, parsing every module_utils file the
module ships into an AST. The kubecpu modules ship the core (about 5,000 lines, 37,000 AST nodes on top of
ansible's own 53 files), and those allocations push the collector into a full collection of the whole heap the
worker inherited from ansible-playbook (about 100,000 objects): 55 ms of a 285 ms build, with 25 ms more in
young-generation passes, measured on a 2-CPU VM (``benchmarks/reconcile.py`` section 3). Reference counting
still frees everything that is not a cycle, and the worker ends with ``os._exit`` right after the task, so in
that worker the collector stays off: turning it back on would only buy one more full collection (28 ms
measured) of objects about to vanish. Anywhere else (a test, a program embedding ansible) it is restored.

Measured benefit: the payload build of cpu_manager_allocate from about 285 to about 200 ms. It retires itself where
it is not needed: on CPython 3.14 and later, whose collector is incremental (no full-heap pause to avoid), on other
interpreters, and on an ansible-core without the forked ``WorkerProcess`` it recognises (``_SWITCH``).
"""

from __future__ import annotations

import gc
import multiprocessing

import sys

from ansible.plugins.action.normal import ActionModule as NormalAction

try:
    from ansible.executor.process.worker import WorkerProcess
except ImportError:  # another ansible-core layout: the plain normal action
    WorkerProcess = None

_SWITCH = WorkerProcess is not None and sys.implementation.name == "cpython" and sys.version_info[:2] < (3, 14)


class ModuleAction(NormalAction):
    """ansible.builtin.normal (check mode, async, module_defaults and all), without the cyclic collector."""

    def run(self, tmp=None, task_vars=None):
        if not _SWITCH:
            return super().run(tmp, task_vars)
        restore = gc.isenabled() and not isinstance(multiprocessing.current_process(), WorkerProcess)
        gc.disable()
        try:
            return super().run(tmp, task_vars)
        finally:
            if restore:
                gc.enable()
