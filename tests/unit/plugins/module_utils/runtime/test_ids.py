"""Container IDs as kubecpu accepts them from a runtime (they go on command lines and into paths): letters, digits,
'_', '.' and '-', a letter or digit first, 1 to 128 characters."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RuntimeOutputError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.ids import check_container_id


@pytest.mark.parametrize("value", ["a" * 64, "0f3e9c", "web_1.app-2", "x" * 128])
def test_valid_ids_are_returned_as_they_are(value):
    assert check_container_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 129, "-lead", ".hidden", "_x", "a/b", "a b", "../etc", "a\n", "\u00e9t\u00e9",
                                   None, 42])
def test_anything_else_is_the_runtimes_bad_output(value):
    with pytest.raises(RuntimeOutputError, match="invalid container ID"):
        check_container_id(value)
