# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A checkpoint file as an operator changes it: validated as the kubelet validates it at start, replaced by a given
file (a no-drain rewrite) or by one rebuilt from what runs, or reset; the file it replaces always kept beside it
(``<file>.<action>-<UTC time>``), the new one written atomically and durably under the lock, and only after it
validated. The kubelet's own checkpoint is written only when the caller says the kubelet is stopped.

Then, optionally, the running containers' cpusets pushed to what the file gives them (the kubelet's reconcile,
done at once) through the runtime.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional

from ..errors import (ChangedThenFailed, CheckpointError, ConfigError, RestoreFailure, RuntimeUnavailableError,
                      StateError, StoreError)
from ..kubelet.checkpoint_formats import read, write
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.config import NodeConfig
from ..node.factory import build_manager, build_policy, load_topology
from ..node.plan import Plan
from ..node.state_store import StateStore
from ..node.what_if import Running, judge_for
from .rebuild import rebuild_node

ACTIONS = ("validate", "write", "rebuild", "reset")


class CheckpointFile:
    """The checkpoint at ``config.state_path`` under the configuration it must fit (``config``'s policy)."""

    def __init__(self, config: NodeConfig, *, kubelet_stopped: bool = False,
                 topology: Optional[Topology] = None) -> None:
        self.config = config
        self.topology = topology or load_topology(config)
        self.policy = build_policy(self.topology, config.policy, config.reserved_cpus, config.num_reserved,
                                   config.policy_options, kubelet_minor=config.kubelet.minor)
        self.store = StateStore(config.state_path, self.policy.name, read_only=config.read_only or None,
                                kubelet_stopped=kubelet_stopped, kubelet=config.kubelet)

    def validated(self, data: bytes) -> CPUState:
        """The state of ``data`` if the kubelet would start with it; else CheckpointError or StateError with the
        kubelet's text."""
        try:
            state = read(data, self.policy.name, self.store.kubelet).state
        except RestoreFailure as exc:
            raise CheckpointError(self.store.path, str(exc)) from None
        try:
            self.policy.start(state.copy())
        except StateError as exc:
            raise StateError("%s does not fit this node and configuration: %s" % (self.store.path, exc)) from None
        return state

    def validate(self) -> Dict[str, Any]:
        data = self.store.read_bytes()
        if data is None:
            return {"changed": False, "exists": False, "valid": True, "error": None, "state": None}
        try:
            state = self.validated(data)
        except (CheckpointError, StateError) as exc:
            return {"changed": False, "exists": True, "valid": False, "error": str(exc), "state": None}
        return {"changed": False, "exists": True, "valid": True, "error": None, "state": state.to_dict()}

    def run(self, action: str, *, content: Optional[str] = None, push: bool = False, apply: bool = True,
            planned_from: Optional[str] = None) -> Dict[str, Any]:
        """``action`` (``ACTIONS``); ``apply`` False: what would be written and pushed, nothing changed.
        ``planned_from``: the fingerprint (``state_store.fingerprint``) of the file ``content`` was planned from;
        the write refuses (StaleCheckpointError) when the file is no longer that one.

        Once the file on disk has changed, any error until the end (the push's, the store's, an unexpected one) is
        raised as ChangedThenFailed carrying the result so far (``kept``, ``written``, ``pushed``): the caller can
        put the previous file back."""
        if action not in ACTIONS:
            raise ConfigError("action must be one of %s, got %r" % (", ".join(ACTIONS), action))
        if action == "validate":
            return self.validate()
        if apply and self.store.read_only:
            raise StoreError("%s is read-only: the kubelet's own checkpoint is changed only with the kubelet stopped "
                             "(say so: kubelet_stopped, --kubelet-stopped)" % self.store.path)
        errors: List[Dict[str, Any]] = []
        given = None
        if action == "write":
            if content is None:
                raise ConfigError("action write needs the checkpoint's content")
            given = content.encode("utf-8")
            state: Optional[CPUState] = self.validated(given)
        elif action == "rebuild":
            with build_manager(self.config, with_runtime=True, topology=self.topology, checks=False) as manager:
                rebuilt = rebuild_node(manager)
            state, errors = rebuilt.after, rebuilt.errors
        else:
            state = None  # reset: the file moves aside and the kubelet starts from a fresh one
        change = Change(self.store.path, errors)
        with change.carried() as result:
            self._replace(action, state, change, apply=apply, planned_from=planned_from, given=given)
            if push and state is not None:
                self._push(state, apply, result)
        return result

    def _replace(self, action: str, state: Optional[CPUState], change: Change, *, apply: bool,
                 planned_from: Optional[str], given: Optional[bytes]) -> None:
        """Write ``state`` (None: move the file aside), recording in ``change`` what was done as it is done."""
        data = None if state is None else write(state, self.store.kubelet)
        if data is not None:
            self.validated(data)  # what the kubelet would refuse is never written (a rebuild included)
        current = self.store.expect(planned_from)  # a check says so too
        if given is not None and current == given:
            data = current  # already the file given, byte for byte: kept as it is, not re-encoded (a V2 file stays V2)
        changed = current != data if data is not None else current is not None
        if changed and state is not None:  # nor what the restarted kubelet would refuse at its re-admission of the
            # pods that run (the runtime's list; a runtime that cannot list: the pods the file itself shows)
            pods = Running(self.config, self.topology).pods()
            judge_for(self.config, self.policy, self.topology, pods).check(state, self.store.path)
        change.result.update(changed=changed, written=None if data is None else data.decode("utf-8"),
                             state=None if state is None else state.to_dict())
        if apply and changed:
            with self.store.locked():
                self.store.expect(planned_from)  # again under the lock, right before the write
                change.kept(self.store.reset(action, keep=state is not None))
                if state is not None:
                    self.store.save(state)
                    change.wrote()

    def _push(self, state: CPUState, apply: bool, result: Dict[str, Any]) -> None:
        """The updates, in ``result["pushed"]``; ``incomplete`` until the push ends (an error leaves it so: any
        container may be on its old or its new CPUs). A runtime that cannot be reached is reported (``unreachable``),
        not an error: the file is written, and the kubelet's reconcile applies it within its period."""
        pushed: Dict[str, Any] = {"actions": [], "errors": [], "skipped": [], "unreachable": False,
                                  "incomplete": True}
        result["pushed"] = pushed
        if not state.default:  # the none policy's file (or a fresh one): every container on every CPU
            state = CPUState(state.policy_name, self.topology.all_cpus)
        try:
            with build_manager(self.config, with_runtime=True, topology=self.topology, checks=False) as manager:
                plan: Plan = manager.push(state, apply=apply)
        except RuntimeUnavailableError as exc:
            pushed.update(errors=[{"error": str(exc), "kind": "runtime"}], unreachable=True)
            return
        except Exception as exc:
            pushed["errors"].append({"error": str(exc), "kind": "push"})
            raise
        doc = plan.to_dict()
        pushed.update(actions=doc["actions"], errors=doc["errors"], skipped=doc["skipped"], incomplete=False)


class Change:
    """A run's result as it builds up. Once the file on disk has changed (moved aside, or written where there was
    none), an error until the run ends carries the result (ChangedThenFailed): ``kept`` says where the previous file
    is, for the rollback."""

    def __init__(self, path: str, errors: List[Dict[str, Any]]) -> None:
        self.path = path
        self.result: Dict[str, Any] = {"changed": False, "written": None, "kept": None, "state": None,
                                       "errors": errors}
        self.touched = False

    def kept(self, aside: Optional[str]) -> None:
        """The previous file is at ``aside`` (None: there was none)."""
        self.result["kept"] = aside
        self.touched = self.touched or aside is not None

    def wrote(self) -> None:
        self.touched = True

    @contextlib.contextmanager
    def carried(self) -> Iterator[Dict[str, Any]]:
        try:
            yield self.result
        except Exception as exc:  # whatever it is: after the change the caller needs the result to undo it
            if not self.touched:
                raise
            kept = self.result["kept"]
            raise ChangedThenFailed(exc, self.result, "after the change of %s: %s" % (
                self.path, "the previous file is kept as %s" % kept if kept else "there was no file before")) from exc
