"""The runtime side of a pass, outside the lock (node/push.py): planned again when another writer saves while it
pushes, and, when writers keep saving past its replans, what is left set right in cgroupfs under the lock (the break
the adversarial review of issue 62 found: the last replan was made and never pushed)."""

from __future__ import annotations

from fractions import Fraction

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node import push
from ansible_collections.kubecpu.cpu_manager.tests.unit.plugins.module_utils.node.test_manager import node
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime


class HookAtEveryUpdate(FakeRuntime):
    """At each update (its check against the state file passed, the call in flight), another writer allocates one CPU
    and moves every container then on it to the new pool, as the OCI hook does; then the update lands."""

    def __init__(self, other, *args):
        super().__init__(*args)
        self.other = other

    def update(self, container_id, **fields):
        self.other()
        return super().update(container_id, **fields)


def test_a_pass_whose_replans_run_out_leaves_no_shared_container_on_exclusive_cpus(tmp_path):
    """Six shared containers follow a pool that grew (a Guaranteed pod deleted) while a burst of 1-CPU Guaranteed pods
    is created, one save landing during each update. After the pass, no shared container may be on a CPU the state
    gives a container exclusively: the pass has stopped replanning (REPLANS) but it must not leave a stale update."""
    manager, rt = node(tmp_path)
    shared = [rt.add("pod-s%d" % n, "app", "Burstable", 250) for n in range(6)]
    rt.add("pod-g", "app", "Guaranteed", 4000)
    manager.reconcile()
    other, _unused = node(tmp_path)
    made = []

    def hook():
        if len(made) > push.REPLANS + 1:  # a burst of five creations (the pool left keeps two CPUs)
            return
        model = Pod(uid="pod-h%d" % len(made), name="h", namespace="default", init_containers=(),
                    containers=(Container("app", Fraction(1), Fraction(1)),), qos="Guaranteed")
        made.append(model.uid)
        plan = other.allocate_pod(model, "app")
        taken = plan.after.get(model.uid, "app")
        for cid in shared:  # the hook moves whoever is on the new CPUs, in cgroupfs
            if CPUSet.parse(runtime.read(cid)).intersection(taken):
                runtime.write("cpuset", runtime.infos[cid].cgroup_path, "cpuset.cpus", str(plan.after.default))

    runtime = HookAtEveryUpdate(hook, str(tmp_path / "cgroup"), "0-7", "0-1")
    runtime.listed, runtime.infos = rt.listed, rt.infos
    manager.runtime = runtime
    runtime.remove_pod("pod-g")
    manager.reconcile()
    state = manager.store.load()
    exclusive = CPUSet().union(*(cpus for _uid, _name, cpus in state.assignments()))
    for cid in shared:
        assert not CPUSet.parse(runtime.read(cid)).intersection(exclusive), (cid, runtime.read(cid), str(exclusive))
