"""What bin/kubecpu refuses before a command runs: the flags it cannot honour together, a --state whose directory does
not exist, the static policy with nothing reserved (each exit 2, nothing touched; test_cli runs them end to end)."""

from __future__ import annotations

import argparse

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PolicyError, UsageError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli_checks


def _args(command="state", **flags):
    return argparse.Namespace(command=command, **flags)


@pytest.mark.parametrize("flags,says", [
    ({"check": True, "reset": True}, "--check with --reset"),
    ({"check": True, "loop": True}, "--check with --loop"),
    ({"check": True, "metrics_path": "/m.prom"}, "--check with --metrics-path"),
    ({"read_only": True, "reset": True}, "--read-only with --reset"),
    ({"read_only": True, "rebuild": True}, "--read-only with --rebuild: --rebuild writes the rebuilt checkpoint"),
    ({"rebuild": True, "reset": True}, "--rebuild with --reset"),
    ({"check": True}, None), ({"check": True, "rebuild": True}, None), ({"read_only": True}, None),
    ({"read_only": True, "rebuild": True, "check": True}, None), ({"loop": True, "metrics_path": "/m"}, None),
    ({"reset": True, "kubelet_stopped": True}, None), ({"check": False, "reset": True}, None),
])
def test_flags_that_cannot_be_honoured_together(flags, says):
    found = cli_checks.conflicts(_args(**flags))
    assert (found == []) if says is None else (len(found) == 1 and found[0].startswith(says))


def test_a_conflict_is_a_usage_error_naming_the_command():
    with pytest.raises(UsageError, match=r"^kubecpu state: --check with --reset: .* \(drop one of them\)$"):
        cli_checks.refuse(_args(check=True, reset=True))


@pytest.mark.parametrize("command,policy,refused", [
    ("allocate", "static", True), ("demo", "static", True), ("state", "none", False), ("housekeeping", "static", False),
])
def test_no_reservation_under_static_is_refused_in_the_kubelets_words(command, policy, refused):
    args = _args(command, num_reserved=0, policy=policy)
    if not refused:
        cli_checks.refuse(args)
        return
    with pytest.raises(PolicyError, match=r"^\[cpumanager\] the static policy requires systemreserved.cpu \+ "
                                          r"kubereserved.cpu to be greater than zero \(set --"):
        cli_checks.refuse(args)


def test_a_state_path_needs_its_directory(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    cli_checks.check_state_directory(str(tmp_path / "state"))
    cli_checks.check_state_directory("relative-in-the-working-directory")
    for path, what in ((tmp_path / "missing" / "state", "does not exist"),
                       (tmp_path / "file" / "state", "is not a directory")):
        with pytest.raises(UsageError, match="--state %s: its directory %s %s" % (path, path.parent, what)):
            cli_checks.check_state_directory(str(path))
    monkeypatch.setattr(cli_checks, "OWN_DIRECTORY", str(tmp_path / "missing"))  # kubecpu's own: made when missing
    cli_checks.check_state_directory(str(tmp_path / "missing" / "state"))


def test_a_check_with_the_agents_configuration_file_drops_its_metrics_path_with_an_empty_flag(tmp_path):
    """The agent's configuration file names a metrics file; ``reconcile --check --config agent.json`` is refused (a
    check writes nothing) and says how to keep the file's other settings: ``--metrics-path=`` after it."""
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run

    config = tmp_path / "agent.json"
    config.write_text('{"metrics_path": "%s", "period": "1s"}' % (tmp_path / "kubecpu.prom"))
    argv = ["reconcile", "--check", "--config", str(config), "--state", str(tmp_path / "state"), "--crictl",
            str(tmp_path / "no-crictl")]
    code, _out, err = run(argv)
    assert code == 2 and "--metrics-path= drops a --config file's" in err
    code, _out, err = run(argv + ["--metrics-path="])
    assert code == 1 and "crictl not found" in err and sorted(p.name for p in tmp_path.iterdir()) == ["agent.json"]
