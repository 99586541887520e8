"""The container cache: facts by container ID, shared through a file between processes, a cache in every way (what
it cannot read or write is inspected again, never an error)."""

from __future__ import annotations

import errno
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerNotFoundError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (EXITED, RUNNING, ContainerInfo,
                                                                                        ListedContainer)


def info(n, state=RUNNING):
    cid = "%064d" % n
    listed = ListedContainer(cid, "sb", "pod-%d" % n, "p", "ns", "app", 0, state, n)
    return listed, ContainerInfo(cid, "pod-%d" % n, "p", "ns", "app", 0, "Guaranteed", "/kubepods/pod/%s" % cid,
                                 2048, 200000, 100000, 0)


class Describer:
    name = "describer"
    live = False
    want_annotations = False

    def __init__(self, gone=()):
        self.gone = set(gone)
        self.described = []

    def describe(self, listed):
        self.described.append(listed.id)
        if listed.id in self.gone:
            raise ContainerNotFoundError("gone")
        return info(int(listed.id))[1]


def test_facts_inspect_each_container_once_and_skip_the_vanished():
    cache = ContainerCache()
    rows = [info(n)[0] for n in range(3)] + [ListedContainer("x" * 12, "sb", "", "", "", "", 0, RUNNING, 0)]
    runtime = Describer(gone={rows[2].id})
    skipped = []
    pairs, inspected = cache.facts(runtime, rows, skipped)
    assert [p[0].id for p in pairs] == [rows[0].id, rows[1].id] and inspected == 2  # not Kubernetes: ignored
    assert skipped == [{"container_id": rows[2].id, "pod": "ns/p", "container": "app",
                        "reason": "removed between the list and its inspection"}]
    pairs, inspected = cache.facts(runtime, rows[:2], [])
    assert inspected == 0 and runtime.described == [rows[0].id, rows[1].id, rows[2].id]


def test_a_container_that_exited_since_is_inspected_again():
    cache = ContainerCache()
    listed, known = info(1)
    cache.put(known, RUNNING)
    assert cache.get(listed) == known
    assert cache.get(listed._replace(state=EXITED)) is None


def test_the_file_is_shared_between_processes_and_retain_forgets_the_gone(tmp_path):
    path = str(tmp_path / "cache.json")
    writer = ContainerCache(path)
    for n in range(3):
        writer.put(info(n)[1], RUNNING)
    writer.save()
    reader = ContainerCache(path)
    assert sorted(reader.infos) == sorted(writer.infos) and not writer.dirty
    writer.retain({info(0)[0].id})
    writer.save()
    reader.refresh()  # a reader keeps what it knew and takes in what is new
    assert len(ContainerCache(path).infos) == 1


@pytest.mark.parametrize("text", ["", "{", "[]", '{"containers": [{"info": {"id": "a b"}}]}', '{"containers": 1}'])
def test_a_corrupt_file_is_ignored(tmp_path, text):
    path = tmp_path / "cache.json"
    path.write_text(text)
    assert ContainerCache(str(path)).infos == {}


def test_a_failed_save_stays_dirty_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    cache = ContainerCache(str(tmp_path / "cache.json"))
    cache.put(info(1)[1], RUNNING)

    def full(*_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    cache.save()
    assert cache.dirty and os.listdir(tmp_path) == []
    monkeypatch.undo()
    cache.save()
    assert not cache.dirty and os.listdir(tmp_path) == ["cache.json"]


def test_read_only_and_pathless_caches_write_nothing(tmp_path):
    for cache in (ContainerCache(), ContainerCache(str(tmp_path / "c.json"), read_only=True)):
        cache.put(info(1)[1], RUNNING)
        cache.save()
    assert os.listdir(tmp_path) == []


def test_a_live_runtime_is_described_every_time_and_nothing_is_cached():
    """NRI's view tells each container's facts as they change: they are looked up, not kept or refreshed."""
    runtime = Describer()
    runtime.live = True
    cache = ContainerCache()
    listed = [info(1)[0], info(2)[0]]
    for _round in range(2):
        pairs, inspected = cache.facts(runtime, listed, [])
        assert [item.id for item, _info in pairs] == [listed[0].id, listed[1].id] and inspected == 0
    assert runtime.described == [listed[0].id, listed[1].id] * 2 and cache.infos == {}
