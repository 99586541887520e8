#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_reconcile
short_description: One reconcile pass of the node's CPU manager against the container runtime
version_added: 0.2.0
description:
  - Does what the kubelet's CPU manager reconcile loop does, and more, in one pass.
  - Allocates exclusive CPUs (kubelet-exact) to running Guaranteed containers with an integral CPU request
    that have none yet; init containers' CPUs are reused by their pod's app containers as the kubelet does.
  - Moves every shared-pool container to the current shared pool when it changed.
  - Re-applies exclusive sets where cgroupfs drifted (an external C(crictl update), a runtime restart).
  - Releases the CPUs of containers and pods that are gone (leaked CPUs).
  - Pins a restarted container (new ID, same pod and name) to its old CPUs.
  - Steady state costs one list call, no inspection and no update; what a container is gets learned once per
    container ID and cached beside the state file.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager
attributes:
  check_mode:
    support: full
    description: Reports the plan (allocations, updates, releases); nothing is written or changed.
  diff_mode:
    support: full
    description: Shows the state before and after the pass.
  idempotent:
    support: full
    description: A second pass on an unchanged node reports RV(ignore:changed=false) and makes no runtime update.
options: {}
notes:
  - Running this module while the agent (C(bin/kubecpu reconcile --loop)) runs is safe; both lock the state file.
  - Per-container problems (not enough free CPUs, a failed update) are reported in RV(errors) and as warnings;
    the pass goes on. The module fails only when the pass cannot run (runtime down, state file unusable).
seealso:
  - module: kubecpu.cpu_manager.cpu_manager_allocate
  - module: kubecpu.cpu_manager.cpu_manager_info
"""

EXAMPLES = r"""
- name: Reconcile CPU pinning on every node (crictl, two reserved CPUs)
  kubecpu.cpu_manager.cpu_manager_reconcile:
    num_reserved: 2

- name: Show what a pass would do, over CRI directly, with full physical cores only
  kubecpu.cpu_manager.cpu_manager_reconcile:
    runtime: cri
    runtime_endpoint: unix:///run/containerd/containerd.sock
    reserved_cpus: "0,64"
    policy_options:
      full-pcpus-only: "true"
  check_mode: true
  register: plan

- name: Print the planned actions
  ansible.builtin.debug:
    var: plan.actions
"""

RETURN = r"""
actions:
  description:
    - What the pass did (or would do in check mode), in order. Each has C(action) (allocate, update, release,
      quota), C(container_id), C(pod), C(pod_uid), C(container), C(cpus), C(reason), and where set C(mems),
      C(quota), C(cgroup).
  returned: always
  type: list
  elements: dict
  sample: [{"action": "allocate", "container_id": "e56bd07ded86", "pod": "prod/web", "container": "main",
            "cpus": "1", "reason": "Guaranteed integral request"}]
errors:
  description: Per-container problems (C(kind) allocation or update, C(error) the message).
  returned: always
  type: list
  elements: dict
skipped:
  description: Containers left alone because they disappeared in the middle of the pass.
  returned: always
  type: list
  elements: dict
counts:
  description: Containers seen, running, inspected; actions by kind; errors.
  returned: always
  type: dict
  sample: {"containers": 8, "running": 6, "inspected": 0, "allocate": 0, "update": 0, "release": 0, "errors": 0}
runtime_calls:
  description: Runtime calls the pass made, by kind (list, inspect, update).
  returned: always
  type: dict
  sample: {"list": 1}
state_file:
  description: The checkpoint that was read and written.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    plan_result, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager


def reconcile(module: AnsibleModule) -> dict:
    with build_manager(node_config(module.params), with_runtime=True) as manager:
        plan = manager.reconcile(apply=not module.check_mode)
    keys = ["changed", "actions", "errors", "skipped", "counts", "runtime_calls"]
    result = plan_result(module, plan.to_dict(), keys)
    result["state_file"] = manager.store.path
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=dict(STATE_ARGS), supports_check_mode=True)
    run_module(module, reconcile)


if __name__ == "__main__":
    main()
