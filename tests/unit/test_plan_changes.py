"""The fleet plan's list of changes for a node (playbooks/templates/plan_changes.j2), rendered as plan.yml renders it:
after the role's plan tasks included with tasks_from (public: no, so the role's own vars are not visible to the
template; a registered result is). An agent whose files changed after it started (a run cut off before its restart)
is said to be restarted, as the rollout then does. (Found by a review: the template read a role variable and its
default hid that it was never there.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    kubecpu_manager: agent
    kubecpu_plan_error:
  tasks:
    - ansible.builtin.include_role:
        name: cpu_manager_agent
        tasks_from: plan.yml
    - ansible.builtin.set_fact:
        changes: "{{ (lookup('ansible.builtin.template', 'templates/plan_changes.j2') or '') | trim | split(',')
                     | reject('equalto', '') | list }}"
    - ansible.builtin.copy:
        content: "{{ changes | to_json }}"
        dest: "{{ playbook_dir }}/changes.json"
"""
# what the role's plan.yml leaves on an installed node whose agent started before its configuration was written
PLAN_TASKS = """
- ansible.builtin.set_fact:
    cpu_manager_agent_preflight_result:
      service: {unit: kubecpu-agent.service, running: true, changed_since_start: [/etc/kubecpu/agent.json]}
    cpu_manager_agent_plan: {installed: true, config: {}, config_changed: false}
"""


def test_the_fleet_plan_says_an_agent_older_than_its_files_is_restarted(tmp_path):
    role = tmp_path / "roles" / "cpu_manager_agent"
    (role / "tasks").mkdir(parents=True)
    (role / "vars").mkdir()
    shutil.copy(os.path.join(ROOT, "roles", "cpu_manager_agent", "vars", "main.yml"), str(role / "vars" / "main.yml"))
    (role / "tasks" / "plan.yml").write_text(PLAN_TASKS)
    (tmp_path / "templates").mkdir()
    shutil.copy(os.path.join(ROOT, "playbooks", "templates", "plan_changes.j2"), str(tmp_path / "templates"))
    (tmp_path / "plan.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"))
    # ansible-playbook's own entry point through this interpreter: under ansible-test units no console script is
    # installed beside it, nor a distribution for ``python -m ansible``
    cli = "import sys; from ansible.cli.playbook import main; sys.argv[0] = 'ansible-playbook'; main()"
    done = subprocess.run([sys.executable, "-c", cli, "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, "plan.yml"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    changes = json.loads((tmp_path / "changes.json").read_text())
    assert changes == ["restart agent (its files changed since it started)"]
