#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_reservation
short_description: Plan the CPUs reserved for the system (the kubelet's reservedSystemCPUs)
version_added: 0.3.0
description:
  - Chooses the reserved CPUs from the node's discovered topology, the way the kubelet places a reservation
    count (lowest sockets, NUMA nodes and cores first), and returns them as a C(reservedSystemCPUs) list.
  - Exactly one of O(count), O(per_numa) and O(isolcpus_complement) says how many CPUs to reserve.
  - Only computes a plan; nothing on the node changes. The C(kubecpu.cpu_manager.kubelet_cpu_manager) role
    uses the same planner for C(kubelet_cpu_manager_num_reserved).
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.topology
  - kubecpu.cpu_manager.cpu_manager.read_only
options:
  count:
    description:
      - Reserve this many CPUs on the whole node, placed as the kubelet places C(num_reserved).
    type: int
  per_numa:
    description:
      - Reserve this many CPUs on every NUMA node (a housekeeping core per node), lowest cores of each node.
    type: int
  isolcpus_complement:
    description:
      - Reserve every online CPU the kernel does not isolate (C(isolcpus)), so exclusive CPUs come only from the
        isolated set.
    type: bool
    default: false
  whole_cores:
    description:
      - Round each count up to whole physical cores so that no reserved hyperthread shares a core with a pinned
        container. Off, an odd count on an SMT node reserves half a core, as the kubelet would.
    type: bool
    default: true
  policy_options:
    description:
      - Static policy options that change the kubelet's placement (C(distribute-cpus-across-numa),
        C(align-by-socket) and the others, kubelet names to values).
    type: dict
    default: {}
  kubelet_version:
    description:
      - The kubelet whose placement rules apply (V(1.35), the default, to V(1.38); 1.38 tests whole cores and
        sockets exactly, which matters on irregular machines).
    type: str
    version_added: 0.4.0
"""

EXAMPLES = r"""
- name: Reserve two CPUs the way the kubelet would place them
  kubecpu.cpu_manager.cpu_manager_reservation:
    count: 2
  register: reservation

- name: Show the reservedSystemCPUs value
  ansible.builtin.debug:
    msg: "reservedSystemCPUs: {{ reservation.reserved_cpus }}"

- name: One housekeeping core on every NUMA node
  kubecpu.cpu_manager.cpu_manager_reservation:
    per_numa: 1

- name: Everything the kernel does not isolate
  kubecpu.cpu_manager.cpu_manager_reservation:
    isolcpus_complement: true
"""

RETURN = r"""
mode:
  description: How the reservation was sized (V(count), V(per_numa) or V(isolcpus_complement)).
  returned: success
  type: str
  sample: count
reserved_cpus:
  description: The reserved CPUs as a Linux CPU list, the value for C(reservedSystemCPUs).
  returned: success
  type: str
  sample: "0,4"
num_reserved:
  description: How many CPUs are reserved.
  returned: success
  type: int
  sample: 2
reserved_per_numa:
  description: The reserved CPUs of each NUMA node (node id to CPU list).
  returned: success
  type: dict
  sample: {"0": "0,4", "1": ""}
allocatable_cpus:
  description: The online CPUs that stay allocatable.
  returned: success
  type: str
  sample: "1-3,5-7"
notes:
  description: Adjustments the planner made (a count rounded up to whole cores, a complement that splits cores).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import OptionError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.settings import option_map
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    TOPOLOGY_ARGS, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import load_topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import parse_options
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.reservation import plan_reservation


def reserve(module: AnsibleModule) -> dict:
    params = module.params
    try:
        options = parse_options(option_map(params["policy_options"], "policy_options"))
    except OptionError as exc:
        raise OptionError("policy_options: %s" % exc) from None
    options = options._replace(kubelet_minor=kubelet_version(params["kubelet_version"]).minor)
    topo = load_topology(params["topology_path"], params["sysfs_root"])
    plan = plan_reservation(topo, count=params["count"], per_numa=params["per_numa"],
                            isolcpus_complement=params["isolcpus_complement"], whole_cores=params["whole_cores"],
                            options=options)
    return dict(changed=False, **plan)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "count": {"type": "int"},
            "per_numa": {"type": "int"},
            "isolcpus_complement": {"type": "bool", "default": False},
            "whole_cores": {"type": "bool", "default": True},
            "policy_options": {"type": "dict", "default": {}},
            "kubelet_version": {"type": "str"},
            **TOPOLOGY_ARGS,
        },
        mutually_exclusive=[("count", "per_numa")],
        supports_check_mode=True,
    )
    run_module(module, reserve)


if __name__ == "__main__":
    main()
