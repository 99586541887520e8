"""The roles' interfaces agree with themselves: every option of meta/argument_specs.yml has the same default in
defaults/main.yml and a row in the README, and the variable names the issue fixed are all there."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.unit_sandbox import run_sandboxed

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.role_tasks import Runner, Systemd, TaskFailed, trusted

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIRED = {
    "kubelet_cpu_manager": [
        "kubelet_cpu_manager_policy", "kubelet_cpu_manager_policy_options", "kubelet_cpu_manager_reconcile_period",
        "kubelet_cpu_manager_reserved_cpus", "kubelet_cpu_manager_num_reserved",
        "kubelet_cpu_manager_topology_manager_policy", "kubelet_cpu_manager_topology_manager_scope",
        "kubelet_cpu_manager_kubelet_version", "kubelet_cpu_manager_config_path", "kubelet_cpu_manager_state_path",
        "kubelet_cpu_manager_service", "kubelet_cpu_manager_health_url", "kubelet_cpu_manager_drain_command",
        "kubelet_cpu_manager_uncordon_command"],
    "cpu_manager_agent": [
        "cpu_manager_agent_state", "cpu_manager_agent_policy", "cpu_manager_agent_policy_options",
        "cpu_manager_agent_reserved_cpus", "cpu_manager_agent_num_reserved", "cpu_manager_agent_runtime",
        "cpu_manager_agent_runtime_endpoint", "cpu_manager_agent_crictl_path", "cpu_manager_agent_period",
        "cpu_manager_agent_metrics_path", "cpu_manager_agent_install_dir", "cpu_manager_agent_isolated_cpus",
        "cpu_manager_agent_align_memory", "cpu_manager_agent_cpu_quota"],
}


# Variables an issue named outside the role's prefix (issue 25: fail closed, issue 26: interrupt isolation), kept as
# named: a stable interface.
UNPREFIXED = {"cpu_manager_agent": {"cpu_manager_fail_closed", "cpu_manager_irq_isolation"}}


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts), encoding="utf-8") as handle:
        return handle.read() if parts[-1].endswith(".md") else yaml.safe_load(handle)


@pytest.mark.parametrize("role", sorted(REQUIRED))
def test_argument_specs_defaults_and_readme_agree(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(role, "defaults", "main.yml")
    readme = load(role, "README.md")
    assert set(REQUIRED[role]) <= set(options)
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert name.startswith(role + "_") or name in UNPREFIXED.get(role, ()), name
        assert spec.get("description"), name
        assert defaults[name] == spec.get("default"), name
        assert "| `%s` |" % name in readme, name


def test_the_agent_package_is_built_in_a_directory_of_the_runs_own():
    """Two runs of one user at once must not share the controller-side archive: it lives in a fresh tempfile
    directory registered by this run, and that directory is removed whatever happens."""
    archive = load("cpu_manager_agent", "vars", "main.yml")["__cpu_manager_agent_archive"]
    assert archive == "{{ __cpu_manager_agent_package_dir.path }}/kubecpu-agent.tar"
    (install,) = [t for t in load("cpu_manager_agent", "tasks", "present.yml") if "block" in t]
    tasks = install["block"]  # the installation, whose failure on a fresh node takes back what it made
    made = next(t for t in tasks if t.get("register") == "__cpu_manager_agent_package_dir")
    assert made["ansible.builtin.tempfile"]["state"] == "directory" and made["delegate_to"] == "localhost"
    block = next(t for t in tasks if "block" in t)
    assert any("__cpu_manager_agent_archive" in str(t) for t in block["block"])
    (cleanup,) = block["always"]
    assert cleanup["ansible.builtin.file"] == {"path": "{{ __cpu_manager_agent_package_dir.path }}", "state": "absent"}


def rescue_of(tasks_file):
    (change,) = [task for task in load("kubelet_cpu_manager", "tasks", tasks_file) if "rescue" in task]
    return change["rescue"]


def systemd_state(task):
    return (task.get("ansible.builtin.systemd_service") or {}).get("state")


def writes_a_kubelet_file(task):
    """The task writes the checkpoint or the kubelet configuration (a copy onto either, or the checkpoint module)."""
    copy = task.get("ansible.builtin.copy") or {}
    return copy.get("dest") in ("{{ kubelet_cpu_manager_state_path }}", "{{ kubelet_cpu_manager_config_path }}") or \
        "kubecpu.cpu_manager.cpu_manager_checkpoint" in task


@pytest.mark.parametrize("tasks_file", ["rewrite.yml", "migrate.yml"])
def test_the_rescue_stops_the_kubelet_before_it_puts_anything_back(tasks_file):
    """(Issue 63, suspected: a kubelet still running during the rollback admits pods whose entries the restore
    drops.) The block may have started the kubelet (a health gate failed after the start): the rescue's first task
    stops it, every task that writes the checkpoint or the configuration comes after that and runs only when the stop
    worked, and the kubelet is started only after the last of them."""
    rescue = rescue_of(tasks_file)
    assert systemd_state(rescue[0]) == "stopped" and rescue[0]["register"] == "__kubelet_cpu_manager_stopped"
    writers = [index for index, task in enumerate(rescue) if writes_a_kubelet_file(task)]
    starts = [index for index, task in enumerate(rescue) if systemd_state(task) in ("started", "restarted")]
    assert writers and starts == [max(starts)] and max(writers) < starts[0]
    facts = {name: value for task in rescue for name, value in (task.get("ansible.builtin.set_fact") or {}).items()}
    for index in [*writers, *starts]:
        when = rescue[index].get("when")
        condition = " and ".join(when) if isinstance(when, list) else str(when)
        assert "__kubelet_cpu_manager_stopped is not failed" in condition or (
            "__kubelet_cpu_manager_moved_live" in condition
            and "__kubelet_cpu_manager_stopped is not failed" in facts["__kubelet_cpu_manager_moved_live"]), rescue[index]


@pytest.mark.parametrize("tasks_file", sorted(os.listdir(os.path.join(ROOT, "roles", "kubelet_cpu_manager", "tasks"))))
def test_a_result_whose_failure_is_read_is_not_hidden_by_failed_when_false(tasks_file):
    """``failed_when: false`` sets the result's ``failed`` to false (ansible-core does), so a message that reads
    ``<result>.failed`` or ``<result> is failed`` would never see the failure: such a task ignores its errors
    instead (``ignore_errors: true``, registered)."""
    tasks = load("kubelet_cpu_manager", "tasks", tasks_file) or []
    flat = [task for block in tasks for task in [block, *block.get("block", []), *block.get("rescue", [])]]
    text = yaml.safe_dump(tasks, width=10000)
    for task in flat:
        if task.get("failed_when") is False and task.get("register"):
            name = task["register"]
            assert "%s.failed" % name not in text and "%s is failed" % name not in text, task["name"]
            assert "%s is not failed" % name not in text, task["name"]


def test_the_drain_paths_rescue_puts_the_checkpoint_back_under_a_stopped_kubelet(tmp_path):
    """The drain path started the kubelet on an empty checkpoint and its health gate failed: it may have admitted a
    DaemonSet's pod meanwhile. The rescue (run as ansible-playbook would, support.role_tasks) stops the kubelet,
    puts the backup and the configuration back while it is stopped, starts it on them and uncordons."""
    state, config, backup = tmp_path / "cpu_manager_state", tmp_path / "config.yaml", tmp_path / "state.bak"
    backup.write_bytes(b'{"policyName":"none","defaultCpuSet":"","checksum":1353318690}')
    state.write_bytes(b'{"policyName":"static","defaultCpuSet":"0-3","checksum":0}')  # the fresh kubelet's
    config.write_bytes(b"cpuManagerPolicy: static\n")
    (tmp_path / "config.yaml.old").write_bytes(b"cpuManagerPolicy: none\n")
    systemd = Systemd(str(state), str(config), running=True)
    runner = Runner({**trusted(load("kubelet_cpu_manager", "vars", "main.yml")),  # the role's own, as Ansible loads them
                     "kubelet_cpu_manager_service": "kubelet", "kubelet_cpu_manager_state_path": str(state),
                     "kubelet_cpu_manager_config_path": str(config), "kubelet_cpu_manager_backup": str(backup),
                     "kubelet_cpu_manager_command_host": "localhost",
                     "kubelet_cpu_manager_uncordon_command": ["kubectl", "uncordon", "node-1"],
                     "__kubelet_cpu_manager_backed_up": {"changed": True, "dest": str(backup)},
                     "__kubelet_cpu_manager_drained": {"changed": True, "rc": 0},
                     "__kubelet_cpu_manager_written": {"changed": True, "backup_file": str(tmp_path / "config.yaml.old")},
                     "ansible_failed_result": {"failed": True, "msg": "the kubelet did not stay healthy"}}, systemd)
    with pytest.raises(TaskFailed) as failed:
        runner.run(trusted(rescue_of("migrate.yml")))
    assert [call["state"] for call in systemd.calls] == ["stopped", "started"]
    assert runner.writes and not [write for write in runner.writes if write["kubelet_running"]]
    assert systemd.calls[-1]["checkpoint"] == backup.read_bytes()
    assert systemd.calls[-1]["config"] == b"cpuManagerPolicy: none\n"
    assert runner.commands == [["kubectl", "uncordon", "node-1"]]
    assert failed.value.result["msg"] == (
        "the kubelet did not stay healthy -- rolled back: the checkpoint was put back from %s, the previous "
        "configuration was put back from %s, the kubelet was started again, and the node was uncordoned"
        % (backup, tmp_path / "config.yaml.old"))


def agent_unit(tmp_path=None, **settings):
    """The agent's systemd unit as the role writes it: its template rendered by ansible-core's templar over the
    role's defaults and vars, and ``settings`` (``ansible_facts`` as the play gathered them, or not)."""
    def trusted(value):
        if isinstance(value, str):
            return trust_as_template(value)
        if isinstance(value, dict):
            return {key: trusted(item) for key, item in value.items()}
        return [trusted(item) for item in value] if isinstance(value, list) else value

    variables = dict(trusted(load("cpu_manager_agent", "defaults", "main.yml")),
                     **trusted(load("cpu_manager_agent", "vars", "main.yml")))
    variables.update(ansible_managed="Ansible managed", role_path=os.path.join(ROOT, "roles", "cpu_manager_agent"),
                     ansible_facts={})
    variables.update(settings)
    with open(os.path.join(ROOT, "roles", "cpu_manager_agent", "templates", "kubecpu-agent.service.j2"),
              encoding="utf-8") as handle:
        text = trust_as_template(handle.read())
    return Templar(loader=DataLoader(), variables=variables).template(text)


def writable_paths(unit):
    (line,) = [line for line in unit.splitlines() if line.startswith("ReadWritePaths=")]
    return line.split("=", 1)[1].split()


DEBIAN, SYSCONFIG = "-/etc/default/irqbalance", "-/etc/sysconfig/irqbalance"


@pytest.mark.parametrize("isolation, facts, irqbalance", [
    ("exclusive", {"os_family": "Debian"}, [DEBIAN]),
    ("annotated", {"os_family": "RedHat"}, [SYSCONFIG]),
    ("exclusive", {"os_family": "Suse"}, [SYSCONFIG]),
    ("exclusive", {}, [DEBIAN, SYSCONFIG]),  # the play gathered no facts (the collection's playbooks do not)
    ("exclusive", {"os_family": "Archlinux"}, [DEBIAN, SYSCONFIG]),
    ("off", {"os_family": "Debian"}, []),
])
def test_the_agents_unit_lets_it_write_irqbalances_file_and_nothing_else_of_etc(isolation, facts, irqbalance):
    """issue 62: the unit made all of /etc/default writable (ReadWritePaths=-/etc/default), and on RHEL not the
    file irqbalance reads there, /etc/sysconfig/irqbalance. Now: the distribution's file, and only it."""
    unit = agent_unit(cpu_manager_irq_isolation=isolation, ansible_facts=facts)
    assert writable_paths(unit) == ["/var/lib/kubecpu", "/var/lib/kubecpu/metrics"] + irqbalance
    assert ("kubecpu rewrites it in place" in unit) is bool(irqbalance)


PERSIST = """
import json
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import machine_files
balance = machine_files(root)[1]
try:
    print(json.dumps([balance.env_file[len(root):], balance.persist(CPUSet.parse("2-3"))]))
except HousekeepingError as exc:
    print(json.dumps([balance.env_file[len(root):], str(exc)]))
"""


@pytest.mark.parametrize("family, layout, written", [
    ("Debian", ["etc/debian_version", "etc/default/irqbalance"], "/etc/default/irqbalance"),
    ("RedHat", ["etc/sysconfig/irqbalance"], "/etc/sysconfig/irqbalance"),
    ("RedHat", ["etc/sysconfig/irqbalance", "etc/default/irqbalance"], "/etc/sysconfig/irqbalance"),
    ("Suse", ["etc/sysconfig/irqbalance"], "/etc/sysconfig/irqbalance"),
    (None, ["etc/debian_version", "etc/default/irqbalance"], "/etc/default/irqbalance"),
    (None, ["etc/sysconfig/irqbalance"], "/etc/sysconfig/irqbalance"),
])
def test_the_file_the_agent_writes_is_the_one_its_unit_lets_it_write(tmp_path, family, layout, written):
    """issue 62: interrupt isolation failed on RHEL (/etc/sysconfig/irqbalance read-only in the unit's namespace).
    The core's choice of file and the role's unit agree on each distribution: the agent, run with the unit's
    writable paths enforced by the kernel (support.unit_sandbox), writes its block."""
    for path in layout:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("IRQBALANCE_ARGS=\n")
    unit = agent_unit(cpu_manager_irq_isolation="exclusive", ansible_facts={"os_family": family} if family else {})
    irqbalance = [path for path in writable_paths(unit) if path.startswith("-/etc/")]
    assert run_sandboxed(str(tmp_path), irqbalance, PERSIST) == [written, True]
    assert (tmp_path / written.lstrip("/")).read_text().endswith("IRQBALANCE_BANNED_CPULIST=2-3\n")


def test_the_agents_unit_is_one_systemd_takes_without_a_warning(tmp_path):
    """systemd-analyze verify: every directive known, every path absolute, the command executable."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubecpu").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "bin" / "kubecpu", 0o755)
    for isolation, facts in (("off", {}), ("exclusive", {}), ("exclusive", {"os_family": "RedHat"})):
        unit = tmp_path / "kubecpu-agent.service"
        unit.write_text(agent_unit(cpu_manager_irq_isolation=isolation, ansible_facts=facts,
                                   cpu_manager_agent_install_dir=str(tmp_path)))
        done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                              check=False)
        assert (done.returncode, done.stderr) == (0, ""), (isolation, facts)


def agent_config(**settings):
    """The agent's configuration file (agent.json) as the role writes it, over its defaults and ``settings``."""
    variables = dict(trusted(load("cpu_manager_agent", "defaults", "main.yml")),
                     **trusted(load("cpu_manager_agent", "vars", "main.yml")))
    variables.update(settings)
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ __cpu_manager_agent_config | to_json }}"))


@pytest.mark.parametrize("settings, options", [
    ({}, {"exclusive_burstable": False, "system_partition": False, "system_namespaces": (),
          "system_priority_classes": ("system-node-critical",)}),
    ({"cpu_manager_agent_exclusive_burstable": True, "cpu_manager_agent_system_partition": True,
      "cpu_manager_agent_system_namespaces": ["kube-system", "monitoring"],
      "cpu_manager_agent_system_priority_classes": []},
     {"exclusive_burstable": True, "system_partition": True, "system_namespaces": ("kube-system", "monitoring"),
      "system_priority_classes": ()}),
])
def test_the_agents_configuration_gives_each_command_the_options_the_role_was_given(tmp_path, settings, options):
    """The role's variables, through agent.json, are the options every command (the agent, the NRI plugin, the hook)
    reads from it."""
    import json

    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import (
        build_parser, config_arguments, node_config)

    path = tmp_path / "agent.json"
    path.write_text(agent_config(**settings))
    args = build_parser().parse_args(["reconcile"] + config_arguments(str(path)))
    made = node_config(args).options
    assert {name: getattr(made, name) for name in options} == options
    assert set(options) <= set(json.loads(path.read_text()))


@pytest.mark.parametrize("exclusive, partition, refused", [
    (True, False, "cpu_manager_agent_exclusive_burstable changes who holds which CPU"),
    (False, True, "cpu_manager_agent_system_partition changes who holds which CPU"),
    (True, True, "cpu_manager_agent_exclusive_burstable and cpu_manager_agent_system_partition change who holds"),
    (False, False, None),
])
def test_beside_a_kubelet_that_pins_the_role_refuses_what_changes_who_holds_which_cpu(exclusive, partition, refused):
    tasks = load("cpu_manager_agent", "tasks", "refuse_kubelet.yml")
    (task,) = [trusted(t) for t in tasks if t["name"].startswith("Refuse what changes who holds which CPU")]
    runner = Runner(dict(trusted(load("cpu_manager_agent", "defaults", "main.yml")), inventory_hostname="node-1",
                         cpu_manager_agent_exclusive_burstable=exclusive, cpu_manager_agent_system_partition=partition,
                         __cpu_manager_agent_kubelet_policies={"results": [
                             {"ansible_facts": {"__cpu_manager_agent_kubelet_static": "static"},
                              "item": {"source": "/var/lib/kubelet/cpu_manager_state"}}]}), Systemd("/s", "/c"))
    if refused is None:
        assert runner.run_one(task)["skipped"]
        return
    with pytest.raises(TaskFailed) as failed:
        runner.run_one(task)
    assert refused in " ".join(failed.value.result["msg"].split())
    assert "/var/lib/kubelet/cpu_manager_state" in failed.value.result["msg"]
