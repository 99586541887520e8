"""Allocate + persist latency on the durable store, with 1, 50 and 250 containers already in the state.

One operation is what `kubecpu allocate` does after start-up: take the lock, read and verify the checkpoint,
validate it against the node (the policy's Start), allocate one exclusive CPU, write the new checkpoint
atomically (temp file, fsync, rename, fsync of the directory, previous generation kept) and release the lock.
The container is released again outside the timing so every sample starts from the same state. The baseline is
the bare I/O floor in the same run: writing the same bytes to a temp file with fsync, rename and directory fsync.

    python benchmarks/state.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from functools import partial

from _common import generated, percentiles, timed

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.policy import StaticPolicy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.state_store import StateStore, _fsync_dir


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


def _io_floor(directory: str, data: bytes) -> None:
    """The same bytes written the same durable way, without lock, codec or policy."""
    scratch = os.path.join(directory, "floor")
    with open(scratch + ".tmp", "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(scratch + ".tmp", scratch)
    _fsync_dir(directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run for the test suite)")
    args = parser.parse_args()
    iterations = 5 if args.quick else 200
    topo = generated(2, 64, 2, 4, 8)
    policy = StaticPolicy(topo, 2)
    print("%-22s %9s %9s %9s %14s %7s" % ("containers in state", "bytes", "p50 ms", "p99 ms", "I/O floor p50", "ratio"))
    with tempfile.TemporaryDirectory(prefix="kubecpu-bench-") as directory:
        for existing in (1, 50, 250):
            store = StateStore(os.path.join(directory, "state-%d" % existing))
            with store.locked():
                state = store.load_or_new()
                policy.start(state)
                for n in range(existing):
                    policy.allocate(state, _pod("pod-%04d" % n), "app")
                store.save(state)
            samples = []
            for _i in range(iterations):
                samples.append(timed(partial(_allocate_and_persist, store, policy, _pod("probe"))))
                _release(store, policy, "probe")
            floor = partial(_io_floor, directory, encode(state))
            base, _p99 = percentiles([timed(floor) for _i in range(iterations)])
            p50, p99 = percentiles(samples)
            print("%-22d %9d %9.3f %9.3f %14.3f %7.1f" % (existing, len(encode(state)), p50 * 1000, p99 * 1000,
                                                          base * 1000, p50 / base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
