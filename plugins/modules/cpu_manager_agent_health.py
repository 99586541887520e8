#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_agent_health
short_description: Check the kubecpu agent after a change - active, a pass finished since, no new pinning errors
version_added: 0.7.0
description:
  - With O(active), the agent's systemd unit must be active (asked again every 2 seconds while systemd is still
    starting it). With O(fresh), a pass must finish after the check began, up to O(timeout) seconds - the agent
    rewrites its metrics file (O(metrics_path)) after every pass. With O(errors_before), its
    C(cpu_manager_pinning_errors_total) must not have risen above that count.
  - The fleet rollout (C(kubecpu.cpu_manager.rollout)) reads the counter with it before the change (O(active) and
    O(fresh) off) and gates each agent node with it after. One module run for what takes four with
    M(ansible.builtin.command), M(ansible.builtin.stat) and M(ansible.builtin.slurp) (each module run is an
    interpreter started on the node).
  - Changes nothing. C(systemctl) has a timeout of 30 seconds and at most 4096 bytes of its answer are read; at most
    1 MiB of the metrics file. A O(service) that is no systemd unit name, a O(metrics_path) that is not absolute, a
    O(timeout) out of its bounds and a negative O(errors_before) are refused before anything is asked.
author: kubecpu developers (@kubecpu)
attributes:
  check_mode:
    support: full
    description: Reads only; it waits and checks in check mode too.
  diff_mode:
    support: none
    description: There is nothing to show a difference of.
  idempotent:
    support: full
    description: Never changes anything.
options:
  service:
    description: The agent's systemd unit (the role's C(cpu_manager_agent_service)).
    type: str
    default: kubecpu-agent
  metrics_path:
    description: The agent's textfile metrics (the role's C(cpu_manager_agent_metrics_path)). None there yet counts
      as no errors; with O(fresh), it must appear within O(timeout).
    type: path
    default: /var/lib/kubecpu/metrics/kubecpu.prom
  active:
    description: The unit must be active.
    type: bool
    default: true
  fresh:
    description: A pass must finish (the metrics file be rewritten) after the check began; one second of the file
      system's time granularity is allowed.
    type: bool
    default: true
  errors_before:
    description: The pinning error count before the change (RV(errors) of an earlier run); the node fails when the
      count is now higher. Not compared when unset.
    type: int
  timeout:
    description: Seconds to wait for the unit to become active and for a fresh pass, 0-3600.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Read the agent's pinning error count before the change (nothing installed yet counts as 0)
  kubecpu.cpu_manager.cpu_manager_agent_health:
    active: false
    fresh: false
  register: before

# ... install, reconfigure or restart the agent (role kubecpu.cpu_manager.cpu_manager_agent) ...

- name: Gate the node - the agent is active, has finished a pass since, and reports no new pinning errors
  kubecpu.cpu_manager.cpu_manager_agent_health:
    errors_before: "{{ before.errors }}"
    timeout: 60
  register: after

- name: Say how long it took
  ansible.builtin.debug:
    msg: "a pass finished {{ after.waited }} s into the check; {{ after.errors }} pinning errors so far"
"""

RETURN = r"""
service:
  description: The systemd unit asked.
  returned: success
  type: str
  sample: kubecpu-agent
active:
  description: Whether the unit was active; null when O(active) was off (not asked).
  returned: success
  type: bool
  sample: true
metrics_path:
  description: The metrics file read.
  returned: success
  type: str
  sample: /var/lib/kubecpu/metrics/kubecpu.prom
fresh:
  description: Whether a pass after the check began was waited for.
  returned: success
  type: bool
  sample: true
waited:
  description: Seconds the check took, waits included.
  returned: success
  type: float
  sample: 3.1
errors:
  description: The agent's C(cpu_manager_pinning_errors_total) (0 when it has no metrics file yet).
  returned: success
  type: int
  sample: 0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.agent_health import check_agent


def health(module: AnsibleModule) -> dict:
    params = module.params
    return dict(changed=False, **check_agent(params["service"], params["metrics_path"], params["timeout"],
                                             active=params["active"], fresh=params["fresh"],
                                             errors_before=params["errors_before"]))


def main() -> None:
    module = AnsibleModule(argument_spec={
        "service": {"type": "str", "default": "kubecpu-agent"},
        "metrics_path": {"type": "path", "default": "/var/lib/kubecpu/metrics/kubecpu.prom"},
        "active": {"type": "bool", "default": True},
        "fresh": {"type": "bool", "default": True},
        "errors_before": {"type": "int"},
        "timeout": {"type": "int", "default": 60},
    }, supports_check_mode=True)
    run_module(module, health)


if __name__ == "__main__":
    main()
