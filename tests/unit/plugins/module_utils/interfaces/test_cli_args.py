"""bin/kubecpu's flags: value types with their messages, and a JSON configuration file turned into flags."""

from __future__ import annotations

import json
import shlex

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import UsageError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli_args, cli_help


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


def _subparsers():
    parser = cli_args.build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices  # pylint: disable=protected-access


def _help_text(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _help(command)
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(cli_help.ABOUT))
def test_every_subcommands_help_has_a_one_line_description_and_an_example(command, capsys, monkeypatch):
    """Issue 64: subcommand help pages had no description or example. Each has its line (also the top-level list's)
    and examples, and each example is a command line its parser accepts."""
    text = _help_text(command, capsys, monkeypatch)
    line, examples = cli_help.ABOUT[command]
    assert "\n" not in line and " ".join(line.split()).lower() in " ".join(text.split()).lower()
    assert "examples:\n" in text and examples and all("  " + example in text for example in examples)
    for example in examples:
        words = shlex.split(example.split("|")[-1])
        words = words[:next((n for n, w in enumerate(words) if w in ("<", ">")), len(words))]
        assert words[:2] == ["kubecpu", command]
        cli_args.build_parser().parse_args(words[1:])


@pytest.mark.parametrize("dest", ["container", "pod_uid", "scope", "pod"])
def test_container_pod_uid_scope_and_pod_have_help(dest):
    found = [action for sub in _subparsers().values() for action in sub._actions  # pylint: disable=protected-access
             if action.dest == dest]
    assert found and all(action.help and len(action.help) > 20 for action in found)


@pytest.mark.parametrize("command", sorted(cli_help.ABOUT))
def test_every_help_is_short_grouped_and_lists_every_flag_it_uses(command, capsys, monkeypatch):
    """``defrag --help`` was 95 lines, its usage 17 of them. The usage (at most 4 lines) names the command's own
    flags, the shared ones are in groups of their own, and at 80 columns no flag takes more than 4 lines nor a page
    more than 80; every flag that is not hidden is on it."""
    import argparse

    text = _help_text(command, capsys, monkeypatch)
    lines = text.splitlines()
    usage = lines[:next(n for n, line in enumerate(lines) if not line.strip())]
    assert len(lines) <= 80 and len(usage) <= 4, (len(lines), len(usage))
    flag_lines = [n for n, line in enumerate(lines) if line.startswith("  -")] + [len(lines)]
    for start, end in zip(flag_lines, flag_lines[1:]):
        body = [line for line in lines[start:end] if line.startswith(" " * 10)]
        assert len(body) <= 3, lines[start]
    for action in _subparsers()[command]._actions:  # pylint: disable=protected-access
        if action.help != argparse.SUPPRESS:
            assert any(option in text for option in action.option_strings), action.option_strings
    if "--runtime" in text:
        assert "\ncontainer runtime:\n" in text and "\nnode, policy and checkpoint:\n" in text


@pytest.mark.parametrize("argv,command,near", [
    (["allocate", "--pod", "p", "--container", "a", "--stae", "x"], "allocate", "--state"),
    (["defrag", "--chek"], "defrag", "--check"),
    (["state", "--rest"], "state", "--reset"),
    (["topology", "--topolgy", "x"], "topology", "--topology"),
])
def test_a_misspelled_flag_shows_that_subcommands_usage(argv, command, near, capsys):
    """A misspelled flag printed the top-level usage (``kubecpu [-h] [--version] COMMAND ...``). It prints the
    sub-command's, names the word and the nearest flag."""
    with pytest.raises(UsageError) as caught:
        cli_args.build_parser().parse_args(argv)
    assert capsys.readouterr().err.startswith("usage: kubecpu %s " % command)
    assert "kubecpu %s: error: unrecognized arguments" % command in str(caught.value)
    assert "did you mean %s?" % near in str(caught.value)


def test_an_unknown_feature_gate_is_refused_with_the_kubelets_words():
    assert cli_args.feature_gates(["PodLevelResourceManagers=true"]) == {"PodLevelResourceManagers": "true"}
    with pytest.raises(UsageError, match="unrecognized feature gate: Foo"):
        cli_args.feature_gates(["Foo=true"])
