"""The hook installed the way the agent role installs it (operations/runtime_hook.py, the cpu_manager_runtime_hook
module), judged by real containerd 1.6 and 1.7.24: ``containerd config dump`` reads the edited config.toml with the
spec for the runc handler, ``ctr oci spec`` is the base, a container started from that spec runs its first
instruction on its exclusive CPU, and removal leaves config.toml byte for byte as it was."""

from __future__ import annotations

import json
import os
import subprocess

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
