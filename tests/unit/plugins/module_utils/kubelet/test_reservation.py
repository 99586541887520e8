"""The reservation planner: count, per NUMA node or the isolcpus complement, whole cores, lowest first."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PolicyError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.reservation import plan_reservation
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("kwargs,reserved", [
    ({"count": 2}, "0,8"),
    ({"count": 1}, "0,8"),  # rounded up to a whole core
    ({"count": 1, "whole_cores": False}, "0"),
    ({"count": 4}, "0-1,8-9"),
    ({"per_numa": 1}, "0,2,4,6"),  # one whole core on each node
    ({"per_numa": 2, "whole_cores": False}, "0,2,4,6"),
])
def test_planner(kwargs, reserved):
    topo = generated(2, 4, 2) if "per_numa" not in kwargs else generated(2, 2, 2)
    assert plan_reservation(topo, **kwargs)["reserved_cpus"] == reserved


def test_planner_isolcpus_complement():
    topo = generated(1, 4, 1)
    topo.isolated = CPUSet.parse("1-3")
    result = plan_reservation(topo, isolcpus_complement=True)
    assert result["reserved_cpus"] == "0" and result["allocatable_cpus"] == "1-3"


@pytest.mark.parametrize("kwargs,message", [
    ({}, "exactly one of count, per_numa and isolcpus_complement"),
    ({"count": 1, "per_numa": 1}, "exactly one"),
    ({"count": 0}, "at least 1"),
    ({"count": 99}, "cannot reserve 99 CPUs on this node"),
    ({"isolcpus_complement": True}, "isolates no CPUs"),
])
def test_planner_refuses(kwargs, message):
    with pytest.raises(PolicyError, match=message):
        plan_reservation(generated(1, 4, 1), **kwargs)


@settings(max_examples=60, deadline=None)
@given(sockets=st.integers(1, 2), cores=st.integers(1, 6), threads=st.integers(1, 2), count=st.integers(1, 24))
def test_planner_properties(sockets, cores, threads, count):
    """Whole cores, lowest first, at least the count asked, never more than one core over."""
    topo = generated(sockets, cores, threads)
    try:
        result = plan_reservation(topo, count=count)
    except PolicyError:
        assert count > topo.num_cpus - (topo.num_cpus % threads) or count > topo.num_cpus
        return
    reserved = CPUSet.parse(result["reserved_cpus"])
    assert topo.core_siblings(reserved) == reserved
    assert count <= len(reserved) < count + threads
    assert 0 in reserved
