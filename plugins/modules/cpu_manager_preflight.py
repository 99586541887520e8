#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_preflight
short_description: Check that a node has what the agent or the kubelet role needs, before anything changes
version_added: 0.8.0
description:
  - The fleet's dry run (C(kubecpu.cpu_manager.plan)) and the rollout before its first batch
    (C(kubecpu.cpu_manager.rollout)) run it on every node, through the roles (their C(preflight.yml)); a node it
    refuses shows as refused in the plan, and the rollout changes nothing anywhere.
  - Every node - the module runs as root (the roles write below C(/etc), C(/opt) and C(/var/lib) and restart units);
    PID 1 is systemd (C(<sysfs_root>/proc/1/comm)); the Python the modules run in is 3.9 or newer.
  - With O(manager=agent) also - the Python the agent will run with (O(python)) is 3.9 or newer; the container
    runtime answers its version (the CRI C(Version) call through O(runtime), with O(runtime_timeout)) unless
    O(check_runtime) is off; and the reservation is built as the agent builds it - the static policy's options are
    known, the reserved CPUs are online in this node's topology, and in the agent's state file (O(state_path)),
    when there is one, they are held by no container and the file fits the node.
  - Every check is made, whatever failed before it, and the failure names each problem. Changes nothing.
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager.read_only
  - kubecpu.cpu_manager.cpu_manager
options:
  manager:
    description: What the rollout will put on the node - V(agent) (the role C(cpu_manager_agent)) or V(kubelet)
      (the role C(kubelet_cpu_manager)).
    type: str
    choices: [agent, kubelet]
    required: true
  python:
    description: The interpreter the agent will run with (the role's C(cpu_manager_agent_python)); O(manager=agent)
      only.
    type: path
    default: /usr/bin/python3
  check_runtime:
    description: Ask the container runtime for its version (O(manager=agent)). The role turns it off in mode
      C(nri), where the agent talks to the runtime through its NRI socket instead (the role checks that socket), and
      beside a kubelet that pins CPUs itself, where the agent only keeps interrupts off its CPUs.
    type: bool
    default: true
  service:
    description:
      - A systemd unit (the agent's) whose main process is looked at, with RV(service). Nothing is refused from it.
    type: str
    version_added: 0.8.0
  service_files:
    description:
      - The files O(service) reads (its configuration, unit file and program); the C(changed_since_start) of RV(service)
        names those that changed after its main process started. A run cut off (Ctrl-C, a lost connection) between
        writing them and restarting the unit leaves it so, and the agent role restarts it.
    type: list
    elements: path
    default: []
    version_added: 0.8.0
"""

EXAMPLES = r"""
- name: Check an agent node before the rollout
  kubecpu.cpu_manager.cpu_manager_preflight:
    manager: agent
    reserved_cpus: "0"
    runtime: cri
    runtime_endpoint: unix:///run/containerd/containerd.sock
  register: preflight

- name: Say what the node runs
  ansible.builtin.debug:
    msg: "{{ preflight.runtime.name }} {{ preflight.runtime.version }}, {{ preflight.python }}"
"""

RETURN = r"""
checks:
  description: Each check made, with C(check) (V(root), V(systemd), V(python), V(runtime), V(reservation)), C(ok)
    and C(detail) (what was found, or the problem).
  returned: always
  type: list
  elements: dict
  sample: [{"check": "systemd", "ok": false, "detail": "PID 1 is bash, not systemd: kubecpu-agent.service needs
    systemd"}]
problems:
  description: The details of the checks that failed (the failure's message joins them).
  returned: always
  type: list
  elements: str
python:
  description: The version of the interpreter checked.
  returned: always
  type: str
  sample: Python 3.11.2
runtime:
  description: The container runtime's C(name), C(version) and C(api_version); null when not asked or no answer.
  returned: always
  type: dict
  sample: {"name": "containerd", "version": "v1.7.24", "api_version": "v1"}
reserved_cpus:
  description: The CPUs the agent would reserve on this node; null for O(manager=kubelet) or when the settings do
    not fit the node.
  returned: always
  type: str
  sample: "0"
service:
  description:
    - With O(service), its C(unit), whether it C(running) (null when systemd cannot say) and
      C(changed_since_start), the O(service_files) that changed after its main process started; null without.
  returned: always
  type: dict
  sample: {"unit": "kubecpu-agent.service", "running": true, "changed_since_start": ["/etc/kubecpu/agent.json"]}
  version_added: 0.8.0
state_found:
  description: Whether the agent's state file (O(state_path)) was there; null for O(manager=kubelet). The agent role
    keeps a state file that was there before an installation that fails, and removes one the installation made.
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PreflightError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.preflight import preflight


def check(module: AnsibleModule) -> dict:
    params = module.params
    result = preflight(node_config(params, read_only=True), params["manager"], python=params["python"],
                       check_runtime=params["check_runtime"], service=params["service"],
                       service_files=params["service_files"])
    if result["problems"]:
        module.fail_json(msg=str(PreflightError(result["problems"])), error_type="PreflightError", **result)
    return dict(changed=False, **result)


def main() -> None:
    spec = dict(STATE_ARGS, manager={"type": "str", "choices": ["agent", "kubelet"], "required": True},
                python={"type": "path", "default": "/usr/bin/python3"},
                check_runtime={"type": "bool", "default": True}, service={"type": "str"},
                service_files={"type": "list", "elements": "path", "default": []})
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    run_module(module, check)


if __name__ == "__main__":
    main()
