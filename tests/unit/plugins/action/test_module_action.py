"""The modules' action: ansible-core's normal action with the cyclic garbage collector off while it runs; left
off in ansible's forked worker (which ends with os._exit right after the task), restored anywhere else. Every
module has one."""

from __future__ import annotations

import gc
import importlib
import os
import sys
from unittest import mock

import pytest

from ansible.executor.process.worker import WorkerProcess
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.kubecpu.cpu_manager.plugins.plugin_utils import module_action
from ansible_collections.kubecpu.cpu_manager.plugins.plugin_utils.module_action import ModuleAction

PLUGINS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins")
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(PLUGINS, "modules")) if name.endswith(".py"))


@pytest.fixture
def collector():
    enabled = gc.isenabled()
    gc.enable()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def run(in_worker, fails=False):
    seen = {}

    def normal_run(self, tmp=None, task_vars=None):
        seen["enabled"] = gc.isenabled()
        seen["task_vars"] = task_vars
        if fails:
            raise RuntimeError("the module failed")
        return {"changed": True}

    action = ModuleAction.__new__(ModuleAction)  # the run method alone: ansible's machinery is not needed
    process = mock.Mock(spec=WorkerProcess) if in_worker else mock.Mock()
    with mock.patch.object(NormalAction, "run", normal_run), \
            mock.patch("multiprocessing.current_process", return_value=process):
        if fails:
            with pytest.raises(RuntimeError):
                action.run(task_vars={"x": 1})
        else:
            assert action.run(task_vars={"x": 1}) == {"changed": True}
    return seen


@pytest.mark.usefixtures("collector")
@pytest.mark.parametrize("fails", [False, True])
def test_collector_off_during_the_run_and_restored_outside_a_worker(fails):
    seen = run(in_worker=False, fails=fails)
    assert seen == {"enabled": False, "task_vars": {"x": 1}}
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_collector_left_off_in_ansibles_forked_worker():
    seen = run(in_worker=True)
    assert seen["enabled"] is False
    assert not gc.isenabled()


def test_normal_actions_capabilities_are_kept():
    assert ModuleAction._supports_check_mode and ModuleAction._supports_async


@pytest.mark.parametrize("module", MODULES)
def test_every_module_has_the_action(module):
    action = importlib.import_module("ansible_collections.kubecpu.cpu_manager.plugins.action." + module)
    assert issubclass(action.ActionModule, ModuleAction)


@pytest.mark.usefixtures("collector")
def test_it_retires_itself_where_the_collector_needs_no_switch(monkeypatch):
    """CPython 3.14's incremental collector, other interpreters, another ansible-core: the plain normal action."""
    monkeypatch.setattr(module_action, "_SWITCH", False)
    seen = run(in_worker=True)
    assert seen["enabled"] is True and gc.isenabled()


def test_the_switch_is_on_exactly_for_the_affected_interpreters():
    affected = sys.implementation.name == "cpython" and sys.version_info[:2] < (3, 14)
    assert module_action._SWITCH is affected
