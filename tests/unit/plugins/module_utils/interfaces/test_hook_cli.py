"""``bin/kubecpu hook`` starts with only what the hook needs (it is on every container's start path): not the CLI's
other commands, the agent, the NRI plugin, the wire protocols, the node manager or the operations, and not argparse
for a command line the hook reads itself (as its parser would: held to it flag by flag and on generated command lines);
and its flags, configuration file and exit codes are every sub-command's."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))  # the collection
CID = "a" * 64
ANNOTATIONS = {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.container-name": "app",
               "io.kubernetes.cri.sandbox-uid": "1111", "io.kubernetes.cri.sandbox-name": "p",
               "io.kubernetes.cri.sandbox-namespace": "lab"}
LOADED = r'''import runpy, sys
sys.argv = [sys.argv[1], "hook"] + sys.argv[2:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(sorted(m for m in sys.modules if m.startswith("kubecpu_core") or m == "argparse"), file=sys.stderr)
sys.exit(code)
'''
STATE = json.dumps({"policyName": "static", "defaultCpuSet": "0", "entries": {"1111": {"app": "1"}},
                    "checksum": 720449844})  # CPU 1 held by the container, as the NRI plugin left it
NOT_THE_HOOKS = ("interfaces.cli", "services.agent", "services.nri_plugin", "runtime.nri_api", "runtime.cri_grpc",
                 "runtime.crictl", "wire.hpack", "wire.grpc_h2", "wire.proto_schema", "wire.protowire", "wire.ttrpc",
                 "operations.", "node.manager", "kubelet.discovery")


def node(tmp_path, cpus="1", shared=False):
    """A Guaranteed container's cgroup (v1) on ``cpus`` (``shared``: a Burstable one on the shared pool, which the
    quick path answers), its bundle, the OCI state; the hook's flags."""
    parent = "/kubepods/burstable/pod2222/" if shared else "/kubepods/pod1111/"
    cgroup = tmp_path / "cgroup" / "cpuset" / (parent.strip("/") + "/" + CID)
    cgroup.mkdir(parents=True)
    (cgroup / "cpuset.cpus").write_text(("0" if shared else cpus) + "\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    cpu = {"shares": 512, "quota": -1, "period": 100000} if shared else {"shares": 1024, "quota": 100000,
                                                                         "period": 100000}
    annotations = dict(ANNOTATIONS, **{"io.kubernetes.cri.sandbox-uid": "2222"}) if shared else ANNOTATIONS
    linux = {"cgroupsPath": parent + CID, "resources": {"cpu": cpu}}
    (bundle / "config.json").write_text(json.dumps({"annotations": annotations, "linux": linux}))
    stdin = json.dumps({"id": CID, "pid": 1, "bundle": str(bundle), "annotations": annotations})
    flags = ["--state", str(tmp_path / "state"), "--reserved-cpus", "0", "--cgroup-root", str(tmp_path / "cgroup"),
             "--kubelet-state", str(tmp_path / "none")]
    return stdin, flags


def hook(stdin, flags):
    return subprocess.run([sys.executable, "-c", LOADED, os.path.join(ROOT, "bin", "kubecpu"), *flags], input=stdin,
                          capture_output=True, text=True, check=False)


def test_checking_imports_only_the_hooks_modules(tmp_path):
    stdin, flags = node(tmp_path)
    (tmp_path / "state").write_text(STATE)
    done = hook(stdin, flags)
    assert done.returncode == 0 and json.loads(done.stdout)["action"] == "checked", done.stderr
    loaded = ast.literal_eval(done.stderr.strip().splitlines()[-1])
    assert not [m for m in loaded for name in NOT_THE_HOOKS
                if m == "kubecpu_core." + name or (name.endswith(".") and m.startswith("kubecpu_core." + name))], loaded


def test_a_refusal_is_exit_1_and_a_bad_flag_exit_2(tmp_path):
    stdin, flags = node(tmp_path)
    (tmp_path / "state").write_text("{")
    refused = hook(stdin, flags)
    assert refused.returncode == 1 and refused.stderr.startswith("container lab/p/app (aaaaaaaaaaaa) not created: ")
    assert hook(stdin, [*flags, "--no-such-flag"]).returncode == 2


@pytest.mark.parametrize("where", ["bundle", "cgroupsPath"])
def test_a_nul_byte_from_the_runtime_is_one_line_and_exit_1_never_a_traceback(tmp_path, where):
    """A path no system call takes, in the OCI state or in config.json: the hook names it; the container is not
    created (fail-closed) and nothing is written."""
    stdin, flags = node(tmp_path)
    state = json.loads(stdin)
    if where == "bundle":
        stdin = json.dumps(dict(state, bundle=state["bundle"] + "\x00x"))
    else:
        config = json.loads((tmp_path / "bundle" / "config.json").read_text())
        config["linux"]["cgroupsPath"] += "\x00"
        (tmp_path / "bundle" / "config.json").write_text(json.dumps(config))
    done = hook(stdin, flags)
    message = done.stderr.splitlines()[0]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert ("no absolute bundle path" if where == "bundle" else "holds a NUL byte") in message
    assert not (tmp_path / "state").exists()


def test_the_agents_configuration_file_serves_the_hook(tmp_path):
    """The role writes one configuration for the service; the hook reads the same file."""
    stdin, flags = node(tmp_path)
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"state": str(tmp_path / "state"), "reserved_cpus": "0", "period": "10s",
                                  "cgroup_root": str(tmp_path / "cgroup"), "kubelet_state": str(tmp_path / "none"),
                                  "metrics_path": str(tmp_path / "m.prom"), "runtime": "cri", "runtime_timeout": 2,
                                  "option": [], "policy": "static", "align_memory": False, "cpu_quota": "keep"}))
    (tmp_path / "state").write_text(STATE)
    done = hook(stdin, ["--config", str(config)])
    assert done.returncode == 0 and json.loads(done.stdout)["action"] == "checked", done.stderr


QUICK_NOT_LOADED = ("interfaces.cli_args", "services.hook", "node.config", "node.state_store", "kubelet.checkpoint",
                    "kubelet.pod", "kubelet.cpuset")


def loaded_modules(done):
    return ast.literal_eval(done.stderr.strip().splitlines()[-1])


def test_a_start_already_checked_once_takes_the_quick_path(tmp_path):
    """The first check reads the state file (and writes the hook's view of it); the next ones read the view and load
    no parser, configuration, checkpoint codec or pod model (a shared container: one with exclusive CPUs always takes
    the full path, which makes sure no other container holds them)."""
    stdin, flags = node(tmp_path, shared=True)
    (tmp_path / "state").write_text(STATE)
    first = hook(stdin, flags)
    assert "kubecpu_core.services.hook" in loaded_modules(first) and os.path.exists(tmp_path / "state.hookview")
    again = hook(stdin, flags)
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout)
    assert json.loads(again.stdout)["action"] == "checked"
    assert not [m for m in loaded_modules(again) for name in QUICK_NOT_LOADED if m == "kubecpu_core." + name]


def test_the_quick_path_reads_the_configuration_file_and_the_flags_win(tmp_path):
    stdin, flags = node(tmp_path, shared=True)
    (tmp_path / "state").write_text(STATE)
    assert hook(stdin, flags).returncode == 0  # the view written
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"state": str(tmp_path / "elsewhere"), "cgroup_root": str(tmp_path / "cgroup"),
                                  "reserved_cpus": "0", "kubelet_state": str(tmp_path / "none")}))
    done = hook(stdin, ["--config", str(config), "--state", str(tmp_path / "state")])
    assert done.returncode == 0 and "kubecpu_core.services.hook" not in loaded_modules(done), done.stderr


@pytest.mark.parametrize("shared", [False, True])
def test_while_the_kubelet_pins_cpus_every_container_is_created_as_the_kubelet_asked(tmp_path, shared):
    """The kubelet's checkpoint says static: exit 0, "passed" with the reason, on stderr too (what the runtime logs),
    answered in the quick path whatever the state; ``--force`` decides as usual."""
    stdin, flags = node(tmp_path, shared=shared)
    (tmp_path / "state").write_text("{")  # even a corrupt state of kubecpu's does not refuse it
    (tmp_path / "none").write_text('{"policyName":"static","defaultCpuSet":"0,2-7","entries":{"x":{"db":"1"}},'
                                   '"checksum":1}')
    done = hook(stdin, flags)
    answer = json.loads(done.stdout)
    assert done.returncode == 0 and answer["action"] == "passed" and answer["cpus"] == ""
    assert "kubelet pins CPUs on this node itself" in answer["note"] and answer["note"] in done.stderr
    assert "kubecpu_core.services.hook" not in loaded_modules(done)
    assert hook(stdin, [*flags, "--force"]).returncode == 1  # forced: kubecpu's corrupt state refuses it


def test_a_corrupt_state_behind_a_view_is_still_refused(tmp_path):
    stdin, flags = node(tmp_path)
    (tmp_path / "state").write_text(STATE)
    assert hook(stdin, flags).returncode == 0
    (tmp_path / "state").write_text(STATE.replace('"1"', '"2"'))  # the checksum no longer matches
    refused = hook(stdin, flags)
    assert refused.returncode == 1 and str(tmp_path / "state") in refused.stderr, refused.stderr


@pytest.mark.parametrize("extra", [["--policy", "none"], ["--read-only"], ["--unknown", "1"], ["--state"], ["-h"]])
def test_what_the_quick_path_does_not_read_goes_to_the_parser(tmp_path, extra):
    stdin, flags = node(tmp_path)
    (tmp_path / "state").write_text(STATE)
    assert hook(stdin, flags).returncode == 0
    done = hook(stdin, flags + extra)
    assert "kubecpu_core.interfaces.cli_args" in loaded_modules(done)


def test_the_quick_paths_flags_are_the_hook_parsers():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import hook_cli
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser

    parser = build_parser(only="hook")
    sub = next(action for action in parser._actions if action.choices and "hook" in action.choices).choices["hook"]
    flags = {option for action in sub._actions for option in action.option_strings} - {"-h", "--help"}
    switches = {option for action in sub._actions for option in action.option_strings if action.nargs == 0} - {
        "-h", "--help"}
    assert switches == set(hook_cli.SWITCHES)
    assert flags == set(hook_cli.QUICK_SETTINGS + hook_cli.SWITCHES + hook_cli.OTHER_FLAGS)


def _hook_subparser():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser

    parser = build_parser(only="hook")
    return parser, next(a for a in parser._actions if a.choices and "hook" in a.choices).choices["hook"]


def test_the_hooks_own_flag_table_is_its_parsers():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import hook_cli

    _parser, sub = _hook_subparser()
    table = hook_cli._flag_table()
    actions = [a for a in sub._actions if a.option_strings and a.option_strings != ["-h", "--help"]]
    assert {a.option_strings[0] for a in actions} == set(table)
    for action in actions:
        kind, default, convert, choices = table[action.option_strings[0]]
        want = "switch" if action.nargs == 0 else "list" if type(action).__name__ == "_AppendAction" else "value"
        assert (kind, default, convert, tuple(choices)) == (want, action.default, action.type,
                                                            tuple(action.choices or ())), action.option_strings


VALUES = {"--state": ["/s", "/var/x"], "--cgroup-root": ["/c"], "--policy": ["static", "none", "bogus"],
          "--num-reserved": ["1", "2", "-1", "x"], "--reserved-cpus": ["0", "0-1", "7-3"], "--option": ["a", "b=c"],
          "--kubelet-version": ["1.37"], "--feature-gate": ["X=true"], "--runtime": ["cri", "crictl", "podman"],
          "--runtime-timeout": ["3", "0.5", "soon"], "--isolated-cpus": ["prefer"], "--cpu-quota": ["unlimited"],
          "--topology-manager-policy": ["restricted"], "--topology-manager-option": ["prefer-closest-numa-nodes"],
          "--topology": ["/t.json"], "--sysfs-root": ["/sys2"], "--lock-timeout": ["1", "x"], "--period": ["1s"],
          "--metrics-path": ["/m"], "--kubelet-state": ["/k"], "--crictl": ["/bin/crictl"]}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(VALUES) + ["--read-only", "--force", "--align-memory"]),
                          st.integers(0, 9), st.booleans()), max_size=6),
       st.dictionaries(st.sampled_from(["state", "reserved_cpus", "option", "read_only", "runtime", "sysfs_root"]),
                       st.sampled_from(["/f", "1", ["a", "b=c"], True, "cri", False]), max_size=3))
def test_the_hook_reads_any_command_line_as_its_parser_does_or_leaves_it_to_the_parser(flags, config):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubecpuError
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import hook_cli
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import config_arguments

    argv, dashed = ["hook"], False  # a value after its flag that starts with "-": the parser decides
    for flag, pick, joined in flags:
        if flag not in VALUES:
            argv.append(flag)
            continue
        value = VALUES[flag][pick % len(VALUES[flag])]
        argv += ["%s=%s" % (flag, value)] if joined else [flag, value]
        dashed = dashed or (not joined and value.startswith("-"))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(config, handle)
    try:
        if config:
            argv += ["--config", handle.name]
        parser, _sub = _hook_subparser()
        try:
            want = parser.parse_args(argv)
            if want.config:
                want = parser.parse_args(["hook"] + config_arguments(want.config) + argv[1:])
        except KubecpuError:
            want = None  # a usage error: the hook's own reading must leave it to the parser
        got = hook_cli._hook_arguments(argv)
    finally:
        os.unlink(handle.name)
    if got is not None:
        assert want is not None and vars(got) == vars(want), argv
    else:
        assert want is None or dashed, argv


def test_an_allocating_hook_with_flags_it_reads_itself_loads_no_argparse(tmp_path):
    stdin, flags = node(tmp_path, cpus="0-3")  # not yet on its CPUs: the full hook allocates
    done = hook(stdin, flags + ["--option", "full-pcpus-only=false", "--lock-timeout", "3"])
    assert done.returncode == 0 and json.loads(done.stdout)["action"] == "allocated", done.stderr
    assert "argparse" not in loaded_modules(done) and "kubecpu_core.services.hook" in loaded_modules(done)
    other = tmp_path / "other"
    other.mkdir()
    stdin, flags = node(other, cpus="0-3")
    refused = hook(stdin, flags + ["--lock-timeout", "soon"])
    assert refused.returncode == 2 and "invalid timeout \"soon\": seconds expected" in refused.stderr
    assert "argparse" in loaded_modules(refused)  # the parser words the error
