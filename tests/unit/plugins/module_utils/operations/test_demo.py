"""kubecpu demo: the sample pods on a node, as the static policy would pin them (nothing written)."""

from __future__ import annotations

import argparse
import io
import json

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.demo import run_demo
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

TOPO = Topology(generated_cpus(2, 2, 2))


def demo(as_json, **kwargs):
    out = io.StringIO()
    args = argparse.Namespace(json=as_json, num_reserved=kwargs.get("reserved", 1), option=kwargs.get("option", []))
    assert run_demo(args, TOPO, out) == 0
    return out.getvalue()


def test_the_samples_as_json():
    report = json.loads(demo(True))
    rows = {(r["pod"], r["container"]): r for r in report["containers"]}
    forwarder = rows[("net/dpdk-forwarder", "fwd")]
    assert forwarder == dict(forwarder, cpus="4", exclusive=True, qos="Guaranteed")  # the reserved CPU 0's sibling
    assert rows[("trading/matcher", "engine")]["cpus"] == rows[("trading/matcher", "warmup")]["cpus"] == "1"  # reused
    shared = [rows[key] for key in (("net/dpdk-forwarder", "stats"), ("web/frontend", "nginx"), ("batch/report", "job"))]
    assert [(r["qos"], r["exclusive"], r["cpus"]) for r in shared] == [
        ("Guaranteed", False, "0,2-3,5-7"), ("Burstable", False, "0,2-3,5-7"), ("BestEffort", False, "0,2-3,5-7")]
    assert report["reserved"] == "0" and report["checkpoint"]["policyName"] == "static"
    assert report["shared_pool"] == "0,2-3,5-7"  # what the shared containers show: the pool these allocations left


def test_the_table_says_which_container_is_an_init_container():
    text = demo(False)
    assert "trading/matcher/warmup is an init container: it finishes before engine starts, which then reuses its " \
           "CPUs (as the kubelet does).\n" in text


def test_the_table_and_a_refusal():
    text = demo(False, reserved=7)
    assert text.startswith("Node (") and "POD/CONTAINER" in text
    assert "refused: not enough cpus available to satisfy request" in text
