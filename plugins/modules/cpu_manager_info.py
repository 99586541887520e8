#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_info
short_description: Which container owns which CPU, drift against cgroupfs, CFS throttling, free cores
version_added: 0.2.0
description:
  - Reads the CPU manager state (never writes it) and joins it with the container runtime and cgroupfs.
  - Returns the assignments with pod and container names, the shared pool, free whole cores per NUMA node,
    containers whose cpuset in cgroupfs differs from what the state says (drift), and the CFS throttling
    counters (C(cpu.stat)) of every running container.
  - Works on the kubelet's own checkpoint too (O(state_path=/var/lib/kubelet/cpu_manager_state)).
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.read_only
  - kubecpu.cpu_manager.cpu_manager
options:
  query_runtime:
    description:
      - Ask the container runtime for names, states and cgroups. When it cannot be reached the module still
        returns the state, with a warning.
    type: bool
    default: true
  policy_from_checkpoint:
    description:
      - Take the policy from the checkpoint itself (its C(policyName)) instead of O(policy), for a read-only view
        of a node whose configuration is not known (a kubelet node whose configuration file cannot be read). A
        missing checkpoint reads as policy V(none). RV(policy_source) says where the policy came from.
    type: bool
    default: false
    version_added: 0.4.0
"""

EXAMPLES = r"""
- name: What is pinned where on this node
  kubecpu.cpu_manager.cpu_manager_info:
    num_reserved: 2
  register: cpu

- name: Fail when a pinned container lost its CPUs
  ansible.builtin.assert:
    that: cpu.drift | length == 0
    fail_msg: "{{ cpu.drift }}"

- name: Read the kubelet's own checkpoint (static policy nodes)
  kubecpu.cpu_manager.cpu_manager_info:
    state_path: /var/lib/kubelet/cpu_manager_state
    reserved_cpus: "0,1"
    query_runtime: false
"""

RETURN = r"""
policy:
  description: The policy the state was read with.
  returned: always
  type: str
policy_source:
  description: Where the policy came from, V(configured) (O(policy)) or V(checkpoint) (O(policy_from_checkpoint)).
  returned: always
  type: str
  version_added: 0.4.0
state:
  description: The checkpoint (C(policyName), C(defaultCpuSet), C(entries)).
  returned: always
  type: dict
reserved_cpus:
  description: The reserved CPUs.
  returned: always
  type: str
shared_pool:
  description: The shared (default) CPU set.
  returned: always
  type: str
pod_entries:
  description:
    - Pod-level exclusive CPUs (the C(podEntries) of a kubelet 1.36+ checkpoint read with O(kubelet_version)), each
      with C(pod_uid) and C(cpus); counted as taken everywhere (free cores, headroom, the CPU map).
  returned: always
  type: list
  elements: dict
  version_added: 0.4.0
exclusive_cpus:
  description: All exclusively assigned CPUs (pod-level ones included).
  returned: always
  type: str
free_whole_cores_per_numa:
  description: Per NUMA node, cores all of whose CPUs are free (shared pool minus reserved).
  returned: always
  type: dict
  sample: {"0": 30, "1": 31}
headroom:
  description:
    - What the node can still admit from its free CPUs (shared pool minus reserved), as
      M(kubecpu.cpu_manager.cpu_manager_defrag) raises it.
    - C(free_cpus), C(free_whole_cores), and the largest exclusive request in CPUs per alignment
      C(largest_full_pcpus_only) (whole cores anywhere), C(largest_single_numa), C(largest_single_socket) and
      C(largest_single_numa_whole_cores) (whole cores on one NUMA node).
  returned: always
  type: dict
  version_added: 0.4.0
  sample: {"free_cpus": 4, "free_whole_cores": 1, "largest_full_pcpus_only": 2, "largest_single_numa": 3,
           "largest_single_socket": 3, "largest_single_numa_whole_cores": 2}
housekeeping:
  description:
    - What else may run on the exclusive CPUs (docs/HOUSEKEEPING.md).
    - C(interrupts) (how many /proc/irq lists), C(interrupts_on_exclusive) (those whose C(smp_affinity_list) names an
      exclusive CPU), C(interrupts_kept_off), C(interrupts_refused) (managed interrupts the kernel refused to move,
      from the interrupt record), C(default_affinity).
    - C(irqbalance) (null when none runs) with C(pid), C(banned) (what it says it bans) and C(agrees) (it bans every
      exclusive CPU).
    - C(daemons), the CPUs of C(system.slice), C(user.slice), C(init.scope) and C(kubepods.slice) (cgroup v2's
      C(cpuset.cpus.effective)).
    - C(power), what the C(cpu_power) option has set (its record beside the state); C(cpus), the CPUs with a
      setting, and C(settings), per file its C(cpus), C(pod), the value C(set), the value C(now) and the C(original)
      it gets back (added in 0.8.0).
  returned: always
  type: dict
  version_added: 0.5.0
  sample: {"interrupts": 33, "interrupts_on_exclusive": [31, 32], "interrupts_kept_off": 31,
           "interrupts_refused": [31, 32], "default_affinity": "0-1,4-7",
           "irqbalance": {"pid": 840, "banned": "2-3", "agrees": true},
           "daemons": {"system.slice": "0-1", "user.slice": "0-1", "init.scope": "0-1", "kubepods.slice": "0-7"},
           "power": {"cpus": "2-3", "settings": [{"file": "cpu2/power/pm_qos_resume_latency_us", "cpus": "2",
                                                  "pod": "6d1f0c2e", "set": "n/a", "now": "n/a", "original": "0"}]}}
assignments:
  description: Each exclusive assignment with C(pod_uid), C(container), C(cpus), C(numa_nodes), and from the
    runtime C(pod), C(container_id), C(running), C(cgroup_cpus), C(drift).
  returned: always
  type: list
  elements: dict
containers:
  description: Every Kubernetes container the runtime knows (newest attempt per name) with C(qos),
    C(cpu_request_milli), C(exclusive), C(cpus) (what it should have), C(cgroup_cpus), C(drift),
    C(cpu_stat) (C(nr_periods), C(nr_throttled), C(throttled_usec)) and C(cfs_quota).
  returned: always
  type: list
  elements: dict
drift:
  description: Running containers whose cgroupfs cpuset differs from the state (C(want), C(have)).
  returned: always
  type: list
  elements: dict
runtime:
  description: The runtime backend that answered, or null.
  returned: always
  type: str
topology:
  description: CPU, core, socket, NUMA node and uncore cache counts.
  returned: always
  type: dict
cpus:
  description:
    - One entry per online CPU, the data of a core map, with C(cpu), C(core), C(socket), C(numa), C(uncore),
      C(kind) (V(exclusive), V(reserved), V(system) for the reserved CPUs of the system partition (O(system_partition))
      or V(shared)) and for exclusive CPUs C(owner) (the pod name where the runtime answered, else the pod UID, then
      the container), C(pod), C(pod_uid) and C(container).
  returned: always
  type: list
  elements: dict
  version_added: 0.3.0
system_partition:
  description:
    - With O(system_partition), its CPUs (C(cpus)) and who is a system pod (C(namespaces), C(priority_classes)); null
      when off. Each container of C(containers) says whether it runs there (C(system)).
  returned: always
  type: dict
  version_added: 0.8.0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.info import node_info
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import (
    build_manager, build_runtime, recorded_policy)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.partition import partition_of


def info(module: AnsibleModule) -> dict:
    config = node_config(module.params, read_only=True)
    source = "configured"
    if module.params["policy_from_checkpoint"]:
        config = config.replace(policy=recorded_policy(config.state_path) or "none")
        source = "checkpoint"
    manager = build_manager(config)
    manager.cgroup_targets.partition = partition_of(config.options, manager.policy.reserved)
    warnings = []
    if module.params["query_runtime"]:
        try:
            manager.runtime = build_runtime(config)
            manager.runtime.want_annotations = config.options.reads_annotations  # the system pods' priority class
        except ContainerRuntimeError as exc:
            warnings.append("runtime not queried: %s" % exc)
    with manager:
        result = node_info(manager, manager.read_state(), module.params["query_runtime"])
    for warning in warnings + result.pop("warnings"):
        module.warn(warning)
    result.update(changed=False, policy_source=source)
    return result


def main() -> None:
    spec = dict(STATE_ARGS, query_runtime={"type": "bool", "default": True},
                policy_from_checkpoint={"type": "bool", "default": False})
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    run_module(module, info)


if __name__ == "__main__":
    main()
