# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The thin adapter between AnsibleModule and the core: the topology options, plan results and error handling.

It imports no more of the core than ``errors`` and ``paths``, so a module that only reads the topology ships only
those; the modules that manage a node add ``module_node``. The only file under module_utils that imports Ansible;
``bin/kubecpu`` imports neither (the agent's package leaves both out).
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Dict, Iterable, List

from ansible.module_utils.basic import AnsibleModule

from ..errors import ChangedThenFailed, ConfigError, KubecpuError
from ..paths import is_absolute_path

TOPOLOGY_ARGS: Dict[str, Dict[str, Any]] = {  # doc fragment kubecpu.cpu_manager.cpu_manager.topology
    "sysfs_root": {"type": "path", "default": "/"},
    "topology_path": {"type": "path"},
}


def plan_result(module: AnsibleModule, doc: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
    """The keys of a plan's document a module returns, its diff (state before and after), errors as warnings."""
    result = {key: doc[key] for key in keys}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = {"before": doc["state_before"], "after": doc["state_after"]}
    for error in doc["errors"]:
        module.warn("%s/%s: %s" % (error.get("pod", ""), error.get("container", ""), error["error"]))
    return result


def absolute_paths(module: AnsibleModule, names: Iterable[str]) -> None:
    """Refuse, before any side effect, a path option of a module that writes which is set and not absolute: the
    module runs in a directory of Ansible's choosing, where a relative path names nothing the operator meant."""
    for name in names:
        value = module.params[name]
        if value and not is_absolute_path(value):
            raise ConfigError("%s must be an absolute path, got %r" % (name, value))


def run_module(module: AnsibleModule, body: Callable[[AnsibleModule], Dict[str, Any]]) -> None:
    """Run ``body``; domain errors become fail_json with their message, anything else too (no traceback). An error
    after a change (ChangedThenFailed) fails with what was changed (its result: a rollback reads it) and its cause's
    type."""
    try:
        module.exit_json(**body(module))
    except ChangedThenFailed as exc:
        unexpected = {} if isinstance(exc.cause, KubecpuError) else {"exception": traceback.format_exc()}
        module.fail_json(**dict(exc.done, msg=str(exc), error_type=exc.kind, **unexpected))
    except KubecpuError as exc:
        module.fail_json(msg=str(exc), error_type=type(exc).__name__)
    except Exception as exc:  # pylint: disable=broad-except  # a module never dies with a traceback
        module.fail_json(msg="unexpected %s: %s" % (type(exc).__name__, exc), exception=traceback.format_exc())
