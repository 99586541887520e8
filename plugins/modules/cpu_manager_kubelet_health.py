#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_kubelet_health
short_description: Wait until the kubelet is healthy after a change, and check that it stays so
version_added: 0.7.0
description:
  - Waits up to O(timeout) seconds for the kubelet's health URL to answer HTTP 200, reads how often systemd has
    restarted the kubelet's service (C(NRestarts)), waits O(settle) seconds, then asks the health URL again and
    reads the count again. The node fails when the URL never answers 200, answers something else after the settle
    time, or the service was restarted meanwhile - a kubelet that refuses its C(cpu_manager_state) exits after its
    health URL is up, and systemd starts it again (docs/KUBELET_CONFIG.md).
  - One module run for what takes four with M(ansible.builtin.uri) and M(ansible.builtin.command) (each module run
    is an interpreter started on the node). The role C(kubecpu.cpu_manager.kubelet_cpu_manager) runs it after every
    start of the kubelet it makes.
  - Changes nothing. Each health request has a timeout of 5 seconds and C(systemctl) one of 30; at most 4096 bytes of
    either answer are read. A O(url) that is not http or https, a O(service) that is no systemd unit name and a time
    out of its bounds are refused before anything is asked.
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
  url:
    description: The kubelet's health URL (its C(healthzBindAddress) and C(healthzPort)).
    type: str
    default: http://127.0.0.1:10248/healthz
  service:
    description: The kubelet's systemd unit, whose C(NRestarts) is read.
    type: str
    default: kubelet
  timeout:
    description: Seconds to wait for the first HTTP 200 (asked every 2 seconds), 0-3600.
    type: int
    default: 120
  settle:
    description: Seconds the kubelet must then stay healthy with no restart, 0-600; keep it above the unit's
      C(RestartSec).
    type: int
    default: 15
"""

EXAMPLES = r"""
# after the kubelet was restarted on a new configuration
- name: Wait until the kubelet answers, then check that it stays up with no restart (15 s)
  kubecpu.cpu_manager.cpu_manager_kubelet_health:
    timeout: 120
  register: health

- name: Say how long it took
  ansible.builtin.debug:
    msg: "healthy after {{ health.waited }} s, restarted {{ health.restarts }} times by systemd since its start"
"""

RETURN = r"""
url:
  description: The health URL asked.
  returned: success
  type: str
  sample: http://127.0.0.1:10248/healthz
service:
  description: The systemd unit whose restarts were counted.
  returned: success
  type: str
  sample: kubelet
waited:
  description: Seconds until the health URL first answered 200.
  returned: success
  type: float
  sample: 4.2
settle:
  description: Seconds it then had to stay healthy.
  returned: success
  type: int
  sample: 15
restarts:
  description: The service's C(NRestarts) (systemd's restarts of it since its last start), the same before and after
    the settle time.
  returned: success
  type: int
  sample: 0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_health import check_health


def health(module: AnsibleModule) -> dict:
    params = module.params
    return dict(changed=False, **check_health(params["url"], params["service"], params["timeout"], params["settle"]))


def main() -> None:
    module = AnsibleModule(argument_spec={
        "url": {"type": "str", "default": "http://127.0.0.1:10248/healthz"},
        "service": {"type": "str", "default": "kubelet"},
        "timeout": {"type": "int", "default": 120},
        "settle": {"type": "int", "default": 15},
    }, supports_check_mode=True)
    run_module(module, health)


if __name__ == "__main__":
    main()
