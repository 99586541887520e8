"""A role's tasks run in-process, as ansible-playbook runs them, for the modules the kubelet role's rescues use:
each task's ``when`` and arguments templated by ansible-core's own templar (with ``omit``, task ``vars``, registered
results, ``failed_when: false`` and ``ignore_errors``), files copied and read on the real filesystem, the collection's modules run in
this process (patch_module_args), and systemd a stand-in that records what the kubelet was told and what its
checkpoint held at each step. A module the runner does not know fails the test: a new task in a rescue gets its
stand-in here before a test passes over it."""

from __future__ import annotations

import base64
import os
import contextlib
import importlib
import io
import json
import shutil
from typing import Any, Callable, Dict, List, Optional

import yaml
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.testing import patch_module_args
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from unittest import mock

OMIT = "__omit_place_holder__kubecpu_test"
TASK_KEYWORDS = ("name", "when", "register", "failed_when", "ignore_errors", "vars", "changed_when", "delegate_to")


def trusted(value: Any) -> Any:
    """The tasks as ansible-playbook loads them: every string a template the templar may render."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value


def load_tasks(path: str) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return trusted(yaml.safe_load(handle))


class TaskFailed(Exception):
    """A task failed without ``failed_when: false`` (the play stops for the host): ``result`` its result."""

    def __init__(self, name: str, result: Dict[str, Any]) -> None:
        super().__init__("%s: %s" % (name, result.get("msg")))
        self.name = name
        self.result = result


class Systemd:
    """The kubelet's unit: running or not, and for each call its state, the checkpoint's bytes and the kubelet
    configuration's bytes then (what a kubelet started at that moment reads)."""

    def __init__(self, state_path: str, config_path: str, running: bool = False, fail: Optional[str] = None) -> None:
        self.state_path = state_path
        self.config_path = config_path
        self.running = running
        self.fail = fail  # a state ("stopped", "started") systemd refuses, with this text
        self.calls: List[Dict[str, Any]] = []

    def __call__(self, args: Dict[str, Any]) -> Dict[str, Any]:
        state = args["state"]
        if self.fail is not None and state == self.fail:
            verb = {"stopped": "stop", "started": "start", "restarted": "restart"}[state]
            return {"failed": True, "changed": False, "msg": "Unable to %s service %s: timed out" % (verb, args["name"])}
        was = self.running
        self.running = state != "stopped"
        self.calls.append({"state": state, "checkpoint": read_or_none(self.state_path),
                           "config": read_or_none(self.config_path)})
        return {"changed": was != self.running or state == "restarted", "name": args["name"], "state": state}


def read_or_none(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


class Runner:
    """Runs tasks against this process's node. ``writes`` records each file a task wrote, with whether the kubelet
    was running then."""

    def __init__(self, variables: Dict[str, Any], systemd: Systemd) -> None:
        self.variables = dict(variables, omit=OMIT)
        self.systemd = systemd
        self.writes: List[Dict[str, Any]] = []
        self.ran: List[str] = []
        self.commands: List[List[str]] = []
        self.modules: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
            "ansible.builtin.systemd_service": systemd,
            "ansible.builtin.copy": self._copy,
            "ansible.builtin.slurp": self._slurp,
            "ansible.builtin.command": self._command,
            "ansible.builtin.file": self._file,
            "kubecpu.cpu_manager.cpu_manager_checkpoint": self._collection_module("cpu_manager_checkpoint"),
        }

    def templar(self, extra: Optional[Dict[str, Any]] = None) -> Templar:
        return Templar(loader=DataLoader(), variables=dict(self.variables, **(extra or {})))

    def run(self, tasks: List[Dict[str, Any]]) -> None:
        """The tasks in order; TaskFailed at the first that fails (an ``ansible.builtin.fail`` included)."""
        for task in tasks:
            self.run_one(task)

    def run_one(self, task: Dict[str, Any]) -> Dict[str, Any]:
        name = str(task.get("name", ""))
        templar = self.templar(task.get("vars"))
        conditions = task.get("when", [])
        for condition in conditions if isinstance(conditions, list) else [conditions]:
            if not templar.evaluate_conditional(condition):
                result: Dict[str, Any] = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
                self._register(task, result)
                return result
        self.ran.append(name)
        (module,) = [key for key in task if key not in TASK_KEYWORDS]
        args = task[module]
        if module == "ansible.builtin.set_fact":
            for key, value in args.items():
                self.variables[key] = templar.template(value)
            return {"changed": False}
        if module == "ansible.builtin.fail":
            raise TaskFailed(name, {"failed": True, "msg": templar.template(args["msg"])})
        if module not in self.modules:
            raise AssertionError("no stand-in for %s (task %r)" % (module, name))
        rendered = {key: value for key, value in templar.template(args).items() if value != OMIT}
        result = self.modules[module](rendered)
        if task.get("failed_when") is False:
            result["failed"] = result["failed_when_result"] = False  # as ansible-core does: the failure is gone
        self._register(task, result)
        if result.get("failed") and task.get("ignore_errors") is not True:
            raise TaskFailed(name, result)
        return result

    def _register(self, task: Dict[str, Any], result: Dict[str, Any]) -> None:
        if task.get("register"):
            self.variables[task["register"]] = result

    def _wrote(self, path: str) -> None:
        self.writes.append({"path": path, "kubelet_running": self.systemd.running})

    def _copy(self, args: Dict[str, Any]) -> Dict[str, Any]:
        assert args.get("remote_src") is True, args
        try:
            with open(args["src"], "rb") as source:
                data = source.read()
        except OSError as exc:
            return {"failed": True, "msg": "Source %s not found: %s" % (args["src"], exc)}
        changed = read_or_none(args["dest"]) != data
        if changed:
            temporary = args["dest"] + ".ansible_tmp"
            with open(temporary, "wb") as handle:
                handle.write(data)
            shutil.move(temporary, args["dest"])  # as the module's atomic_move
            self._wrote(args["dest"])
        return {"changed": changed, "dest": args["dest"], "src": args["src"]}

    def _command(self, args: Dict[str, Any]) -> Dict[str, Any]:
        """A command (the drain and uncordon commands, on the controller): recorded in ``commands``, exit 0."""
        self.commands.append(list(args["argv"]))
        return {"changed": True, "rc": 0, "stdout": "", "stderr": "", "cmd": list(args["argv"])}

    @staticmethod
    def _file(args: Dict[str, Any]) -> Dict[str, Any]:
        """``state: absent`` only (the drain's note removed): the path gone."""
        assert args.get("state") == "absent", args
        existed = os.path.lexists(args["path"])
        if existed:
            os.unlink(args["path"])
        return {"changed": existed, "path": args["path"], "state": "absent"}

    @staticmethod
    def _slurp(args: Dict[str, Any]) -> Dict[str, Any]:
        data = read_or_none(args["src"])
        if data is None:
            return {"failed": True, "msg": "file not found: %s" % args["src"]}
        return {"changed": False, "content": base64.b64encode(data).decode("ascii"), "encoding": "base64",
                "source": args["src"]}

    def _collection_module(self, name: str) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
        module = importlib.import_module("ansible_collections.kubecpu.cpu_manager.plugins.modules." + name)

        def run(args: Dict[str, Any]) -> Dict[str, Any]:
            before = read_or_none(args["state_path"]) if "state_path" in args else None
            result = run_module(module, args)
            if "state_path" in args and read_or_none(args["state_path"]) != before:
                self._wrote(args["state_path"])
            return result

        return run


def run_module(module: Any, args: Dict[str, Any], check_mode: bool = False) -> Dict[str, Any]:
    """One module run in this process: its result as the controller receives it (``rc`` its exit code)."""
    out = io.StringIO()
    with patch_module_args(dict(args, _ansible_check_mode=check_mode)), contextlib.redirect_stdout(out), \
            mock.patch.object(ansible_internal, "is_controller", False):
        try:
            module.main()
            code = 0
        except SystemExit as exc:
            code = exc.code
    result = json.loads(out.getvalue())
    result["rc"] = code
    return result
