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

from typing import Any, Dict, List, Optional

from ..errors import CheckpointError, ConfigError, RestoreFailure, RuntimeUnavailableError, StateError, StoreError
from ..kubelet.checkpoint_formats import read, write
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.config import NodeConfig
from ..node.factory import build_manager, build_policy, load_topology
from ..node.plan import Plan
from ..node.state_store import StateStore
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
        the write refuses (StaleCheckpointError) when the file is no longer that one."""
        if action not in ACTIONS:
            raise ConfigError("action must be one of %s, got %r" % (", ".join(ACTIONS), action))
        if action == "validate":
            return self.validate()
        if apply and self.store.read_only:
            raise StoreError("%s is read-only: the kubelet's own checkpoint is changed only with the kubelet stopped "
                             "(say so: kubelet_stopped, --kubelet-stopped)" % self.store.path)
        errors: List[Dict[str, Any]] = []
        if action == "write":
            if content is None:
                raise ConfigError("action write needs the checkpoint's content")
            state: Optional[CPUState] = self.validated(content.encode("utf-8"))
        elif action == "rebuild":
            with build_manager(self.config, with_runtime=True, topology=self.topology, checks=False) as manager:
                rebuilt = rebuild_node(manager)
            state, errors = rebuilt.after, rebuilt.errors
        else:
            state = None  # reset: the file moves aside and the kubelet starts from a fresh one
        result = self._replace(action, state, apply, planned_from)
        result["errors"] = errors
        if push and state is not None:
            result["pushed"] = self._push(state, apply)
        return result

    def _replace(self, action: str, state: Optional[CPUState], apply: bool,
                 planned_from: Optional[str] = None) -> Dict[str, Any]:
        data = None if state is None else write(state, self.store.kubelet)
        if data is not None:
            self.validated(data)  # what the kubelet would refuse is never written (a rebuild included)
        current = self.store.expect(planned_from)  # a check says so too
        changed = current != data if data is not None else current is not None
        kept = None
        if apply and changed:
            with self.store.locked():
                self.store.expect(planned_from)  # again under the lock, right before the write
                kept = self.store.reset(action, keep=state is not None)
                if state is not None:
                    self.store.save(state)
        return {"changed": changed, "written": None if data is None else data.decode("utf-8"), "kept": kept,
                "state": None if state is None else state.to_dict()}

    def _push(self, state: CPUState, apply: bool) -> Dict[str, Any]:
        """The updates; a runtime that cannot be reached is reported (``unreachable``), not an error: the file is
        written, and the kubelet's reconcile applies it within its period."""
        if not state.default:  # the none policy's file (or a fresh one): every container on every CPU
            state = CPUState(state.policy_name, self.topology.all_cpus)
        try:
            with build_manager(self.config, with_runtime=True, topology=self.topology, checks=False) as manager:
                plan: Plan = manager.push(state, apply=apply)
        except RuntimeUnavailableError as exc:
            return {"actions": [], "errors": [{"error": str(exc), "kind": "runtime"}], "skipped": [],
                    "unreachable": True}
        doc = plan.to_dict()
        return {"actions": doc["actions"], "errors": doc["errors"], "skipped": doc["skipped"], "unreachable": False}
