"""bin/kubecpu's flags: value types with their messages, and a JSON configuration file turned into flags."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import UsageError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli_args


@pytest.mark.parametrize("argv,field,value", [
    (["plan", "--available", "0-3,8", "--count", "2"], "available", "0-3,8"),
    (["plan", "--available", "0", "--count", "007"], "count", 7),
    (["reconcile", "--loop", "--period", "1m30s"], "period", 90.0),
    (["reconcile", "--period", "250ms"], "period", 0.25),
    (["reconcile", "--runtime-timeout", "0.5"], "runtime_timeout", 0.5),
    (["hints", "--available", "0-3", "--count", "1", "--scope", "pod", "--pod-assigned", "2:4-5"], "pod_assigned",
     [(2, "4-5")]),
])
def test_values(argv, field, value):
    parsed = getattr(cli_args.build_parser().parse_args(argv), field)
    if field == "available":
        parsed = str(parsed)
    if field == "pod_assigned":
        parsed = [(request, str(cpus)) for request, cpus in parsed]
    assert parsed == value


@pytest.mark.parametrize("argv,message", [
    (["plan", "--available", "0-x", "--count", "1"], "--available"),
    (["plan", "--available", "0", "--count", "-1"], 'invalid count "-1": must not be negative'),
    (["plan", "--available", "0", "--count", "two"], 'invalid count "two": a whole number is expected'),
    (["reconcile", "--runtime-timeout", "soon"], 'invalid timeout "soon": seconds expected'),
    (["reconcile", "--period", "10 parsecs"], "--period"),
    (["hints", "--available", "0", "--count", "1", "--scope", "pod", "--pod-assigned", "2"],
     'invalid --pod-assigned "2": expected R:CPUSET'),
    (["frobnicate"], "invalid choice"),
])
def test_refused_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(UsageError, match=message if message.startswith("--") else None) as caught:
        cli_args.build_parser().parse_args(argv)
    assert message in str(caught.value)
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("doc,argv", [
    ({"state": "/s", "num_reserved": 1, "option": ["full-pcpus-only=true", "align-by-socket"]},
     ["--state=/s", "--num-reserved=1", "--option=full-pcpus-only=true", "--option=align-by-socket"]),
    ({"align_memory": True, "force": False, "runtime_endpoint": None, "period": 0.5},
     ["--align-memory", "--period=0.5"]),
])
def test_a_configuration_file_becomes_flags(tmp_path, doc, argv):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(doc))
    assert cli_args.config_arguments(str(path)) == argv


@pytest.mark.parametrize("content,message", [
    (None, "cannot read configuration file"),
    ("{", "is not valid JSON"),
    ("[1]", "must hold a JSON object"),
    ('{"config": "/other"}', "unknown option 'config'"),
    ('{"state; rm": "x"}', "unknown option"),
    ('{"state": {"a": 1}}', "option state must be a string, number, boolean or list"),
])
def test_bad_configuration_files(tmp_path, content, message):
    path = tmp_path / "agent.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        cli_args.config_arguments(str(path))


def _help(command):
    parser = cli_args.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])


@pytest.mark.parametrize("command", ["allocate", "release", "state", "reconcile", "defrag", "nri", "hook", "demo"])
def test_every_help_shows_the_same_num_reserved_default(command, capsys):
    _help(command)
    text = " ".join(capsys.readouterr().out.split())
    assert "--num-reserved" in text and "(default 1" in text and "the static policy refuses 0" in text


def test_housekeeping_accepts_the_reservation_it_does_not_use_without_listing_it(capsys):
    """The kubelet's checkpoint says what is reserved; the agent's configuration file may still carry the flag."""
    _help("housekeeping")
    assert "--num-reserved" not in capsys.readouterr().out
    args = cli_args.build_parser().parse_args(["housekeeping", "--num-reserved", "2"])
    assert args.num_reserved == 2


def test_state_lists_no_flag_it_ignores_and_housekeeping_says_what_it_does_with_the_kubelets_file(capsys):
    _help("state")
    text = capsys.readouterr().out
    assert not any(flag in text for flag in ("--irq-isolation", "--cpu-burst", "--besteffort-idle", "--cpu-quota",
                                             "--isolated-cpus", "--align-memory", "--topology-manager-policy"))
    _help("housekeeping")
    text = " ".join(capsys.readouterr().out.split())
    assert "refuses to act" not in text and "interrupts are kept off the CPUs it assigns exclusively" in text


@pytest.mark.parametrize("text, want", [
    ("set reserved_cpus or num_reserved", "set --reserved-cpus or --num-reserved"),
    ("time_budget must be more than 0", "--time-budget must be more than 0"),
    ("state_path and kubelet_state_path", "--state and --kubelet-state"),
    ("policy_options and feature_gates", "--option and --feature-gate"),
    ("the static policy, kubelet_reserved_cpus", "the static policy, kubelet_reserved_cpus"),  # words stay words
])
def test_a_cli_error_names_flags_not_module_options(text, want):
    assert cli_args.as_flags(text) == want
