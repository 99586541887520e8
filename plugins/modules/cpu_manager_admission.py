#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_admission
short_description: Which running pods a Topology Manager policy would admit or reject on this node
version_added: 0.3.0
description:
  - Answers "what if this node used Topology Manager policy O(topology_manager_policy)" before anyone switches it.
    Every running Guaranteed container with an integer CPU request is admitted afresh, in the order the containers
    started, as the kubelet re-admits them after its checkpoint is removed - the CPU manager's topology hints merged
    under the policy, then the CPUs chosen inside the merged NUMA affinity - and the module reports which would be
    admitted (and on which CPUs and NUMA nodes they would land) and which rejected, with the kubelet's reason.
  - Reads the runtime and the topology; the state file and the containers are left as they are.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.read_only
  - kubecpu.cpu_manager.cpu_manager
"""

EXAMPLES = r"""
- name: Would single-numa-node reject any running pod here?
  kubecpu.cpu_manager.cpu_manager_admission:
    topology_manager_policy: single-numa-node
    num_reserved: 2
  register: admission

- name: Name the pods it would reject
  ansible.builtin.debug:
    msg: "{{ admission.containers | rejectattr('admitted') | map(attribute='pod') | list }}"
"""

RETURN = r"""
topology_manager_policy:
  description: The policy the answer is for.
  returned: success
  type: str
topology_manager_scope:
  description: The scope the answer is for.
  returned: success
  type: str
containers:
  description:
    - One entry per running Guaranteed container with an integer CPU request, with C(pod), C(pod_uid),
      C(container), C(container_id), C(admitted), C(cpus) and C(numa_nodes) (where an admitted container's CPUs
      would land), and for a rejected one C(reason) and C(topology) (true when the Topology Manager refused it,
      false when there were not enough CPUs at all).
  returned: success
  type: list
  elements: dict
admitted:
  description: How many containers would be admitted.
  returned: success
  type: int
rejected:
  description: How many containers would be rejected.
  returned: success
  type: int
skipped:
  description: Containers that vanished while the runtime was read.
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.what_if import readmission


def admission(module: AnsibleModule) -> dict:
    with build_manager(node_config(module.params, read_only=True), with_runtime=True, checks=False) as manager:
        result = readmission(manager)
    result["changed"] = False
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=dict(STATE_ARGS), supports_check_mode=True)
    run_module(module, admission)


if __name__ == "__main__":
    main()
