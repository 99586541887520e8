"""The one rule for a path kubecpu is handed: a string, absolute, no NUL byte (paths.py)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.paths import is_absolute_path
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("value, absolute", [
    ("/etc/kubecpu/agent.json", True),
    ("/", True),
    ("//run/./b/../c", True),  # absolute, however it is spelled: what it names is the opener's business
    ("etc/kubecpu", False),
    ("./bin/kubecpu", False),
    ("", False),
    ("/run/b/\x00x", False),  # no system call takes it: Python raises ValueError, not OSError
    ("\x00/run", False),
    (None, False),
    (7, False),
    (["/run/b"], False),
    (b"/run/b", False),  # bytes are not what any peer or option hands kubecpu
])
def test_an_absolute_path_is_a_string_rooted_at_slash_without_a_nul_byte(value, absolute):
    assert is_absolute_path(value) is absolute


@given(st.text(max_size=40))
def test_a_path_it_takes_fails_at_the_os_only_as_an_oserror(text):
    """What every reader of a path expects: the system call refuses with OSError, never Python with ValueError."""
    if is_absolute_path(text):
        try:
            os.lstat(text)
        except OSError:
            pass
