#!/usr/bin/python
# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later (the Ansible glue; the core in module_utils is Apache-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cpu_manager_checkpoint
short_description: Validate, replace, rebuild from what runs, or reset a CPU manager checkpoint
version_added: 0.4.0
description:
  - V(validate) reads the checkpoint at O(state_path) as the kubelet does at start, under the configuration given
    (O(policy), O(reserved_cpus) or O(num_reserved), O(policy_options)), and says whether the kubelet would
    start with it, and if not, the kubelet's message.
  - V(write) replaces it with O(content) (for example the C(rewritten_state) of
    M(kubecpu.cpu_manager.cpu_manager_kubelet_config)), after checking that the kubelet would start with it; a
    file it would refuse is never written.
  - V(rebuild) reconstructs it from what runs, through the runtime and cgroupfs. Each running Guaranteed container
    with an integral request whose cpuset holds exactly that many CPUs, none reserved and none in another running
    container's cpuset, becomes an entry under its pod UID and container name; the shared pool is the rest.
    Containers whose cpusets overlap or hold reserved CPUs are reported in RV(errors) and left to the shared pool.
  - V(reset) moves the file aside; the kubelet starts from a fresh checkpoint.
  - The file replaced is always kept beside it (RV(kept), C(<file>.<action>-<UTC time>)); the new one is written
    atomically and durably. The kubelet's own checkpoint (C(/var/lib/kubelet/cpu_manager_state)) is changed only
    with O(kubelet_stopped=true).
  - A failure after the file changed (the push's, or any other) returns, with its message, RV(kept), RV(written),
    RV(state) and RV(pushed) as they were; a rollback puts RV(kept) back.
  - V(write) of the bytes the file already holds changes nothing; the file is kept as it is, even in an older
    format than the kubelet writes (a rollback that puts the previous file back, then pushes it).
author: kubecpu developers (@kubecpu)
extends_documentation_fragment:
  - kubecpu.cpu_manager.cpu_manager
attributes:
  check_mode:
    support: full
    description: Returns the file it would write (RV(written)) and the updates it would push; changes nothing.
  diff_mode:
    support: none
    description: RV(written) and RV(state) show the new file.
  idempotent:
    support: full
    description: Writing the file that is already there changes nothing (RV(ignore:changed=false)).
options:
  action:
    description: What to do with the checkpoint.
    type: str
    choices: [validate, write, rebuild, reset]
    required: true
  content:
    description: The checkpoint to write (action V(write)), in the kubelet's format.
    type: str
  kubelet_stopped:
    description:
      - The kubelet is stopped, so its own checkpoint may be changed. Without it that file is only read.
    type: bool
    default: false
  planned_from:
    description:
      - (V(write)) The fingerprint of the checkpoint O(content) was planned from (C(planned_from) as
        M(kubecpu.cpu_manager.cpu_manager_defrag) and M(kubecpu.cpu_manager.cpu_manager_kubelet_config) return it).
        The write refuses, changing nothing, when the file on disk is no longer that one (the kubelet admitted or
        removed a pod since the plan); plan again with the kubelet stopped. Omitted, the file is replaced whatever
        it holds.
    type: str
    version_added: 0.6.0
  push:
    description:
      - After V(write) or V(rebuild), push every running container's cpuset to what the new file gives it (its
        exclusive CPUs, else the shared pool; for the V(none) policy every CPU) through the runtime, as the
        kubelet's reconcile would within its period.
    type: bool
    default: false
notes:
  - On a kubelet node stop the kubelet first; the role P(kubecpu.cpu_manager.kubelet_cpu_manager#role) does, for a
    change without a drain.
"""

EXAMPLES = r"""
- name: Would the kubelet start with its checkpoint under this configuration?
  kubecpu.cpu_manager.cpu_manager_checkpoint:
    action: validate
    state_path: /var/lib/kubelet/cpu_manager_state
    reserved_cpus: "0,32"
  register: checkpoint

- name: Rebuild a lost checkpoint from what runs (kubelet stopped)
  kubecpu.cpu_manager.cpu_manager_checkpoint:
    action: rebuild
    state_path: /var/lib/kubelet/cpu_manager_state
    reserved_cpus: "0,32"
    runtime: cri
    kubelet_stopped: true
"""

RETURN = r"""
valid:
  description: (V(validate)) the kubelet would start with the file (a missing file is valid; it starts fresh).
  returned: action is validate
  type: bool
exists:
  description: (V(validate)) the file exists.
  returned: action is validate
  type: bool
error:
  description: (V(validate)) the kubelet's message when it would refuse the file.
  returned: action is validate
  type: str
state:
  description: The checkpoint's content (C(policyName), C(defaultCpuSet), C(entries)); after V(write) or
    V(rebuild) the new one.
  returned: success
  type: dict
written:
  description: The file written (or, in check mode, that would be); null for V(reset).
  returned: action is write, rebuild or reset
  type: str
kept:
  description: Where the file replaced (or reset) was kept; also returned with a failure after the file changed.
  returned: action is write, rebuild or reset
  type: str
errors:
  description: (V(rebuild)) containers left to the shared pool, with why.
  returned: action is write, rebuild or reset
  type: list
  elements: dict
pushed:
  description:
    - With O(push), the cpuset updates made (or in check mode planned) (C(actions)), their errors (C(errors)), the
      containers gone before their update (C(skipped)), and whether the runtime could not be reached
      (C(unreachable)).
    - C(incomplete) is true when the push did not end (the runtime could not be reached, or it failed); any running
      container may be on its old or its new CPUs.
  returned: when O(push)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.zip_import import compile_once

compile_once()  # before the core is imported: each of its modules compiled once in the module's zip

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.checkpoint_file import (
    ACTIONS, CheckpointFile)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_common import run_module
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.module_node import STATE_ARGS, node_config


def checkpoint(module: AnsibleModule) -> dict:
    params = module.params
    target = CheckpointFile(node_config(params), kubelet_stopped=params["kubelet_stopped"])
    return target.run(params["action"], content=params["content"], push=params["push"], apply=not module.check_mode,
                      planned_from=params["planned_from"])


def main() -> None:
    spec = dict(STATE_ARGS, action={"type": "str", "choices": list(ACTIONS), "required": True},
                content={"type": "str"}, kubelet_stopped={"type": "bool", "default": False},
                planned_from={"type": "str"},
                push={"type": "bool", "default": False})
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_if=[("action", "write", ("content",))])
    run_module(module, checkpoint)


if __name__ == "__main__":
    main()
