"""The documentation's examples run as written and print what it shows: a drift between the two fails the suite.
docs/USAGE.md's "real example" runs here (bin/kubecpu on the shipped examples/node.json and examples/pod.json); the
README's install and quick start run on a systemd node (test_quickstart.py)."""

from __future__ import annotations

import os
import re
import subprocess

from test_modules import ROOT


def readme_block(title, page="README.md"):
    """The commands ("$ " lines; a trailing "\\" continues one) and the lines shown after each, of the first console
    block under the heading ``title`` of ``page`` (the README, or a page under docs/)."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as handle:
        text = handle.read()
    section = text.split("\n## " + title + "\n", 1)[1].split("\n## ", 1)[0]
    lines = re.search(r"```console\n(.*?)```", section, re.S).group(1).splitlines()
    steps = []
    while lines:
        line = lines.pop(0)
        assert line.startswith("$ "), "a console block line that is neither a command nor its output: %r" % line
        command = line[2:]
        while command.endswith("\\"):
            command = command[:-1].rstrip() + " " + lines.pop(0).strip()
        shown = []
        while lines and not lines[0].startswith("$ "):
            shown.append(lines.pop(0))
        steps.append((command, shown))
    return steps


def test_the_real_example_prints_what_the_readme_shows(tmp_path):
    """In a directory of its own with the checkout's bin/ and examples/ (the README's commands are relative to a
    checkout), each command in turn: the exit status 0 and the output line for line."""
    for name in ("bin", "examples"):
        os.symlink(os.path.join(ROOT, name), str(tmp_path / name))
    steps = readme_block("A real example", os.path.join("docs", "USAGE.md"))
    assert len(steps) >= 5
    for command, shown in steps:
        proc = subprocess.run(["bash", "-c", command], cwd=str(tmp_path), capture_output=True, text=True, timeout=60,
                              check=False)
        assert (proc.returncode, proc.stderr) == (0, ""), "%s: %s" % (command, proc.stderr)
        assert proc.stdout.splitlines() == shown, "README: %s\nprinted: %s" % (command, proc.stdout)
    assert (tmp_path / "my-node.json").stat().st_size > 0  # this machine's topology
