"""The marks the OCI hook leaves beside the state for the cgroups it wrote itself: one empty file per container ID,
added without reading anything, listed in one call, cleared once the runtime's record follows."""

from __future__ import annotations

import os
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RuntimeOutputError, StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_marks import CREATE_GRACE, CreatingMarks, HookMarks
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore

A, B = "a" * 64, "b" * 64


def test_marked_listed_and_cleared(tmp_path):
    marks = HookMarks.beside(StateStore(str(tmp_path / "state")))
    assert marks.pending() == frozenset()  # no directory yet
    marks.mark([A, B])
    marks.mark([A])  # again: still one mark
    assert marks.pending() == {A, B} and oct(os.stat(tmp_path / "state.hooked").st_mode & 0o777) == "0o700"
    marks.clear([A, "c" * 64])  # one that is not there is fine
    assert marks.pending() == {B}


def test_a_read_only_state_has_no_marks(tmp_path):
    marks = HookMarks.beside(StateStore(str(tmp_path / "state"), read_only=True))
    marks.mark([A])
    assert marks.pending() == frozenset() and not os.path.exists(tmp_path / "state.hooked")


def test_an_id_that_could_be_a_path_is_refused(tmp_path):
    with pytest.raises(RuntimeOutputError):
        HookMarks(str(tmp_path / "state")).mark(["../../etc/passwd"])


def test_a_directory_it_cannot_make_is_a_store_error(tmp_path):
    (tmp_path / "state.hooked").write_text("a file in the way")
    with pytest.raises(StoreError, match=r"state\.hooked"):
        HookMarks(str(tmp_path / "state")).mark([A])


def test_creating_marks_keep_an_entry_while_its_container_is_being_created(tmp_path):
    """The hook marks the entry it allocated with the container's cgroup; a mark names a pod UID and a container,
    nothing else (no path). It keeps the entry while the runtime does not list the container and its cgroup exists,
    and is cleared once the container is listed, its cgroup gone (a failed creation, a removal) or its grace over."""
    state = str(tmp_path / "state")
    marks = CreatingMarks(state)
    uid = "0c3d4e5f-0000-4000-8000-000000000001"
    marks.mark(uid, "app", "/kubepods/pod1/c1")
    for bad_uid, name in (("../x", "app"), ("a.b", "app"), ("uid", "../../etc"), ("", "app"), ("uid", "")):
        marks.mark(bad_uid, name, "/x")  # not a name it writes
    assert os.listdir(state + ".creating") == [uid + ".app"]
    assert marks.fresh() == {(uid, "app"): "/kubepods/pod1/c1"}
    exists = {"/kubepods/pod1/c1"}.__contains__
    assert marks.creating(lambda u, n: False, exists) == {(uid, "app")}  # still being created: kept
    assert marks.creating(lambda u, n: False, lambda path: False) == frozenset()  # its cgroup gone
    assert marks.fresh() == {}
    marks.mark(uid, "app", "/kubepods/pod1/c1")
    assert marks.creating(lambda u, n: (u, n) == (uid, "app"), exists) == frozenset() and marks.fresh() == {}  # listed
    marks.mark(uid, "app", "/kubepods/pod1/c1")
    assert marks.fresh(now=time.time() + CREATE_GRACE + 1) == {} and os.listdir(state + ".creating") == []
    assert CreatingMarks(None).fresh() == {} and CreatingMarks(None).creating(exists, exists) == frozenset()
