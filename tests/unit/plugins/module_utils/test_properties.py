"""Property tests: allocation invariants over random topologies and free sets, and a state machine over
allocate / release / reload on the real store."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (AllocationError, SMTAlignmentError,
                                                                                 StateError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import EXCLUSIVE_PAIRS, PolicyOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import StaticPolicy, plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

DOCUMENTED = ("not enough cpus available to satisfy request: ", "SMT Alignment Error: ")


@st.composite
def topologies(draw):
    sockets = draw(st.integers(1, 4))
    cores = draw(st.integers(1, 8))
    threads = draw(st.sampled_from([1, 2, 4]))
    numa_per_socket = draw(st.sampled_from([n for n in (1, 2, 4) if cores % n == 0]))
    l3_per_socket = draw(st.sampled_from([n for n in (1, 2, 4) if cores % n == 0]))
    return generated(sockets, cores, threads, numa_per_socket, l3_per_socket)


@st.composite
def option_sets(draw):
    names = ("full_pcpus_only", "distribute_cpus_across_numa", "distribute_cpus_across_cores",
             "prefer_align_cpus_by_uncorecache")
    flags = {name: draw(st.booleans()) for name in names}
    for first, second in EXCLUSIVE_PAIRS:
        a, b = first.replace("-", "_"), second.replace("-", "_")
        if flags.get(a) and flags.get(b):
            flags[b] = False
    return PolicyOptions(**flags)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), option_sets(), st.data())
def test_allocation_properties(topo, options, data):
    everything = topo.all_cpus.sorted()
    affinity = data.draw(st.one_of(st.none(), st.sets(st.sampled_from(sorted(topo.numa_cpus)), min_size=1)))
    if options.full_pcpus_only and (options.distribute_cpus_across_numa or affinity is not None):
        # The kubelet's SMT check counts whole free cores node-wide, but these choices take from one region
        # (a NUMA node of the distribution, the hinted nodes) first. Under full-pcpus-only the kubelet's shared
        # pool is made of whole cores, so draw such free sets: on fragments the kubelet gives fragments too.
        cores = data.draw(st.sets(st.sampled_from(sorted(topo.core_cpus))))
        free = CPUSet().union(*(topo.core_cpus[c] for c in cores))
    else:
        free = CPUSet(data.draw(st.sets(st.sampled_from(everything))))
    count = data.draw(st.integers(0, len(everything)))
    try:
        got = plan(topo, options, free, count, affinity)
    except SMTAlignmentError:
        assert options.full_pcpus_only
        return
    except AllocationError as exc:
        assert str(exc).startswith(DOCUMENTED), str(exc)
        assert count > len(free)
        return
    assert len(got) == count
    assert got.issubset(free)
    if options.full_pcpus_only:
        assert topo.whole_core_cpus(got) == got, "full-pcpus-only must hand out whole cores"


class StoreMachine(RuleBasedStateMachine):
    """Allocate, release and reload against a real state file; the kubelet's invariants always hold."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="kubecpu-sm-")
        self.pods = {}
        self.counter = 0

    @rule(topo=topologies(), strict=st.booleans(), reserved=st.integers(0, 3), full=st.booleans())
    @precondition(lambda self: not hasattr(self, "policy"))
    def boot(self, topo, strict, reserved, full):
        assume(reserved < len(topo.all_cpus))
        raw = {"strict-cpu-reservation": str(strict).lower(), "full-pcpus-only": str(full).lower()}
        self.policy = StaticPolicy(topo, reserved, None, raw)
        self.store = StateStore(os.path.join(self.dir, "cpu_manager_state"))
        with self.store.locked():
            self.state = self.store.load_or_new()
            self.policy.start(self.state)
            self.store.save(self.state)

    @rule(cpus=st.integers(1, 8), fraction=st.booleans())
    @precondition(lambda self: hasattr(self, "policy"))
    def allocate(self, cpus, fraction):
        self.counter += 1
        uid = "pod-%d" % self.counter
        request = "%dm" % (cpus * 1000 - 500) if fraction else str(cpus)
        pod = Pod.from_dict({"uid": uid, "containers": [{"name": "app", "cpu_request": request, "cpu_limit": request,
                                                         "memory_request": "1G", "memory_limit": "1G"}]})
        with self.store.locked():
            state = self.store.load_or_new()
            before = state.copy()
            try:
                result = self.policy.allocate(state, pod, "app")
            except AllocationError as exc:
                assert str(exc).startswith(DOCUMENTED)
                assert state == before
                return
            self.store.save(state)
        if result.exclusive:
            assert len(result.cpus) == cpus and not fraction
            self.pods[uid] = result.cpus
        self.state = state

    @rule(data=st.data())
    @precondition(lambda self: hasattr(self, "policy") and self.pods)
    def release(self, data):
        uid = data.draw(st.sampled_from(sorted(self.pods)))
        with self.store.locked():
            state = self.store.load_or_new()
            released = self.policy.remove_container(state, uid, "app")
            self.store.save(state)
        assert released == self.pods.pop(uid)
        self.state = state

    @rule()
    @precondition(lambda self: hasattr(self, "policy"))
    def reload(self):
        restored = self.store.load()
        assert restored == self.state
        if not restored.default and restored.entries:
            # kubelet-exact: a shared pool consumed to the last CPU (no reserved CPU in it) fails validateState
            with pytest.raises(StateError, match="default cpuset cannot be empty"):
                self.policy.start(restored)
            return
        self.policy.start(restored)

    @invariant()
    def kubelet_invariants(self):
        if not hasattr(self, "policy"):
            return
        state, policy = self.state, self.policy
        sets = [cpus for _pod, _name, cpus in state.assignments()]
        seen = CPUSet()
        for cpus in sets:
            assert cpus.isdisjoint(seen) and cpus.isdisjoint(state.default)
            assert cpus.isdisjoint(policy.reserved)
            seen = seen.union(cpus)
        if policy.options.strict_cpu_reservation:
            assert policy.reserved.isdisjoint(state.default)
            assert state.default.union(seen) == policy.topology.all_cpus.difference(policy.reserved)
        else:
            assert policy.reserved.issubset(state.default)
            assert state.default.union(seen) == policy.topology.all_cpus

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestStoreMachine = StoreMachine.TestCase
