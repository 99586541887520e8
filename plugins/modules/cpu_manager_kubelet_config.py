#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_kubelet_config
short_description: Validate a kubelet CPU manager change and decide whether it needs the state file removed
version_added: 0.3.0
description:
  - Takes the node's current KubeletConfiguration and the CPU manager settings wanted, and checks them the way
    the kubelet of the given version would at start (option names and values, option maturity against feature
    gates, refused option pairs, C(align-by-socket) against the topology and C(single-numa-node), a non-zero
    reservation for V(static), reserved CPUs that exist and are online). A refused change fails with the
    kubelet's own message and nothing is touched.
  - Returns the new configuration (only C(cpuManagerPolicy), C(cpuManagerPolicyOptions),
    C(cpuManagerReconcilePeriod), C(reservedSystemCPUs), C(topologyManagerPolicy), C(topologyManagerScope),
    C(topologyManagerPolicyOptions) and the C(featureGates) the options need differ; every other key keeps its
    value) and whether the kubelet would reject its C(cpu_manager_state) afterwards (policy name changed, CPU set
    changed, reserved CPUs now pinned, strict reservation toggled), with the kubelet's error text.
  - With O(state_rewrite), it also computes the checkpoint the kubelet will accept after the change, so the node
    needs no drain (RV(rewritten_state), RV(moves)). Every assignment still valid is kept as it is; one on CPUs
    now reserved (or no longer online) moves to CPUs the new policy chooses for its size, with the new options
    and Topology Manager; V(none) to V(static) adopts the running Guaranteed containers with integral requests
    (read through the runtime, pods in creation order, as the kubelet admits them); V(static) to V(none) is the
    file the kubelet writes for V(none), every pinned container back on all CPUs. When a pinned container would
    not keep its CPU count, there is no RV(rewritten_state) and RV(rewrite.unfit) names the containers.
  - Only computes; the C(kubecpu.cpu_manager.kubelet_cpu_manager) role writes the file and migrates the state.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.topology
  - kubecpu.cpu_manager.cpu_manager.runtime
  - kubecpu.cpu_manager.cpu_manager.read_only
options:
  config:
    description:
      - The current KubeletConfiguration as a mapping (for example the file read with M(ansible.builtin.slurp)
        and the P(ansible.builtin.from_yaml#filter) filter). Empty for a node without one.
    type: dict
    default: {}
  kubelet_version:
    description:
      - The kubelet's version, as C(kubelet --version) prints it (C(Kubernetes v1.33.2)) or C(1.33).
      - Omitted or empty, the module runs O(kubelet_binary) C(--version) on the node itself (one module run
        instead of a command and a module run). One of the two is required.
    type: str
  kubelet_binary:
    description:
      - The kubelet binary asked for its version when O(kubelet_version) is empty, a path or a name looked up
        in C(PATH) (and the C(sbin) directories). Its output is read for at most 30 seconds.
    type: str
    version_added: 0.7.0
  policy:
    description: The CPU manager policy to configure.
    type: str
    choices: [static, none]
    default: static
  policy_options:
    description:
      - Static policy options, kubelet names to values. Omitted keeps the file's C(cpuManagerPolicyOptions);
        an empty mapping removes them.
    type: dict
  reconcile_period:
    description: The C(cpuManagerReconcilePeriod), a Go duration (C(10s)). Omitted keeps the file's value.
    type: str
  reserved_cpus:
    description: The C(reservedSystemCPUs) list (C(0,4)).
    type: str
  num_reserved:
    description:
      - A number of reserved CPUs, placed by the reservation planner (whole cores, lowest cores first) and written
        as C(reservedSystemCPUs). Without O(reserved_cpus) and O(num_reserved) the file's reservation is kept.
    type: int
  topology_manager_policy:
    description: The C(topologyManagerPolicy). Omitted keeps the file's value.
    type: str
    choices: [none, best-effort, restricted, single-numa-node]
  topology_manager_scope:
    description: The C(topologyManagerScope). Omitted keeps the file's value.
    type: str
    choices: [container, pod]
  topology_manager_policy_options:
    description:
      - Topology Manager policy options (C(prefer-closest-numa-nodes), C(max-allowable-numa-nodes)). Omitted keeps
        the file's value.
    type: dict
  state_path:
    description: The kubelet's checkpoint file, read to decide whether the kubelet would reject it.
    type: path
    default: /var/lib/kubelet/cpu_manager_state
  kubelet_args:
    description:
      - The kubelet's command-line arguments; its C(--feature-gates) are laid over O(config)'s C(featureGates), as
        the kubelet does, for the options' gates and the checkpoint format. A gate this configuration needs that the
        command line turns off is refused.
      - A flag that sets what this module plans (C(--cpu-manager-policy), C(--cpu-manager-policy-options),
        C(--cpu-manager-reconcile-period), C(--reserved-cpus), C(--kube-reserved), C(--system-reserved), their
        C(-cgroup) flags, C(--topology-manager-policy), C(--topology-manager-scope),
        C(--topology-manager-policy-options)) is refused; on the command line it overrides the configuration file.
      - Omitted, the command line of the running kubelet is read from C(/proc), the kubelet being the process named
        C(kubelet) that systemd runs in O(kubelet_service)'s cgroup, as root (real and effective user), running
        O(kubelet_binary) when it is given. Any local user can name a process C(kubelet); one that fails a check is not
        read, and RV(notes) names it. None passing, there are none, as when no kubelet runs. Several passing with
        different command lines fail the module (give O(kubelet_args)).
    type: list
    elements: str
    version_added: 0.6.0
  kubelet_service:
    description:
      - The kubelet's systemd unit (C(kubelet) is C(kubelet.service)), whose cgroup identifies the running kubelet
        when O(kubelet_args) is omitted.
    type: str
    default: kubelet
    version_added: 0.7.0
  config_path:
    description:
      - Where O(config) was read from. With it, RV(kubelet_predates_config) says whether the kubelet's main process
        started before the file last changed (a run cut off between writing the file and restarting the kubelet
        leaves it so, and the kubelet runs the configuration from before).
    type: path
    version_added: 0.8.0
  state_rewrite:
    description:
      - Also compute the checkpoint for the new configuration (RV(rewritten_state)) and the containers it moves
        (RV(moves)), for a change without a drain. The runtime options are used only for V(none) to V(static),
        to list the running containers to adopt.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Read the kubelet configuration
  ansible.builtin.slurp:
    src: /var/lib/kubelet/config.yaml
  register: kubelet_config_file

- name: Plan a switch to the static policy with two reserved CPUs
  kubecpu.cpu_manager.cpu_manager_kubelet_config:
    config: "{{ kubelet_config_file.content | b64decode | from_yaml }}"
    kubelet_version: "Kubernetes v1.33.2"
    policy: static
    num_reserved: 2
    policy_options:
      full-pcpus-only: "true"
  register: kubelet_plan

- name: Say whether the kubelet would reject its cpu_manager_state
  ansible.builtin.debug:
    msg: "{{ kubelet_plan.migration.reason if kubelet_plan.migration.required else 'state file kept' }}"

- name: Plan a larger reservation without a drain
  kubecpu.cpu_manager.cpu_manager_kubelet_config:
    config: "{{ kubelet_config_file.content | b64decode | from_yaml }}"
    kubelet_version: "Kubernetes v1.33.2"
    policy: static
    reserved_cpus: "0-1,32-33"
    state_rewrite: true
  register: no_drain

- name: Show what would move
  ansible.builtin.debug:
    msg: >-
      {{ 'a drain is needed: ' ~ no_drain.rewrite.reason if no_drain.rewritten_state is none
         else (no_drain.moves | length) ~ ' container(s) move, no drain' }}
"""

RETURN = r"""
config:
  description: The complete new KubeletConfiguration (every key the input had, the managed ones updated).
  returned: success
  type: dict
changed_keys:
  description: The top-level keys whose value changes.
  returned: success
  type: list
  elements: str
  sample: [cpuManagerPolicy, reservedSystemCPUs]
config_changed:
  description: Whether the configuration changes at all.
  returned: success
  type: bool
reserved_cpus:
  description: The reserved CPUs the kubelet will use after the change.
  returned: success
  type: str
  sample: "0,2"
reserved_source:
  description:
    - Where the reservation comes from (V(reserved_cpus), V(planner), V(num_reserved), V(config),
      V(kubeReserved+systemReserved) or V(none)).
  returned: success
  type: str
feature_gates:
  description: The feature gates set to true because the chosen options need them on this kubelet version.
  returned: success
  type: dict
  sample: {"CPUManagerPolicyAlphaOptions": true}
migration:
  description: The safe-migration decision.
  returned: success
  type: dict
  contains:
    required:
      description: The kubelet would reject its current C(cpu_manager_state) after the change, so the file must
        be backed up and removed while the kubelet is stopped.
      type: bool
    reason:
      description: The kubelet's error for the current state file under the new configuration (null when accepted).
      type: str
    rejected_now:
      description: The kubelet already rejects the state file with its current configuration (crash-looping).
      type: bool
    state_path:
      description: The checkpoint file.
      type: str
current:
  description: The configuration as it is now, as the kubelet reads it.
  returned: success
  type: dict
  contains:
    policy:
      description: The current C(cpuManagerPolicy) (V(none) when unset).
      type: str
    reserved_cpus:
      description: The CPUs the kubelet reserves today (null when the current configuration cannot be read).
      type: str
    policy_options:
      description:
        - The current C(cpuManagerPolicyOptions) (empty when unset or unreadable); with RV(current.policy) and
          RV(current.reserved_cpus), what a rollback writes the previous checkpoint back under.
      type: dict
      version_added: 0.6.0
checkpoint:
  description:
    - Whose checkpoint rules applied, the kubelet's version clamped to the known ones (C(1.35) to C(1.38)), the
      format that kubelet writes (C(v2), C(v3) or C(v4)) and the feature gates of the new configuration. The
      verdict and RV(rewritten_state) follow it (a 1.35 kubelet refuses a V3 file; 1.36 reads only a V4 file's V2
      part, and RV(notes) says which pod-level assignments that drops).
  returned: success
  type: dict
  sample: {"kubelet": "1.37", "format": "v4", "feature_gates": {}}
  version_added: 0.4.0
rewritten_state:
  description:
    - With O(state_rewrite), the complete checkpoint the kubelet accepts under the new configuration (its C(policyName),
      C(defaultCpuSet), C(entries) and a valid C(checksum)); the current file byte for byte when nothing has to
      change; null when no rewrite is possible (RV(rewrite.reason) says why) or there is no file to rewrite.
  returned: when O(state_rewrite)
  type: str
  sample: '{"policyName":"static","defaultCpuSet":"0-1,5-9,13-15","entries":{"pod-a":{"app":"3,11"}},"checksum":1}'
kubelet_args:
  description: The kubelet command line whose C(--feature-gates) counted (O(kubelet_args), or the running kubelet's).
  returned: success
  type: list
  elements: str
  version_added: 0.6.0
planned_from:
  description:
    - With O(state_rewrite), the fingerprint of the checkpoint the rewrite was planned from (C(sha256:<hex>) of its
      bytes, C(absent) without a file). Given to
      O(kubecpu.cpu_manager.cpu_manager_checkpoint#module:planned_from), the write refuses once the kubelet has
      changed the file since the plan.
  returned: when O(state_rewrite)
  type: str
  version_added: 0.6.0
moves:
  description: With O(state_rewrite), the containers whose CPUs the rewrite changes.
  returned: when O(state_rewrite)
  type: list
  elements: dict
  contains:
    pod_uid:
      description: The pod's UID.
      type: str
    container:
      description: The container's name.
      type: str
    cpus_before:
      description: Its CPUs now (all CPUs for a container not pinned yet).
      type: str
    cpus_after:
      description: Its CPUs after the rewrite.
      type: str
    reason:
      description: Why it moves.
      type: str
rewrite:
  description: With O(state_rewrite), the rest of the decision.
  returned: when O(state_rewrite)
  type: dict
  contains:
    possible:
      description: A file the kubelet accepts exists for the new configuration (or none is needed).
      type: bool
    unchanged:
      description: RV(rewritten_state) is the current file, byte for byte.
      type: bool
    unfit:
      description: The containers that would not keep their CPU count (no rewrite then), with the reason.
      type: list
      elements: dict
    reason:
      description: Why there is no rewrite (empty otherwise).
      type: str
    policy_before:
      description: The policy the current checkpoint names (null without a readable file).
      type: str
kubelet_running:
  description:
    - Whether O(kubelet_service) has a main process (C(systemctl show)); null where systemd cannot be asked. A kubelet
      a run cut off left stopped is started again by the kubelet role.
  returned: success
  type: bool
  version_added: 0.8.0
kubelet_predates_config:
  description:
    - Whether O(kubelet_service)'s main process started before O(config_path) last changed, so that the kubelet runs
      an older configuration than the file's (the kubelet role restarts it); false without O(config_path) or a
      running kubelet.
  returned: success
  type: bool
  version_added: 0.8.0
drained:
  description:
    - Whether the kubelet role's note of a drain is beside the checkpoint (C(<state_path>.drained)), written before it
      drains the node and removed once it uncordons it; a run cut off between the two leaves it, and the next run
      uncordons the node.
  returned: success
  type: bool
  version_added: 0.8.0
kubelet_version:
  description: The kubelet version the plan is for (O(kubelet_version), or what O(kubelet_binary) C(--version) printed).
  returned: success
  type: str
  sample: Kubernetes v1.37.2
  version_added: 0.7.0
notes:
  description:
    - Remarks (a reservation rounded up to whole cores, a kubelet newer than the known ones, a process named
      C(kubelet) whose command line was not read because it is not the kubelet of O(kubelet_service)).
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.settings import num_reserved, reserved_cpus
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import (
    Desired, adopter, ask_kubelet_version, plan_change, rewrite_for)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_process import (
    find_kubelet, kubelet_unit)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.feature_gates import flag_gates
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology_manager import POLICIES, SCOPES
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    TOPOLOGY_ARGS, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import (
    RUNTIME_ARGS, node_config)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import load_topology, run_command
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.process_age import service_age


def read_state(path: str):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError("cannot read the kubelet's checkpoint %s: %s" % (path, exc.strerror or exc)) from None


def plan(module: AnsibleModule) -> dict:
    params = module.params
    desired = Desired(
        policy=params["policy"], policy_options=params["policy_options"], reconcile_period=params["reconcile_period"],
        reserved_cpus=reserved_cpus(params["reserved_cpus"]), num_reserved=num_reserved(params["num_reserved"]),
        topology_manager_policy=params["topology_manager_policy"],
        topology_manager_scope=params["topology_manager_scope"],
        topology_manager_policy_options=params["topology_manager_policy_options"])
    topo = load_topology(params["topology_path"], params["sysfs_root"])
    state = read_state(params["state_path"])
    unit = kubelet_unit(params["kubelet_service"])
    binary = None
    if params["kubelet_binary"]:
        binary = module.get_bin_path(params["kubelet_binary"]) or params["kubelet_binary"]
    args, search = params["kubelet_args"], None
    if args is None:  # the running kubelet's, as its unit identifies it (any user can name a process kubelet)
        search = find_kubelet(unit=unit, binary=binary)
        args = search.chosen.args if search.chosen is not None else []
    version = params["kubelet_version"]
    if not version:
        if not binary:
            raise ConfigError("kubelet_version is empty and there is no kubelet_binary to ask for it")
        version = ask_kubelet_version(binary)
    change = plan_change(params["config"], desired, topo, version, state=state,
                         state_path=params["state_path"], flags=flag_gates(args), args=args)
    age = service_age(unit, [params["config_path"]] if params["config_path"] else [], run_command)
    result = dict(changed=False, kubelet_args=args, kubelet_version=version, kubelet_running=age["running"],
                  kubelet_predates_config=bool(age["changed_since_start"]),
                  drained=os.path.lexists(params["state_path"] + ".drained"), **change.to_dict(params["state_path"]))
    if search is not None:
        result["notes"] = result["notes"] + search.notes()
    if params["state_rewrite"]:
        settings = dict(params, **change.settings())
        adopt = adopter(node_config(settings, read_only=True), topo) if settings["policy"] == "static" else None
        rewrite = rewrite_for(change, topo, state, adopt, state_path=params["state_path"]).to_dict(state)
        result.update(rewritten_state=rewrite.pop("rewritten_state"), planned_from=rewrite.pop("planned_from"),
                      moves=rewrite.pop("moves"), rewrite=rewrite)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict", "default": {}},
            "kubelet_version": {"type": "str"},
            "kubelet_binary": {"type": "str"},
            "policy": {"type": "str", "choices": ["static", "none"], "default": "static"},
            "policy_options": {"type": "dict"},
            "reconcile_period": {"type": "str"},
            "reserved_cpus": {"type": "str"},
            "num_reserved": {"type": "int"},
            "topology_manager_policy": {"type": "str", "choices": list(POLICIES)},
            "topology_manager_scope": {"type": "str", "choices": list(SCOPES)},
            "topology_manager_policy_options": {"type": "dict"},
            "state_path": {"type": "path", "default": "/var/lib/kubelet/cpu_manager_state"},
            "state_rewrite": {"type": "bool", "default": False},
            "kubelet_args": {"type": "list", "elements": "str"},
            "kubelet_service": {"type": "str", "default": "kubelet"},
            "config_path": {"type": "path"},
            **TOPOLOGY_ARGS,
            **RUNTIME_ARGS,
        },
        required_one_of=[("kubelet_version", "kubelet_binary")],
        supports_check_mode=True,
    )
    run_module(module, plan)


if __name__ == "__main__":
    main()
