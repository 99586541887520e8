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
