#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_daemons
short_description: Confine the system daemons to the reserved CPUs with systemd drop-ins, or give them every CPU back
version_added: 0.6.0
description:
  - Writes one drop-in per unit, C(<systemd_dir>/<unit>.d/50-kubecpu-housekeeping.conf) - C(AllowedCPUs=<cpus>) where
    cgroup v2 offers the cpuset controller (C(<cgroup_root>/cgroup.controllers)), else C(CPUAffinity=<cpus>) for the
    services (a slice or a scope has no equivalent without cpuset) - and applies them with one
    C(systemctl daemon-reload). No restart, no reboot; C(kubepods.slice) is not touched and keeps every CPU.
  - O(state=absent) first widens each drop-in there to every online CPU and reloads (the daemons get every CPU back;
    with C(AllowedCPUs=) simply gone, systemd would leave a cgroup's cpuset as it last wrote it), then removes them and
    reloads again.
  - Every unit in one module run. The role C(kubecpu.cpu_manager.kubelet_cpu_manager) runs it for
    C(kubelet_cpu_manager_housekeeping) (docs/HOUSEKEEPING.md, section 2).
  - Every path option must be absolute; a relative one is refused before anything is written.
author: kubecpu developers (@kubecpu)
attributes:
  check_mode:
    support: full
    description: Reports the drop-ins it would write, widen or remove; nothing is written and systemd is not reloaded.
  diff_mode:
    support: full
    description: Each drop-in's content before and after.
  idempotent:
    support: full
    description: A second run with the same options changes nothing and reloads nothing.
options:
  state:
    description: V(present) confines the units to O(cpus); V(absent) gives them every online CPU back and removes the
      drop-ins.
    type: str
    choices: [present, absent]
    default: present
  cpus:
    description: The reserved CPUs (a Linux CPU list, such as C(0-1)), each online on the node (a CPU that is not
      is a mistyped or stale reservation, refused before anything is written). Required with O(state=present).
    type: str
  units:
    description: The systemd units (services, slices, scopes) to confine.
    type: list
    elements: str
    default: [system.slice, user.slice, init.scope, kubelet.service, containerd.service]
  cgroup_root:
    description: Where cgroup v2 is mounted.
    type: path
    default: /sys/fs/cgroup
  sysfs_root:
    description: The root under which C(sys/devices/system/cpu/online) is read (V(absent)).
    type: path
    default: /
  systemd_dir:
    description: Where the drop-in directories are.
    type: path
    default: /etc/systemd/system
  daemon_reload:
    description: Apply the drop-ins with C(systemctl daemon-reload) after each step that changed one. V(false) leaves
      that to the caller (one reload for several changes); with O(state=absent) the daemons then keep the reserved
      CPUs until the reload.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Confine the system daemons to CPUs 0 and 1
  kubecpu.cpu_manager.cpu_manager_daemons:
    cpus: 0-1
  register: daemons

- name: Say what each unit got
  ansible.builtin.debug:
    msg: "{{ daemons.key }} in {{ daemons.dropins | list }}"

- name: Give them every CPU back
  kubecpu.cpu_manager.cpu_manager_daemons:
    state: absent
"""

RETURN = r"""
key:
  description: The setting used, C(AllowedCPUs) (cgroup v2 with cpuset) or C(CPUAffinity).
  returned: success
  type: str
  sample: AllowedCPUs
dropins:
  description: Each drop-in's path and content - the confining ones (V(present)) or the widened ones (V(absent)).
  returned: success
  type: dict
  sample: {"/etc/systemd/system/system.slice.d/50-kubecpu-housekeeping.conf": "...\n[Slice]\nAllowedCPUs=0-1\n"}
written:
  description: The drop-ins written or widened (in check mode, that would be).
  returned: success
  type: list
  elements: str
removed:
  description: The drop-ins removed (in check mode, that would be).
  returned: success
  type: list
  elements: str
reloads:
  description: How many times systemd was reloaded (0 in check mode, when nothing changed, and with
    O(daemon_reload=false)).
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    absolute_paths, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.daemon_dropins import apply


def daemons(module: AnsibleModule) -> dict:
    params = module.params
    absolute_paths(module, ("cgroup_root", "sysfs_root", "systemd_dir"))

    def reload() -> None:
        argv = [module.get_bin_path("systemctl", required=True), "daemon-reload"]
        code, out, err = module.run_command(argv)
        if code != 0:
            raise ConfigError("systemctl daemon-reload failed (exit %d): %s" % (code, (err or out).strip()[:500]))

    done = apply(present=params["state"] == "present", cpus=params["cpus"], units=params["units"],
                 cgroup_root=params["cgroup_root"], sysfs_root=params["sysfs_root"],
                 systemd_dir=params["systemd_dir"], check_mode=module.check_mode,
                 reload=reload if params["daemon_reload"] else None)
    result = {"changed": done.changed, "key": done.key, "dropins": done.dropins, "written": done.written,
              "removed": done.removed, "reloads": done.reloads}
    if module._diff:
        result["diff"] = done.diff
    return result


def main() -> None:
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "cpus": {"type": "str"},
        "units": {"type": "list", "elements": "str",
                  "default": ["system.slice", "user.slice", "init.scope", "kubelet.service", "containerd.service"]},
        "cgroup_root": {"type": "path", "default": "/sys/fs/cgroup"},
        "sysfs_root": {"type": "path", "default": "/"},
        "systemd_dir": {"type": "path", "default": "/etc/systemd/system"},
        "daemon_reload": {"type": "bool", "default": True},
    }, required_if=[("state", "present", ["cpus"])], supports_check_mode=True)
    run_module(module, daemons)


if __name__ == "__main__":
    main()
