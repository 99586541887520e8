"""The OCI hook's view of the state (node/hook_view.py): trusted only while the state file is the one it was taken
from; any other write to that file (a rename, an edit in place, a truncation, the same bytes written again) makes it
stale. Every kubecpu writer keeps an existing view current and creates none."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_view import (
    MAX_VIEW_BYTES, read_view, view_path)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore

UID = "29588252-f547-4cc8-86c8-f905f933ae0a"


def state(held="2-3"):
    return CPUState("static", CPUSet.parse("0-7") - CPUSet.parse(held), {UID: {"app": CPUSet.parse(held)}})


def viewed(tmp_path, held="2-3"):
    """A state file written by the store, its view taken after it."""
    store = StateStore(str(tmp_path / "state"))
    store.save(state(held))
    store.write_hook_view(state(held))
    return store


def test_the_view_is_the_state_in_plain_strings(tmp_path):
    store = viewed(tmp_path)
    assert read_view(store.path) == {"file": store.identity, "policy": "static", "default": "0-1,4-7",
                                     "entries": {UID: {"app": "2-3"}}}


def test_a_writer_keeps_an_existing_view_current_and_creates_none(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    store.save(state("2-3"))
    assert not os.path.exists(view_path(store.path))  # no hook reads this state: no view
    store.write_hook_view(state("2-3"))
    StateStore(store.path).save(state("4-5"))  # another process, a later generation
    assert read_view(store.path)["entries"] == {UID: {"app": "4-5"}}


def test_a_view_that_cannot_follow_a_save_is_stale_and_the_save_stands(tmp_path):
    """The view is a cache: when it cannot be rewritten (a full disk, a read-only directory; here its rename fails),
    the state is still saved and the old view, naming the old file, is not used."""
    store = viewed(tmp_path)
    os.unlink(view_path(store.path))
    os.makedirs(view_path(store.path))  # the view's rename onto it fails
    assert StateStore(store.path).save(state("4-5"))
    assert StateStore(store.path, read_only=True).load().entries == {UID: {"app": CPUSet.parse("4-5")}}
    assert read_view(store.path) is None and not [n for n in os.listdir(str(tmp_path)) if ".tmp-" in n]


def rename_same_bytes(path):
    data = open(path, "rb").read()
    with open(path + ".new", "wb") as handle:
        handle.write(data)
    os.replace(path + ".new", path)


def edit_in_place(path):
    data = open(path, "rb").read()
    with open(path, "r+b") as handle:  # the same size, a CPU changed: the checksum no longer matches
        handle.write(data.replace(b"2-3", b"2-4", 1))


def truncate(path):
    os.truncate(path, 10)


def remove(path):
    os.unlink(path)


@pytest.mark.parametrize("change", [rename_same_bytes, edit_in_place, truncate, remove])
def test_any_other_write_to_the_state_file_makes_the_view_stale(tmp_path, change):
    store = viewed(tmp_path)
    change(store.path)
    assert read_view(store.path) is None


@pytest.mark.parametrize("change", [
    {"file": None}, {"file": [1, 2, 3, 4, 5]}, {"policy": 1}, {"default": 0}, {"entries": {UID: {"app": 2}}},
    {"entries": {UID: "2"}}, {"entries": []}, "{", "[]"])
def test_a_malformed_view_is_not_used(tmp_path, change):
    store = viewed(tmp_path)
    if isinstance(change, str):
        text = change
    else:
        doc = dict({"file": store.identity, "policy": "static", "default": "0", "entries": {}}, **change)
        text = json.dumps({key: value for key, value in doc.items() if value is not None})
    with open(view_path(store.path), "w", encoding="utf-8") as handle:
        handle.write(text)
    assert read_view(store.path) is None


def test_an_oversized_view_is_not_read_whole(tmp_path):
    store = viewed(tmp_path)
    with open(view_path(store.path), "w", encoding="utf-8") as handle:
        handle.write(" " * MAX_VIEW_BYTES + "{}")
    assert read_view(store.path) is None


def test_a_read_only_store_writes_no_view(tmp_path):
    viewed(tmp_path)
    os.unlink(view_path(str(tmp_path / "state")))
    reader = StateStore(str(tmp_path / "state"), read_only=True)
    reader.write_hook_view(reader.load())
    assert not os.path.exists(view_path(reader.path))
