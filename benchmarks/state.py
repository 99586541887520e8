"""The durable store with 1, 50 and 250 containers in the state, against the bare durable-write floor.

* write: ``StateStore.save`` of a changed state (encode with the kubelet's checksum, temp file, fsync,
  previous generation kept, rename, fsync of the directory), alternating between two states so every
  write is a real change with a checksum of its own.
* allocate: what `kubecpu allocate` does after start-up: take the lock, read and verify the checkpoint,
  validate it against the node (the policy's Start), allocate one exclusive CPU, write, release the lock.
  "warm" is one long-lived process (the agent): the file it reads is the one it wrote. "cold" is a fresh
  store and empty codec caches every time (a one-shot module run, without the interpreter's start-up).
  The container is released again outside the timing so every sample starts from the same state.
* floor: the same bytes written the same durable way, without lock, codec or policy.

    python benchmarks/state.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from functools import partial
from typing import Callable, List

from _common import generated, percentiles, timed

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet import cpuset
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import StaticPolicy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.atomic import fsync_directory
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore


def _pod(uid: str) -> Pod:
    return Pod.from_dict({"uid": uid, "name": uid, "namespace": "bench", "containers": [
        {"name": "app", "cpu_request": "1", "cpu_limit": "1", "memory_request": "1Gi", "memory_limit": "1Gi"}]})


def _allocate_and_persist(store: StateStore, policy: StaticPolicy, pod: Pod) -> None:
    with store.locked():
        current = store.load_or_new()
        policy.start(current)
        policy.allocate(current, pod, "app")
        store.save(current)


def _release(store: StateStore, policy: StaticPolicy, uid: str) -> None:
    with store.locked():
        current = store.load_or_new()
        policy.remove_container(current, uid, "app")
        store.save(current)


def _forget() -> None:
    """Empty the codec's cache, as in a process that has not read the file yet."""
    cpuset._parse.cache_clear()


def _cold(path: str, policy: StaticPolicy, pod: Pod) -> None:
    _allocate_and_persist(StateStore(path), policy, pod)


def _release_cold(path: str, policy: StaticPolicy) -> None:
    _release(StateStore(path), policy, "probe")
    _forget()


def _write_next(store: StateStore, states: List[CPUState]) -> None:
    states.reverse()
    store.save(states[0])


def _io_floor(directory: str, data: bytes) -> None:
    scratch = os.path.join(directory, "floor")
    with open(scratch + ".tmp", "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(scratch + ".tmp", scratch)
    fsync_directory(directory)


def _samples(iterations: int, operation: Callable[[], None], between: Callable[[], None]) -> List[float]:
    out = []
    for _i in range(iterations):
        out.append(timed(operation))
        between()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run for the test suite)")
    args = parser.parse_args()
    iterations = 5 if args.quick else 300
    topo = generated(2, 64, 2, 4, 8)
    policy = StaticPolicy(topo, 2)
    print("%-11s %6s | %-15s | %-15s | %-15s | %6s | %-12s" % (
        "containers", "bytes", "write p50 / p99", "allocate warm", "allocate cold", "floor", "ratio write"))
    with tempfile.TemporaryDirectory(prefix="kubecpu-bench-") as directory:
        for existing in (1, 50, 250):
            path = os.path.join(directory, "state-%d" % existing)
            store = StateStore(path)
            with store.locked():
                state = store.load_or_new()
                policy.start(state)
                for n in range(existing):
                    policy.allocate(state, _pod("pod-%04d" % n), "app")
                store.save(state)
            other = state.copy()
            policy.allocate(other, _pod("other"), "app")
            pair = [state, other]

            writes = _samples(iterations, partial(_write_next, store, pair), lambda: None)
            store.save(state)
            probe = _pod("probe")
            warm = _samples(iterations, partial(_allocate_and_persist, store, policy, probe),
                            partial(_release, store, policy, "probe"))
            cold = _samples(iterations, partial(_cold, path, policy, probe),
                            partial(_release_cold, path, policy))
            base, _p99 = percentiles(_samples(iterations, partial(_io_floor, directory, encode(state)), lambda: None))
            (w50, w99), (a50, a99), (c50, c99) = percentiles(writes), percentiles(warm), percentiles(cold)
            print("%-11d %6d | %6.3f / %6.3f | %6.3f / %6.3f | %6.3f / %6.3f | %6.3f | %4.1fx %s" % (
                existing, len(encode(state)), w50 * 1e3, w99 * 1e3, a50 * 1e3, a99 * 1e3, c50 * 1e3, c99 * 1e3,
                base * 1e3, w50 / base, "(allocate %.1fx warm, %.1fx cold)" % (a50 / base, c50 / base)))
    print("milliseconds; ratios are p50 against the floor's p50%s" % (
        "" if not args.quick else " (quick run: too few samples to judge the 3x target)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
