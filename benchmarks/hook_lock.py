"""How long a container's creation waits for the state lock while the agent updates a storm of shared containers
(issue 62, finding 2).

    python benchmarks/hook_lock.py [--quick]

A node with 60 shared (Burstable) containers. The agent creates and deletes a Guaranteed pod in a loop: each pass
changes the shared pool and so updates every shared container, through a runtime whose update costs 50 ms (one
``crictl update`` process each; 50 ms + 2 ms a container for a batch, crictl taking 32 IDs a process). Meanwhile
Burstable containers of another tenant are created through the OCI hook (fail closed: a lock not had within 2 s
refuses the container), one every 20 ms. Three arms in one run, on the same node:

* baseline: the lock held across the runtime calls, one update at a time (kubecpu before this change);
* unlocked: the runtime calls outside the lock, one update at a time (a runtime without a batch call: CRI);
* batched: outside the lock, the shared pool's updates in batches (crictl).

Printed: the hook's wait for the lock (p50, p99, max), its refusals, the agent's passes and their seconds, and each
arm's p99 as a ratio to the baseline's. Figures from the fake runtime in memory (the runtime's cost is the sleep): a
comparison of the lock's holding, not of a runtime.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import threading
import time
from pathlib import Path

from _common import percentiles  # also sets up the import path

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerNotFoundError, HookRefusal
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import LOCK_TIMEOUT, Hook

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import Node

SHARED = 60
UPDATE_SECONDS = 0.05  # one crictl process
BATCH_EXTRA = 0.002  # each further container in one crictl update
CREATE_EVERY = 0.02


class SlowRuntime(FakeRuntime):
    """The fake runtime with crictl's cost per update (and per batch when ``batched``)."""

    def __init__(self, root, batched):
        super().__init__(root)
        if batched:
            self.update_many = self._update_many

    def update(self, container_id, **fields):
        time.sleep(UPDATE_SECONDS)
        return super().update(container_id, **fields)

    def _update_many(self, container_ids, cpuset_cpus):
        time.sleep(UPDATE_SECONDS + BATCH_EXTRA * (len(container_ids) - 1))
        outcome = []
        for cid in container_ids:
            try:
                super().update(cid, cpuset_cpus=cpuset_cpus)
                outcome.append((cid, None))
            except ContainerNotFoundError as exc:  # the fake's, as crictl names the container
                outcome.append((cid, exc))
        return outcome


def arm(seconds, locked, batched):
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp), False)
        runtime = SlowRuntime(str(node.cgroup), batched)
        for n in range(SHARED):
            runtime.add("shared-%d" % n, "app", "Burstable", 250)
        manager = build_manager(node.config(), with_runtime=True, runtime=runtime)
        manager.reconcile()
        stop = threading.Event()
        passes = []

        def agent():
            flip = 0
            while not stop.is_set():
                flip += 1
                if flip % 2:
                    runtime.add("storm", "app", "Guaranteed", 2000)
                else:
                    runtime.remove_pod("storm")
                started = time.perf_counter()
                with manager.store.locked() if locked else contextlib.nullcontext():
                    manager.reconcile()
                passes.append(time.perf_counter() - started)

        waits, refused = [], 0
        thread = threading.Thread(target=agent, daemon=True)
        thread.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            made = node.container("Burstable", 500)
            hook = Hook(node.config())
            taking = hook.store.locked

            @contextlib.contextmanager
            def timed(taking=taking):
                started = time.perf_counter()
                with taking():
                    waits.append(time.perf_counter() - started)
                    yield

            hook.store.locked = timed
            try:
                hook.run(io.BytesIO(made["stdin"]))
            except HookRefusal:
                refused += 1
                waits.append(LOCK_TIMEOUT)
            time.sleep(CREATE_EVERY)
        stop.set()
        thread.join()
        return waits, refused, passes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 4 if args.quick else 20
    print("hook's wait for the state lock during a storm of %d shared containers (update %d ms; %d s an arm)"
          % (SHARED, UPDATE_SECONDS * 1000, seconds))
    print("%-10s %9s %9s %9s %8s %8s %10s %9s" % ("arm", "p50 ms", "p99 ms", "max ms", "refused", "hooks",
                                                  "passes", "pass s"))
    baseline_p99 = None
    for name, locked, batched in (("baseline", True, False), ("unlocked", False, False), ("batched", False, True)):
        waits, refused, passes = arm(seconds, locked, batched)
        p50, p99 = percentiles(waits)
        pass_p50 = percentiles(passes)[0] if passes else 0.0
        baseline_p99 = baseline_p99 or p99
        print("%-10s %9.2f %9.2f %9.2f %8d %8d %10d %9.2f   p99 x%.2g of the baseline"
              % (name, p50 * 1000, p99 * 1000, max(waits) * 1000, refused, len(waits), len(passes), pass_p50,
                 p99 / baseline_p99))


if __name__ == "__main__":
    main()
