"""The hook installed the way the agent role installs it (operations/runtime_hook.py, the cpu_manager_runtime_hook
module), judged by real containerd 1.6 and 1.7.24: ``containerd config dump`` reads the edited config.toml with the
spec for the runc handler, ``ctr oci spec`` is the base, a container started from that spec runs its first
instruction on its exclusive CPU, and removal leaves config.toml byte for byte as it was."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (
    Containerd, dumped_base_spec, hook_entry)

from test_hook import FIRST_LINE, KUBECPU, ROOT, first_line


def real_run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise ConfigError("%s: %s" % (" ".join(argv), done.stderr.strip()))
    return done.stdout


@pytest.fixture(scope="module", params=["containerd 1.6", "containerd 1.7.24"])
def binaries(request):
    if request.param == "containerd 1.6":
        return ""
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "containerd-nri.sh")], capture_output=True,
                          text=True, check=True, timeout=600).stdout.strip().splitlines()[-1]


def test_installed_run_and_removed_on_a_real_containerd(binaries, tmp_path, bare_python):
    import lab as lab_module  # conftest put scripts/ on the path

    config = tmp_path / "config.toml"
    original = lab_module.CONFIG.format(dir=tmp_path / "unused", pause=lab_module.PAUSE_IMAGE, systemd="false",
                                        base_spec="")
    config.write_text(original)
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps({"state": str(tmp_path / "state"), "reserved_cpus": "0",
                                 "kubelet_state": str(tmp_path / "no-kubelet-state"), "period": "10s"}))
    spec = str(tmp_path / "base-runtime-spec.json")
    containerd = Containerd(str(config), "runc", spec, real_run, binaries)
    entry = hook_entry(bare_python, KUBECPU, str(agent), 10)

    done = containerd.install(entry, check=False)
    assert done.changed and done.restart
    added = set(config.read_text().splitlines()) - set(original.splitlines())
    assert added == {'      base_runtime_spec = "%s"' % spec}  # one line, indented as its table
    dump = real_run([containerd.containerd, "--config", str(config), "config", "dump"])
    assert dumped_base_spec(dump, "runc") == spec
    assert not containerd.install(entry, check=False).changed

    with lab_module.Lab(str(tmp_path / "lab"), binaries=binaries or None, base_spec=spec) as lab:
        app = lab.run_pod("app", "Guaranteed", [{"name": "app", "cpu": 1000, "command": FIRST_LINE}])
        assert first_line(app) == "1"
        web = lab.run_pod("web", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
        assert first_line(web) == "0"
        lab.remove_pod(web)
        lab.remove_pod(app)

    assert containerd.remove(check=False).changed and config.read_text() == original
    assert not os.path.exists(spec) and not containerd.remove(check=False).changed


HOOK_TASKS = """---
- name: The agent role's OCI hook tasks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Fail closed, or not
      ansible.builtin.include_role:
        name: kubecpu.cpu_manager.cpu_manager_agent
        tasks_from: hook.yml
"""


def role_hook(tmp_path, fail_closed, python, check=False):
    """The role's hook tasks on this machine (containerd 1.6 from Debian; no restart: the test's containerd is not
    a service); the PLAY RECAP's changed count."""
    from test_modules import collections_path

    playbook = tmp_path / "hook.yml"
    playbook.write_text(HOOK_TASKS)
    install = tmp_path / "install"  # the package's layout (present.yml packs it), its members this checkout's
    if not install.exists():
        install.mkdir()
        for member, source in (("bin", "bin"), ("plugins", "plugins"),
                               ("hook-probe", "roles/cpu_manager_agent/files/hook-probe")):
            (install / member).symlink_to(os.path.join(ROOT, source))
    extra = {"cpu_manager_fail_closed": fail_closed, "cpu_manager_agent_install_dir": str(install),
             "cpu_manager_agent_config_path": str(tmp_path / "agent.json"), "cpu_manager_agent_python": python,
             "cpu_manager_agent_containerd_config": str(tmp_path / "config.toml"),
             "cpu_manager_agent_containerd_service": "", "ansible_python_interpreter": sys.executable,
             "cpu_manager_agent_hook_spec_path": str(tmp_path / "base-runtime-spec.json")}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="default")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            str(playbook), "-e", json.dumps(extra)] + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return int(re.search(r"changed=(\d+)", proc.stdout).group(1)), proc.stdout


def test_the_agent_roles_hook_tasks_install_verify_and_undo(tmp_path, bare_python):
    import lab as lab_module

    original = lab_module.CONFIG.format(dir=tmp_path / "unused", pause=lab_module.PAUSE_IMAGE, systemd="false",
                                        base_spec="")
    (tmp_path / "config.toml").write_text(original)
    (tmp_path / "agent.json").write_text(json.dumps({"state": str(tmp_path / "state"), "reserved_cpus": "0"}))
    changed, _out = role_hook(tmp_path, True, bare_python, check=True)
    assert changed == 1 and (tmp_path / "config.toml").read_text() == original  # check mode: nothing written
    changed, out = role_hook(tmp_path, True, bare_python)
    assert changed == 1 and "containerd takes it when it restarts" in out
    assert "Run the hook's command line from the runtime's spec" in out  # and it passed the probe container
    spec = json.loads((tmp_path / "base-runtime-spec.json").read_text())
    assert spec["hooks"]["createRuntime"][0]["args"][:3] == [bare_python, "-I", "-S"]
    assert role_hook(tmp_path, True, bare_python)[0] == 0  # idempotent
    assert role_hook(tmp_path, False, bare_python)[0] == 1
    assert (tmp_path / "config.toml").read_text() == original and not (tmp_path / "base-runtime-spec.json").exists()
    assert role_hook(tmp_path, False, bare_python)[0] == 0
