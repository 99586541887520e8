"""The hook installed the way the agent role installs it (operations/runtime_hook.py, the cpu_manager_runtime_hook
module), judged by real containerd 1.6, 1.7.24, 2.1.9 and 2.4.2: ``containerd config dump`` reads the edited
configuration with the spec for the runc handler, ``ctr oci spec`` is the base, a container started from that spec
runs its first instruction on its exclusive CPU, and removal leaves every file byte for byte as it was. On
containerd 2 the configuration is what ``containerd config default`` writes, with the operator's settings in
imported files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, ContainerRuntimeError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (
    Containerd, dumped_base_spec, hook_entry, install_crio, remove_crio, without_hook)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.containerd_corpus import CASES, THEIRS, write_case

from runtimes import runtime_binaries, runtime_lab
from test_hook import FIRST_LINE, KUBECPU, ROOT, first_line


def real_run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise ConfigError("%s: %s" % (" ".join(argv), done.stderr.strip()))
    return done.stdout


@pytest.fixture(scope="module", params=["containerd 1.6", "containerd 1.7.24"])
def binaries(request):
    return runtime_binaries(request.param)


def hook_for(tmp_path, python):
    """The agent's configuration for the hook (CPU 0 reserved, its state in ``tmp_path``), where the base spec with
    the hook goes, and the hook's entry."""
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps({"state": str(tmp_path / "state"), "reserved_cpus": "0",
                                 "kubelet_state": str(tmp_path / "no-kubelet-state"), "period": "10s"}))
    return str(tmp_path / "base-runtime-spec.json"), hook_entry(python, KUBECPU, str(agent), 10)


def placed_from_the_first_instruction(lab):
    """Through the hook, a Guaranteed container's first instruction runs on its exclusive CPU (1), a Burstable one's
    on the shared pool (0); both pods are removed after."""
    app = lab.run_pod("app", "Guaranteed", [{"name": "app", "cpu": 1000, "command": FIRST_LINE}])
    assert first_line(app) == "1"
    web = lab.run_pod("web", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
    assert first_line(web) == "0"
    lab.remove_pod(web)
    lab.remove_pod(app)


def test_installed_run_and_removed_on_a_real_containerd(binaries, tmp_path, bare_python):
    import lab as lab_module  # conftest put scripts/ on the path

    config = tmp_path / "config.toml"
    original = lab_module.CONFIG.format(dir=tmp_path / "unused", pause=lab_module.PAUSE_IMAGE, systemd="false",
                                        base_spec="")
    config.write_text(original)
    spec, entry = hook_for(tmp_path, bare_python)
    containerd = Containerd(str(config), "runc", spec, real_run, binaries)

    done = containerd.install(entry, check=False)
    assert done.changed and done.restart
    added = set(config.read_text().splitlines()) - set(original.splitlines())
    assert added == {'      base_runtime_spec = "%s"' % spec}  # one line, indented as its table
    dump = real_run([containerd.containerd, "--config", str(config), "config", "dump"])
    assert dumped_base_spec(dump, "runc") == spec
    assert not containerd.install(entry, check=False).changed

    with lab_module.Lab(str(tmp_path / "lab"), binaries=binaries or None, base_spec=spec) as lab:
        placed_from_the_first_instruction(lab)

    assert containerd.remove(check=False).changed and config.read_text() == original
    assert not os.path.exists(spec) and not containerd.remove(check=False).changed


OPERATORS_RUNC = """version = 3
# the operator's runtime handler, in a drop-in as distributions ship them
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  base_runtime_spec = ''
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = false
"""


def containerd2_files(tmp_path, binaries):
    """containerd 2's configuration as a node has it: ``containerd config default`` (its ``imports``, [] on 2.1 and
    /etc/containerd/conf.d/*.toml on 2.4, pointed at the test's drop-in directory), the lab's settings (paths, sandbox
    image) in one drop-in, the operator's handler in another. Returns the main file, the lab, and every file's
    text."""
    import lab as lab_module

    main, conf = tmp_path / "config.toml", tmp_path / "conf.d"
    conf.mkdir()
    default = real_run([os.path.join(binaries, "containerd"), "config", "default"])
    assert re.search(r"^version = [34]$", default, re.MULTILINE)  # 2.1: 3; 2.4: 4 (and a drop-in directory)
    main.write_text(re.sub(r"^imports = \[.*\]$", "imports = ['%s/*.toml']" % conf, default, count=1,
                           flags=re.MULTILINE))
    lab = lab_module.Lab(str(tmp_path / "lab"), binaries=binaries)
    (conf / "10-lab.toml").write_text(lab.config_text())
    (conf / "20-runc.toml").write_text(OPERATORS_RUNC)
    files = (main, conf / "10-lab.toml", conf / "20-runc.toml")
    return main, lab, {path: open(path, encoding="utf-8").read() for path in files}


@pytest.mark.parametrize("runtime", ["containerd 2.1.9", "containerd 2.4.2"])
def test_on_containerd_2_as_shipped_with_the_operators_settings_imported(runtime, tmp_path, bare_python):
    binaries = runtime_binaries(runtime)
    main, lab, before = containerd2_files(tmp_path, binaries)
    spec, entry = hook_for(tmp_path, bare_python)
    containerd = Containerd(str(main), "runc", spec, real_run, binaries)

    done = containerd.install(entry, check=False)
    runc = str(tmp_path / "conf.d" / "20-runc.toml")
    assert done.changed and done.restart and runc in done.files  # the file whose table containerd 2 takes last
    after = {path: open(path, encoding="utf-8").read() for path in before}
    assert [path for path in before if after[path] != before[path]] == [tmp_path / "conf.d" / "20-runc.toml"]
    assert set(after[tmp_path / "conf.d" / "20-runc.toml"].splitlines()) ^ set(OPERATORS_RUNC.splitlines()) == {
        "  base_runtime_spec = ''", "  base_runtime_spec = '%s'" % spec}  # one line, in containerd 2's quotes
    dump = real_run([containerd.containerd, "--config", str(main), "config", "dump"])
    assert dumped_base_spec(dump, "runc") == spec and "SystemdCgroup = false" in dump
    assert not containerd.install(entry, check=False).changed

    lab.config = after[main]
    with lab:
        placed_from_the_first_instruction(lab)

    assert containerd.remove(check=False).changed
    assert {path: open(path, encoding="utf-8").read() for path in before} == before  # byte for byte
    assert not os.path.exists(spec) and not containerd.remove(check=False).changed


@pytest.mark.parametrize("runtime", ["containerd 2.1.9", "containerd 2.4.2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_corpus_config_as_a_real_containerd_reads_it(runtime, case, tmp_path):
    """The unit tests' corpus of containerd 2 configurations (tests/unit/support/containerd_corpus.py: globs, relative
    and nested imports, comment-only and empty drop-ins, drop-ins that redefine the runc table, quoted keys, CRLF,
    trailing comments, version 2) judged by the real containerd's ``config dump``: after install containerd runs
    kubecpu's spec, made from the base spec it ran with before (the operator's rlimits survive) with the hook; a
    second install changes nothing; absent gives every file back byte for byte and containerd its base spec."""
    binaries = runtime_binaries(runtime)
    before = write_case(str(tmp_path), case)
    main = str(tmp_path / "config.toml")
    containerd = Containerd(main, "runc", str(tmp_path / "kubecpu" / "base-runtime-spec.json"), real_run, binaries)

    def dumped():
        return dumped_base_spec(real_run([containerd.containerd, "--config", main, "config", "dump"]), "runc")

    ran_with = dumped()
    entry = hook_entry(sys.executable, KUBECPU, str(tmp_path / "agent.json"), 10)
    assert containerd.install(entry, check=False).changed
    assert dumped() == containerd.spec
    with open(containerd.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    assert spec["hooks"]["createRuntime"] == [entry]
    if ran_with is not None:
        with open(ran_with, encoding="utf-8") as handle:
            assert without_hook(spec) == json.load(handle)
        assert spec["process"]["rlimits"] == THEIRS["process"]["rlimits"]  # the operator's rlimits survive
    else:  # containerd's default spec, as this containerd's ctr makes it
        assert without_hook(spec) == json.loads(real_run([containerd.ctr, "oci", "spec"]))
    assert not containerd.install(entry, check=False).changed
    assert containerd.remove(check=False).changed
    for path, text in before.items():
        with open(path, "rb") as handle:
            assert handle.read() == text.encode("utf-8"), path  # byte for byte
    assert dumped() == ran_with and not os.listdir(tmp_path / "kubecpu")


def test_on_cri_o_the_hooks_d_file_places_containers_before_their_first_instruction(tmp_path, bare_python):
    """CRI-O 1.36.3 runs every container the kubelet asks for through kubecpu's hooks.d file (createRuntime): a
    Guaranteed container starts on its exclusive CPU, a Burstable one on the shared pool, one that cannot get its CPUs
    is not created; a container without the kubelet's annotations (podman reads hooks.d too) is not hooked; taking the
    file out leaves the directory empty."""
    _spec, entry = hook_for(tmp_path, bare_python)
    lab = runtime_lab("cri-o 1.36.3", str(tmp_path / "lab"))
    assert install_crio(lab.hooks_dir, entry, check=False).changed  # before CRI-O starts: no race with its watch
    assert not install_crio(lab.hooks_dir, entry, check=False).changed
    with lab:
        app = lab.run_pod("app", "Guaranteed", [{"name": "app", "cpu": 1000, "command": FIRST_LINE}])
        assert first_line(app) == "1"
        web = lab.run_pod("web", "Burstable", [{"name": "app", "cpu": 250, "command": FIRST_LINE}])
        assert first_line(web) == "0"
        with pytest.raises(ContainerRuntimeError, match="not created: no exclusive CPUs for it"):  # CPU 1 is app's: fails closed
            lab.run_pod("late", "Guaranteed", [{"name": "app", "cpu": 1000, "command": FIRST_LINE}])
        # a container the kubelet did not ask for (no restart count: podman's, say) is not run through the hook at all
        plain = lab.run_pod("plain", "Guaranteed", [{"name": "app", "cpu": 1000, "command": FIRST_LINE,
                                                     "annotations": {}}])
        assert first_line(plain) == "0-1"
        lab.remove_pod(plain)
        assert json.loads((tmp_path / "state").read_text())["entries"] == {app["uid"]: {"app": "1"}}
        lab.remove_pod(web)
        lab.remove_pod(app)
        assert remove_crio(lab.hooks_dir, check=False).changed and os.listdir(lab.hooks_dir) == []


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


def role_hook(tmp_path, fail_closed, python, check=False, binaries="", runtime_vars=None):
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
             "cpu_manager_agent_containerd_binaries": binaries,
             "cpu_manager_agent_hook_spec_path": str(tmp_path / "base-runtime-spec.json"), **(runtime_vars or {})}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="default")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            str(playbook), "-e", json.dumps(extra)] + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return int(re.search(r"changed=(\d+)", proc.stdout).group(1)), proc.stdout


@pytest.mark.parametrize("runtime", ["containerd 1.6", "containerd 1.7.24", "containerd 2.1.9", "containerd 2.4.2",
                                     "cri-o 1.36.3"])
def test_the_agent_roles_hook_tasks_install_verify_and_undo(runtime, tmp_path, bare_python):
    """The role's tasks for cpu_manager_fail_closed on each runtime: check mode writes nothing, the hook goes in (for
    containerd: verified by its config dump, taken at its restart; for CRI-O: its hooks.d file, watched, no restart)
    and passes the probe container, a second run changes nothing, and taking it out leaves every file as it was."""
    import lab as lab_module

    binaries, runtime_vars = runtime_binaries(runtime), {}
    if runtime.startswith("cri-o"):  # hooks.d: the directory's files are what the role changes
        hooks = tmp_path / "hooks.d"
        hooks.mkdir()
        runtime_vars = {"cpu_manager_agent_hook_runtime": "crio", "cpu_manager_agent_crio_hooks_dir": str(hooks)}
        before: dict = {}

        def files():
            return {path: path.read_text() for path in hooks.iterdir()}
    else:
        if runtime.startswith("containerd 2"):  # its default configuration, the operator's handler imported
            main, _lab, before = containerd2_files(tmp_path, binaries)
        else:  # 1.x: version 2, one file
            main = tmp_path / "config.toml"
            main.write_text(lab_module.CONFIG.format(dir=tmp_path / "unused", pause=lab_module.PAUSE_IMAGE,
                                                     systemd="false", base_spec=""))
            before = {main: main.read_text()}

        def files():
            return {path: path.read_text() for path in before}

    def role(fail_closed, check=False):
        return role_hook(tmp_path, fail_closed, bare_python, check=check, binaries=binaries,
                         runtime_vars=runtime_vars)

    (tmp_path / "agent.json").write_text(json.dumps({"state": str(tmp_path / "state"), "reserved_cpus": "0"}))
    changed, _out = role(True, check=True)
    assert changed == 1 and files() == before  # check mode: nothing written
    changed, out = role(True)
    assert changed == 1 and "Run the hook's command line from the runtime's spec" in out  # it passed the probe
    if runtime.startswith("cri-o"):
        installed = json.loads((tmp_path / "hooks.d" / "kubecpu.json").read_text())
        assert installed["stages"] == ["createRuntime"] and installed["hook"]["args"][:3] == [bare_python, "-I", "-S"]
        assert "containerd takes it when it restarts" not in out  # CRI-O watches the directory
    else:
        assert "containerd takes it when it restarts" in out
        spec = json.loads((tmp_path / "base-runtime-spec.json").read_text())
        assert spec["hooks"]["createRuntime"][0]["args"][:3] == [bare_python, "-I", "-S"]
    assert role(True)[0] == 0  # idempotent
    assert role(False)[0] == 1
    assert files() == before and not (tmp_path / "base-runtime-spec.json").exists()
    assert role(False)[0] == 0
