#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_topology_facts
short_description: The node's CPU topology as facts (kubecpu.topology/v1)
version_added: 0.2.0
description:
  - Discovers the CPU topology the way the kubelet sees it (sysfs first, then C(lscpu), then
    C(/proc/cpuinfo)) and returns it in C(ansible_facts.kubecpu_topology), in the C(kubecpu.topology/v1)
    format shared by C(bin/kubecpu topology) and the test fixtures.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.topology
  - kubecpu.cpu_manager.cpu_manager.read_only
attributes:
  facts:
    support: full
    description: Sets C(ansible_facts.kubecpu_topology).
"""

EXAMPLES = r"""
- name: Gather the CPU topology
  kubecpu.cpu_manager.cpu_topology_facts:

- name: Show sockets, NUMA nodes and threads per core
  ansible.builtin.debug:
    msg: "{{ ansible_facts.kubecpu_topology.summary }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added.
  returned: always
  type: complex
  contains:
    kubecpu_topology:
      description:
        - The topology document (C(format), C(cpus) with C(cpu), C(core), C(socket), C(die), C(numa),
          C(uncore), C(online); C(isolated), C(nohz_full), C(source)) plus C(summary) (counts of CPUs, cores,
          sockets, NUMA nodes, uncore caches, threads per core) and C(numa_cpus) (CPU list per NUMA node).
      returned: always
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    TOPOLOGY_ARGS, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import load_topology


def facts(module: AnsibleModule) -> dict:
    topo = load_topology(module.params["topology_path"], module.params["sysfs_root"])
    doc = topo.to_dict()
    doc["summary"] = topo.summary()
    doc["numa_cpus"] = {str(node): str(CPUSet(cpus)) for node, cpus in sorted(topo.numa_cpus.items())}
    return {"changed": False, "ansible_facts": {"kubecpu_topology": doc}}


def main() -> None:
    module = AnsibleModule(argument_spec=dict(TOPOLOGY_ARGS), supports_check_mode=True)
    run_module(module, facts)


if __name__ == "__main__":
    main()
