#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_runtime_hook
short_description: Install or remove kubecpu's fail-closed OCI hook in containerd or CRI-O
version_added: 0.5.0
description:
  - Puts C(bin/kubecpu hook) on every container's creation path, so that no container runs its first instruction on
    CPUs it must not use; a container the hook cannot place is not created (the kubelet retries it). The agent role
    C(kubecpu.cpu_manager.cpu_manager_agent) runs this module for C(cpu_manager_fail_closed=true) and
    C(cpu_manager_agent_mode=hook).
  - containerd (1.6, 1.7, 2.1 and 2.4, the releases the collection's tests run; any other version is refused, as it
    was not seen running a base spec's hooks) gets the hook through the CRI runtime handler's C(base_runtime_spec) -
    a spec file made from the base spec containerd ran the handler with (the operator's, or containerd's default,
    C(ctr oci spec)), with the hook added - and one line in one configuration file; every other byte of the
    operator's files is left as it was.
  - The configuration is O(containerd_config) and the files it C(imports) (globs, relative paths, comment-only
    drop-ins), read in containerd's order and merged as containerd merges them - on containerd 2 key by key, a later
    file over an earlier one, so a drop-in that redefines the handler's table without C(base_runtime_spec) keeps the
    main file's; on 1.x an imported table of the CRI plugin replaces the whole plugin. The line goes into the file
    whose handler table containerd takes last (O(containerd_config) when none has one) - the value replaced in its
    own quotes, else a line after the table's header, else a table appended. A comment-only file first gets the
    version the running containerd writes.
  - Before returning, C(containerd config dump) must show the file for the handler, else every file is put back and
    the task fails. containerd must then restart (RV(restart_needed)) to use it.
  - Every file rewritten keeps its owner, group and mode (containerd's configuration can hold registry
    credentials); the spec and C(<spec_path>.previous), which records the edit, are new files of mode 0600.
  - CRI-O gets an OCI hooks.d file, C(kubecpu.json) in O(crio_hooks_dir), for every container at C(createRuntime);
    CRI-O watches the directory, so nothing restarts. The collection's tests run it on CRI-O 1.36.3.
  - O(state=absent) takes kubecpu's line out of every file that still has it, so that each file is byte for byte
    what it was (CRLF line ends, comments and a placeholder's emptiness included) unless someone changed it around
    the line since, and removes the spec and its record. A line someone changed is theirs and stays.
  - Every path option must be absolute (O(python) is the hook's own path, which the OCI runtime spec wants absolute);
    a relative one, or a O(timeout) outside 1-120, is refused before anything is written.
author: kubecpu developers (@kubecpu)
attributes:
  check_mode:
    support: full
    description: Reports the files it would write or remove.
  diff_mode:
    support: none
    description: It reports the files it writes, not their contents.
  idempotent:
    support: full
    description: A second run with the same options changes nothing.
options:
  state:
    description: Installed or not.
    type: str
    choices: [present, absent]
    default: present
  runtime:
    description: The container runtime.
    type: str
    choices: [containerd, crio]
    default: containerd
  kubecpu:
    description: The installed C(bin/kubecpu).
    type: path
    default: /opt/kubecpu/bin/kubecpu
  config:
    description: The agent's configuration file, which the hook reads (C(--config)).
    type: path
    default: /etc/kubecpu/agent.json
  python:
    description: The node's interpreter for the hook (run with C(-I -S)).
    type: path
    default: /usr/bin/python3
  timeout:
    description: Seconds the runtime gives the hook, 1-120 (the kubelet's default C(runtimeRequestTimeout)); the hook
      itself gives up on the state lock after 2 s.
    type: int
    default: 10
  containerd_config:
    description:
      - containerd's main configuration file (version 2, 3 or 4, or a comment-only file, which gets the version of
        the containerd that runs).
      - The files it imports are read too; the line may go into one of them (see the description).
    type: path
    default: /etc/containerd/config.toml
  containerd_handler:
    description: The CRI runtime handler whose containers get the hook.
    type: str
    default: runc
  containerd_binaries:
    description: The directory with C(containerd) and C(ctr) ("" finds them on the PATH).
    type: path
    default: ""
  spec_path:
    description: The base runtime spec kubecpu writes for containerd.
    type: path
    default: /etc/kubecpu/base-runtime-spec.json
  crio_hooks_dir:
    description: CRI-O's OCI hooks directory.
    type: path
    default: /etc/containers/oci/hooks.d
  service:
    description:
      - containerd's systemd unit. With it, RV(restart_needed) is also true when O(containerd_config) or O(spec_path)
        changed after containerd's main process started, so a run cut off between the edit and the restart restarts
        containerd at the next run (else the hook's removal would leave containerd running it from memory).
    type: str
    default: ""
    version_added: 0.8.0
"""

EXAMPLES = r"""
- name: Fail closed on containerd
  kubecpu.cpu_manager.cpu_manager_runtime_hook:
    runtime: containerd
  register: hook

- name: Say whether containerd must restart to take it (the agent role restarts it)
  ansible.builtin.debug:
    msg: "{{ hook.detail }}; restart containerd now: {{ hook.restart_needed }}"

- name: Take it out again (what the handler's base spec was is put back)
  kubecpu.cpu_manager.cpu_manager_runtime_hook:
    runtime: containerd
    state: absent
"""

RETURN = r"""
files:
  description: The files written or removed (in check mode, that would be).
  returned: success
  type: list
  elements: str
restart_needed:
  description:
    - Whether the runtime must restart to take the change (containerd's configuration changed), or, with
      O(service), to take a change made after containerd's main process started (a run cut off before the restart).
  returned: success
  type: bool
detail:
  description: Where the hook is installed (or what the handler's base spec is again).
  returned: success
  type: str
hook:
  description: The OCI hook entry.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import (
    absolute_paths, run_module)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import run_command
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.process_age import service_age
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (
    Containerd, hook_entry, install_crio, remove_crio)


def hook(module: AnsibleModule) -> dict:
    params = module.params
    absolute_paths(module, ("containerd_config", "containerd_binaries", "spec_path", "crio_hooks_dir"))

    def run(argv):
        code, out, err = module.run_command(argv)
        if code != 0:
            raise ConfigError("%s failed (exit %d): %s" % (" ".join(argv), code, (err or out).strip()[:500]))
        return out

    entry = hook_entry(params["python"], params["kubecpu"], params["config"], params["timeout"])
    present = params["state"] == "present"
    if params["runtime"] == "crio":
        done = install_crio(params["crio_hooks_dir"], entry, module.check_mode) if present else remove_crio(
            params["crio_hooks_dir"], module.check_mode)
    else:
        containerd = Containerd(params["containerd_config"], params["containerd_handler"], params["spec_path"], run,
                                params["containerd_binaries"])
        done = containerd.install(entry, module.check_mode) if present else containerd.remove(module.check_mode)
    restart = done.restart and done.changed
    if params["runtime"] == "containerd" and params["service"]:  # a run cut off before containerd's restart
        age = service_age(params["service"], [params["containerd_config"], params["spec_path"]], run_command)
        restart = restart or bool(age["changed_since_start"])
    return {"changed": done.changed, "files": done.files, "restart_needed": restart, "detail": done.detail,
            "hook": entry}


def main() -> None:
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "runtime": {"type": "str", "choices": ["containerd", "crio"], "default": "containerd"},
        "kubecpu": {"type": "path", "default": "/opt/kubecpu/bin/kubecpu"},
        "config": {"type": "path", "default": "/etc/kubecpu/agent.json"},
        "python": {"type": "path", "default": "/usr/bin/python3"},
        "timeout": {"type": "int", "default": 10},
        "containerd_config": {"type": "path", "default": "/etc/containerd/config.toml"},
        "containerd_handler": {"type": "str", "default": "runc"},
        "containerd_binaries": {"type": "path", "default": ""},
        "spec_path": {"type": "path", "default": "/etc/kubecpu/base-runtime-spec.json"},
        "crio_hooks_dir": {"type": "path", "default": "/etc/containers/oci/hooks.d"},
        "service": {"type": "str", "default": ""},
    }, supports_check_mode=True)
    run_module(module, hook)


if __name__ == "__main__":
    main()
