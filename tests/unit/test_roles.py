"""The roles' interfaces agree with themselves: every option of meta/argument_specs.yml has the same default in
defaults/main.yml and a row in the README, and the variable names the issue fixed are all there."""

from __future__ import annotations

import os

import pytest
import yaml

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
    tasks = load("cpu_manager_agent", "tasks", "present.yml")
    made = next(t for t in tasks if t.get("register") == "__cpu_manager_agent_package_dir")
    assert made["ansible.builtin.tempfile"]["state"] == "directory" and made["delegate_to"] == "localhost"
    block = next(t for t in tasks if "block" in t)
    assert any("__cpu_manager_agent_archive" in str(t) for t in block["block"])
    (cleanup,) = block["always"]
    assert cleanup["ansible.builtin.file"] == {"path": "{{ __cpu_manager_agent_package_dir.path }}", "state": "absent"}
