#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_defrag
short_description: Move pinned containers so that larger whole-core requests fit again
version_added: 0.4.0
description:
  - Exclusive allocations fragment a node; free CPUs end up scattered over half-used cores and NUMA nodes, so a pod
    asking for a whole NUMA node or whole cores is refused although enough CPUs are free.
  - Finds container moves (each keeps its number of CPUs) that raise, in this order, the largest single-NUMA
    whole-core request the node would admit and then its free whole cores, and makes them live on kubecpu's own
    state (an agent node), through the runtime, the state first, under the lock. A node already optimal gets no
    move.
  - The search finds the best packing first (which containers stay, which move to which NUMA node), proven best
    when it ends within O(time_budget); on a larger node it returns the best it found and says so
    (RV(proven_best)). The moves are ordered so that no CPU is ever held by two containers; a swap passes through
    free CPUs (that container appears twice in RV(moves)). Where no safe order exists, or the search found nothing
    better, the greedy search plans (each step the one move that helps most), in what is left of O(time_budget).
  - The search runs on a copy of the state with the node's lock free (the OCI hook and the NRI plugin never wait for
    it); under the lock the moves are taken only while the state is still that copy, else it searches again (three
    times, then it fails and moves nothing).
  - The moves are made one after the other, the shared containers first shrinking to the CPUs no move takes or
    passes through and growing back once the moves are done. A move the runtime refuses stops the moves after it
    (they may need its CPUs); the module then fails, and the state says where each container is, as its cgroup does.
  - A move honours what an allocation does. With O(isolated_cpus=only) containers move only within the isolated
    CPUs (one outside them stays). Under O(topology_manager_scope=pod) with O(topology_manager_policy)
    V(single-numa-node) or V(restricted), a pod whose containers hold different CPUs stays where it is (the kubelet
    admits such a pod by all its containers together at its next start). Pod-level exclusive CPUs (kubelet 1.36
    and later), a container too large for one NUMA node and, under full-pcpus-only, one that does not hold whole
    cores stay too.
  - On the kubelet's own checkpoint (read-only) it only plans and returns RV(rewritten_state), the checkpoint after
    the moves, to write with M(kubecpu.cpu_manager.cpu_manager_checkpoint) (action V(write) with push) while the
    kubelet is stopped.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager
attributes:
  check_mode:
    support: full
    description: Returns the moves; nothing is written or pushed.
  diff_mode:
    support: full
    description: Shows the state before and after the moves.
  idempotent:
    support: full
    description: A second run finds no move that helps and changes nothing.
options:
  max_moves:
    description: At most this many moves (omitted, as many as help); the best packing those moves reach.
    type: int
  keep_numa:
    description:
      - No container leaves the NUMA nodes it is on (its moves end there; a swap's detour may pass through free CPUs
        elsewhere for a moment). For containers placed near a device (a NUMA affinity given at allocation, which the
        checkpoint does not record).
      - Without it a container still moves only within the NUMA nodes the kubelet's Memory Manager pinned its memory
        to (its checkpoint C(memory_manager_state), read beside O(kubelet_state_path)).
    type: bool
    default: false
    version_added: 0.6.0
  time_budget:
    description: Seconds of search (the exact search, then the greedy fallback in what is left), after which the
      best packing found so far is taken (more than 0, at most 600). The search does not hold the node's state lock.
    type: float
    default: 0.5
    version_added: 0.5.0
"""

EXAMPLES = r"""
- name: What would moving pinned containers free?
  kubecpu.cpu_manager.cpu_manager_defrag:
    num_reserved: 2
    runtime: cri
  check_mode: true
  register: defrag

- name: Show it
  ansible.builtin.debug:
    msg: >-
      {{ defrag.moves | length }} move(s): largest whole-core request on one NUMA node
      {{ defrag.before.largest_single_numa_whole_cores }} -> {{ defrag.after.largest_single_numa_whole_cores }} CPUs

- name: On a kubelet node, plan on the kubelet's own checkpoint (only ever read while the kubelet runs)
  kubecpu.cpu_manager.cpu_manager_defrag:
    state_path: /var/lib/kubelet/cpu_manager_state
    reserved_cpus: "0,32"
    runtime: cri
  register: kubelet_defrag

- name: Say what to write with the kubelet stopped (cpu_manager_checkpoint action=write, with this planned_from)
  ansible.builtin.debug:
    msg: >-
      {{ 'nothing to move' if kubelet_defrag.rewritten_state is none
         else kubelet_defrag.rewritten_state ~ ' planned from ' ~ kubelet_defrag.planned_from }}
"""

RETURN = r"""
moves:
  description: The moves, each with C(pod_uid), C(containers) (a pod's containers that share CPUs move together),
    C(cpus_before) and C(cpus_after).
  returned: success
  type: list
  elements: dict
before:
  description: What the node could admit before the moves (the C(headroom) of M(kubecpu.cpu_manager.cpu_manager_info)).
  returned: success
  type: dict
after:
  description: What it can admit after them.
  returned: success
  type: dict
proven_best:
  description: Whether no set of moves (within O(max_moves)) reaches a better packing.
  returned: success
  type: bool
  version_added: 0.5.0
planner:
  description: C(exact), or C(greedy) where the exact search's plan had no safe order or was no better.
  returned: success
  type: str
  version_added: 0.5.0
containers_moved:
  description: How many containers (or groups of a pod's containers that share CPUs) move; RV(moves) can be
    longer when one passes through free CPUs.
  returned: success
  type: int
  version_added: 0.5.0
actions:
  description: The runtime updates made (or, in check mode, planned), as M(kubecpu.cpu_manager.cpu_manager_reconcile)
    returns them.
  returned: success
  type: list
  elements: dict
rewritten_state:
  description: For the kubelet's own checkpoint, the checkpoint after the moves (null when there is none to make).
  returned: success
  type: str
planned_from:
  description: With RV(rewritten_state), the fingerprint of the checkpoint the moves were planned from; give it to
    M(kubecpu.cpu_manager.cpu_manager_checkpoint) (O(kubecpu.cpu_manager.cpu_manager_checkpoint#module:planned_from)),
    which then refuses to write once the kubelet has changed the file since.
  returned: when RV(rewritten_state) is not null
  type: str
  sample: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  version_added: 0.6.0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import defrag_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config


def defrag(module: AnsibleModule) -> dict:
    plan, rewritten = defrag_config(node_config(module.params), check=module.check_mode,
                                    max_moves=module.params["max_moves"], budget=module.params["time_budget"],
                                    keep_numa=module.params["keep_numa"])
    doc = plan.to_dict()
    moved = plan.result or {}
    result = {"changed": bool(moved.get("moves")) and rewritten is None, "moves": moved.get("moves", []),
              "before": moved.get("before", {}), "after": moved.get("after", {}),
              "proven_best": moved.get("proven_best", False), "planner": moved.get("planner", "exact"),
              "containers_moved": moved.get("containers_moved", 0),
              "actions": doc["actions"], "errors": doc["errors"], "rewritten_state": rewritten}
    if rewritten is not None:
        result["planned_from"] = moved.get("planned_from")
    if module._diff:
        result["diff"] = {"before": doc["state_before"], "after": doc["state_after"]}
    stopped = [e for e in doc["errors"] if e.get("kind") in ("move", "update")]
    if stopped:  # the moves after a refused one were not made: the state says where each container is
        result.update(failed=True, msg="defragmentation stopped: %s" % "; ".join(e["error"] for e in stopped))
    return result


def main() -> None:
    options = dict(STATE_ARGS, max_moves={"type": "int"}, time_budget={"type": "float", "default": 0.5},
                   keep_numa={"type": "bool", "default": False})
    module = AnsibleModule(argument_spec=options, supports_check_mode=True)
    run_module(module, defrag)


if __name__ == "__main__":
    main()
