#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_allocate
short_description: Give a container exclusive CPUs with the kubelet's static policy, or release them
version_added: 0.2.0
description:
  - Allocates exclusive CPUs to one running container exactly as the kubelet CPU manager's static policy
    would (same CPU choices, same C(cpu_manager_state) checkpoint), records them in the state file and
    applies them through the container runtime (crictl or CRI over gRPC).
  - Containers in the shared pool are moved off the CPUs that became exclusive in the same run.
  - The container is found by O(container_id), or by O(pod_uid) and O(container_name). Its CPU request comes
    from the runtime (the pod's cgroup parent gives the QoS class, shares and quota the request) or from
    O(cpus).
  - Meant for nodes whose kubelet runs with C(cpuManagerPolicy=none) (or no kubelet); the module refuses to
    act when the kubelet's checkpoint says C(static), unless O(force=true).
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager
attributes:
  check_mode:
    support: full
    description: Reports the allocation and the runtime updates it would make; nothing is written or changed.
  diff_mode:
    support: full
    description: Shows the state's shared pool and assignments before and after.
  idempotent:
    support: full
    description: A second run with the same arguments reports RV(ignore:changed=false).
options:
  container_id:
    description: The container's runtime ID (a unique prefix of at least 6 characters is accepted).
    type: str
  pod_uid:
    description: The pod's UID (label C(io.kubernetes.pod.uid)); with O(container_name).
    type: str
  container_name:
    description: The container's name in the pod (label C(io.kubernetes.container.name)); with O(pod_uid).
    type: str
  cpus:
    description:
      - Exclusive CPUs to give, overriding what the runtime reports; the container is then treated as
        Guaranteed with this integral request.
      - Needed to allocate for a container the runtime does not run (with O(apply=false)).
    type: int
  state:
    description: V(present) allocates, V(absent) releases the container's exclusive CPUs.
    type: str
    choices: [present, absent]
    default: present
  apply:
    description:
      - Push the cpusets to the runtime. With V(false) only the state file is updated (the next reconcile
        pass, or the agent, applies it).
    type: bool
    default: true
  numa_affinity:
    description: Preferred NUMA nodes (a topology hint); CPUs are taken there first.
    type: list
    elements: int
  near_device:
    description:
      - A PCI address (C(0000:3b:00.0)); its C(/sys/bus/pci/devices/ADDR/numa_node) becomes the NUMA
        preference, for NIC- or accelerator-local CPUs. Ignored when O(numa_affinity) is given.
    type: str
notes:
  - CRI does not mark init containers; one that exited successfully before a sibling was created is treated
    as an init container, whose CPUs the pod's app containers may reuse (as the kubelet does).
seealso:
  - module: kubecpu.cpu_manager.cpu_manager_reconcile
  - module: kubecpu.cpu_manager.cpu_manager_info
"""

EXAMPLES = r"""
- name: Pin a latency-sensitive container (its Guaranteed integral request decides how many CPUs)
  kubecpu.cpu_manager.cpu_manager_allocate:
    container_id: e56bd07ded86
    num_reserved: 2

- name: Give the pod's packet-forwarding sidecar 4 CPUs next to its NIC, with no CFS quota
  kubecpu.cpu_manager.cpu_manager_allocate:
    pod_uid: a06b0ffe-e387-47dc-90e2-339fa3fc242a
    container_name: sidecar
    cpus: 4
    near_device: "0000:3b:00.0"
    reserved_cpus: "0,64"
    policy_options:
      full-pcpus-only: true
    cpu_quota: unlimited
    runtime: cri
    runtime_endpoint: unix:///run/containerd/containerd.sock

- name: Release them again
  kubecpu.cpu_manager.cpu_manager_allocate:
    pod_uid: a06b0ffe-e387-47dc-90e2-339fa3fc242a
    container_name: sidecar
    state: absent
    reserved_cpus: "0,64"
"""

RETURN = r"""
cpus:
  description: The container's CPUs after the run (its exclusive set, or the shared pool).
  returned: state=present
  type: str
  sample: "2-3,66-67"
exclusive:
  description: Whether O(cpus) are exclusive to this container.
  returned: state=present
  type: bool
released:
  description: CPUs returned to the shared pool.
  returned: state=absent
  type: str
  sample: "2-3"
container_id:
  description: The runtime ID of the container (empty when it is not running).
  returned: always
  type: str
pod_uid:
  description: The pod's UID.
  returned: always
  type: str
container_name:
  description: The container's name.
  returned: always
  type: str
actions:
  description:
    - Runtime and state actions taken (or, in check mode or with O(apply=false), planned), in order.
    - Each has C(action) (allocate, update, release, quota), C(container_id), C(pod), C(pod_uid),
      C(container), C(cpus), C(reason), and where set C(mems), C(quota), C(cgroup).
  returned: always
  type: list
  elements: dict
errors:
  description: Runtime updates that failed (the state keeps the allocation; the next pass retries).
  returned: always
  type: list
  elements: dict
state_file:
  description: The checkpoint that was read and written.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    plan_result, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import (
    STATE_ARGS, node_config, numa_affinity)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager


def allocate(module: AnsibleModule) -> dict:
    params = module.params
    if params["cpus"] is not None and params["cpus"] < 0:  # every parameter is checked before anything is opened
        raise ConfigError("cpus must not be negative, got %d" % params["cpus"])
    config = node_config(params)
    affinity = numa_affinity(params) if params["state"] == "present" else None
    apply = not module.check_mode
    push = apply and params["apply"]
    target = {"container_id": params["container_id"], "pod_uid": params["pod_uid"],
              "container": params["container_name"]}
    with build_manager(config, with_runtime=True) as manager:
        if params["state"] == "present":
            plan = manager.allocate_container(**target, cpus=params["cpus"], numa_affinity=affinity,
                                              apply=apply, push=push, require_runtime_container=params["apply"])
        else:
            plan = manager.release_container(**target, apply=apply, push=push)
    result = dict(plan.result, state_file=manager.store.path)
    result.update(plan_result(module, plan.to_dict(), ["changed", "actions", "errors"]))
    result["container_name"] = result.pop("container", params["container_name"])
    return result


def main() -> None:
    spec = dict(STATE_ARGS, container_id={"type": "str"}, pod_uid={"type": "str"}, container_name={"type": "str"},
                cpus={"type": "int"}, state={"type": "str", "choices": ["present", "absent"], "default": "present"},
                apply={"type": "bool", "default": True}, numa_affinity={"type": "list", "elements": "int"},
                near_device={"type": "str"})
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_one_of=[("container_id", "pod_uid")],
                           mutually_exclusive=[("container_id", "pod_uid")],
                           required_together=[("pod_uid", "container_name")])
    run_module(module, allocate)


if __name__ == "__main__":
    main()
