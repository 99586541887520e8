"""bin/kubecpu: the kubelet cases through the command line, exit codes, and the state commands."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli
import hypothesis
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import decode, encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import fingerprint
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_crictl import (cgroup_cpus, make_node,
                                                                                    set_cgroup_cpus)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import build, machine
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import (ROOT, cases, fixture,
                                                                                      fixture_as_document, ids)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq

KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
OPTION_FLAGS = {"prefer_align_by_uncore_cache": "prefer-align-cpus-by-uncorecache",
                "distribute_cpus_across_cores": "distribute-cpus-across-cores"}


@pytest.fixture(scope="module")
def topo_files(tmp_path_factory):
    base = tmp_path_factory.mktemp("topologies")
    paths = {}
    for name in ("fakeTopoMultiSocketDualSocketPerNumaHT", "topoSingleSocketHT", "topoDualSocketHT", "topoDualSocketNoHT", "topoDualSocketMultiNumaPerSocketHT",
                 "topoDualSocketMultiNumaPerSocketHTLarge", "topoQuadSocketFourWayHT", "topoUncoreDualSocketNoSMT",
                 "topoUncoreSingleSocketNoSMT", "topoUncoreSingleSocketSMT", "topoUncoreSingleSocketMultiNuma",
                 "topoDualSocketSingleNumaPerSocketSMTUncore", "topoSingleSocketSingleNumaPerSocketSMTSmallUncore",
                 "topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore", "topoSmallDualSocketSingleNumaPerSocketNoSMTUncore",
                 "topoLargeSingleSocketSingleNumaPerSocketSMTUncore", "topoLargeSingleSocketSingleNumaPerSocketUncore",
                 "topoDualSocketMultiNumaPerSocketUncore", "topoDualSocketSubNumaPerSocketHTMonolithicUncore",
                 "topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore",
                 "topoSingleSocketSingleNumaPerSocketUncore"):
        path = base / ("%s.json" % name)
        path.write_text(json.dumps(fixture_as_document(name)))
        paths[name] = str(path)
    return paths


TAKE = cases("take_by_topology.json")


def _plan_argv(case, topo_files):
    argv = ["plan", "--topology", topo_files[case["topology"]], "--available", case["available"],
            "--count", str(case["num_cpus"])]
    for key, on in case["options"].items():
        if on:
            argv += ["--option", OPTION_FLAGS[key]]
    if case["algorithm"] == "numa_distributed":
        argv += ["--option", "distribute-cpus-across-numa"]
        if case["cpu_group_size"] > 1:
            argv += ["--option", "full-pcpus-only=true"]
    return argv


def _smt_refusal(case):
    """Through the policy, full-pcpus-only's checks (ALGORITHM.md 7.2/7.5) run before the algorithm."""
    group = case["cpu_group_size"] or 1
    if group == 1:
        return None
    n = case["num_cpus"]
    whole = len(fixture(case["topology"]).whole_core_cpus(CPUSet.parse(case["available"])))
    if n % group:
        return "SMT Alignment Error: requested %d cpus not multiple cpus per core = %d" % (n, group)
    if n > whole:
        return ("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = "
                "%d, CPUs per core = %d" % (whole, n, group))
    return None


@pytest.mark.parametrize("case", TAKE, ids=ids(TAKE))
def test_take_by_topology_cases_through_plan(case, topo_files):
    code, out, err = run(_plan_argv(case, topo_files))
    refusal = _smt_refusal(case)
    if refusal:
        assert (code, out, err.strip()) == (1, "", refusal)
    elif case["expect_error"]:
        assert (code, out, err.strip()) == (1, "", case["expected_error"])
    else:
        assert (code, json.loads(out), err) == (0, {"cpus": case["expected"]}, "")


ALLOCATE = cases("static_policy.json", kind="allocate")


def _valid_state(case, policy_reserved, strict):
    """The README's equivalent valid state: same default - reserved, missing CPUs held by another pod."""
    initial = case["initial_state"]
    topo = fixture(case["topology"])
    default = CPUSet.parse(initial["default_cpuset"]).difference(policy_reserved)
    default = default if strict else default.union(policy_reserved)
    entries = {pod: {name: CPUSet.parse(cpus) for name, cpus in containers.items()}
               for pod, containers in initial["assignments"].items()}
    state = CPUState("static", default, entries)
    everything = topo.all_cpus.difference(policy_reserved) if strict else topo.all_cpus
    missing = everything.difference(default).difference(state.assigned())
    if missing:
        state.set("filler-pod", "filler", missing)
    return state


@pytest.mark.parametrize("case", ALLOCATE, ids=ids(ALLOCATE))
def test_static_policy_allocate_cases_through_the_cli(case, topo_files, tmp_path):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import StaticPolicy
    reserved = CPUSet.parse(case["reserved_cpus"]) if case["reserved_cpus"] else None
    policy = StaticPolicy(fixture(case["topology"]), case["num_reserved_cpus"], reserved, case["options"])
    state_path = tmp_path / "cpu_manager_state"
    before = encode(_valid_state(case, policy.reserved, policy.options.strict_cpu_reservation))
    state_path.write_bytes(before)
    pod_path = tmp_path / "pod.json"
    pod_path.write_text(json.dumps(case["pod"]))
    argv = ["allocate", "--topology", topo_files[case["topology"]], "--state", str(state_path),
            "--num-reserved", str(case["num_reserved_cpus"]), "--pod", str(pod_path), "--container", case["container"]]
    if case["reserved_cpus"]:
        argv += ["--reserved-cpus", case["reserved_cpus"]]
    for name, value in case["options"].items():
        argv += ["--option", "%s=%s" % (name, value)]
    if case.get("topology_hint"):
        argv += ["--numa-affinity", ",".join(map(str, case["topology_hint"]["numa"]))]
    code, out, err = run(argv)
    expected = case["expected"]
    if not policy.reserved:  # the kubelet's manager refuses the static policy with nothing reserved, and so does kubecpu
        assert (code, err.strip()) == (2, ZERO_RESERVED_CLI) and state_path.read_bytes() == before
        return
    if expected["error"]:
        assert (code, err.strip()) == (1, expected["error"])
        assert state_path.read_bytes() == before
        return
    assert code == 0, err
    result = json.loads(out)
    restored = decode(state_path.read_bytes(), "static").state
    assert state_path.read_bytes() == encode(restored)
    if expected["allocated"]:
        assert result == {"cpus": expected["cpuset"], "exclusive": True}
        assert str(restored.get(case["pod"]["uid"], case["container"])) == expected["cpuset"]
    else:
        assert result == {"cpus": str(restored.default), "exclusive": False}


def test_plan_exit_codes_and_messages(topo_files):
    topo = topo_files["topoDualSocketHT"]
    assert run(["plan", "--topology", topo, "--available", "0-11", "--count", "0"])[:2] == (0, '{"cpus": ""}\n')
    for argv, needle in [
        (["--available", "3-1", "--count", "1"], 'invalid range "3-1" (3 > 1)'),
        (["--available", "0-11", "--count", "-1"], "must not be negative"),
        (["--available", "0-12", "--count", "1"], "CPU(s) 12 that are not in the topology"),
        (["--available", "0-11", "--count", "1", "--option", "bogus"], 'unknown CPU Manager Policy option: "bogus"'),
        (["--available", "0-11", "--count", "1", "--option", "full-pcpus-only=yes"], "strconv.ParseBool"),
        (["--available", "0-11", "--count", "1", "--numa-affinity", "7"], "NUMA node(s) 7 not in the topology"),
        (["--available", "0-11", "--count", "1", "--option", "full-pcpus-only", "--option",
          "distribute-cpus-across-cores"], "can not be used at the same time"),
    ]:
        code, out, err = run(["plan", "--topology", topo] + argv)
        assert code == 2 and out == "" and needle in err, (argv, err)
    code, out, err = run(["plan", "--topology", topo_files["fakeTopoMultiSocketDualSocketPerNumaHT"], "--available",
                          "0-79", "--count", "1", "--option", "align-by-socket"])
    assert code == 2 and "Align by socket is not compatible with hardware where number of sockets are more than " \
        "number of NUMA" in err


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_option_values_parse_like_go(value, topo_files):
    code, out, err = run(["plan", "--topology", topo_files["topoDualSocketHT"], "--available", "0-11",
                          "--count", "3", "--option", "full-pcpus-only=" + value])
    assert code == 1 and "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2" in err


def test_plan_reads_the_topology_from_stdin(topo_files):
    doc = open(topo_files["topoSingleSocketHT"]).read()
    assert run(["plan", "--topology", "-", "--available", "0-7", "--count", "2"], stdin=doc)[:2] == (0, '{"cpus": "0,4"}\n')


def test_topology_command_discovers_a_sysfs_tree(tmp_path):
    root = build(str(tmp_path), machine(2, 2, 2), isolated="3")
    code, out, _err = run(["topology", "--sysfs-root", root])
    doc = json.loads(out)
    assert code == 0 and doc["format"] == "kubecpu.topology/v1" and doc["source"] == "sysfs"
    assert len(doc["cpus"]) == 8 and doc["isolated"] == "3"
    assert set(doc["cpus"][0]) == {"cpu", "core", "socket", "die", "numa", "uncore", "online"}


class Node:
    """A node for the stateful commands: a fixture topology and a state file."""

    def __init__(self, tmp_path, topo_files, topology="topoDualSocketHT", extra=()):
        self.tmp = tmp_path
        self.state = str(tmp_path / "cpu_manager_state")
        self.common = ["--topology", topo_files[topology], "--state", self.state] + list(extra)

    def pod(self, uid, containers, init=()):
        path = self.tmp / ("%s.json" % uid)

        def make(name, cpu, **kw):
            return dict({"name": name, "cpu_request": cpu, "cpu_limit": cpu, "memory_request": "1G",
                         "memory_limit": "1G"}, **kw)
        path.write_text(json.dumps({"uid": uid, "name": uid, "namespace": "ns",
                                    "containers": [make(n, c) for n, c in containers],
                                    "init_containers": [make(n, c, **kw) for n, c, kw in init]}))
        return str(path)

    def run(self, command, *argv):
        return run([command] + self.common + list(argv))

    def file(self):
        return decode(open(self.state, "rb").read(), "static").state


def test_state_reads_and_writes_nothing(tmp_path, topo_files):
    """A missing file is printed as the fresh state the kubelet would start from, and not created; an existing one,
    in a newer kubelet's format, is printed and left byte for byte (no lock file, no .prev)."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    code, out, _err = run(["state", "--state", node.state])
    assert (code, json.loads(out)) == (0, {"policyName": "static", "defaultCpuSet": "", "entries": {}})
    code, out, _err = node.run("state")
    assert json.loads(out)["defaultCpuSet"] == "0-11"  # after the policy's Start
    assert os.listdir(str(tmp_path)) == [n for n in os.listdir(str(tmp_path)) if not n.startswith("cpu_manager_state")]
    node.run("allocate", "--pod", node.pod("u", [("a", "2")]), "--container", "a", "--kubelet-version", "1.38")
    written = open(node.state, "rb").read()
    listed = sorted(os.listdir(str(tmp_path)))
    code, out, _err = node.run("state")
    assert code == 0 and json.loads(out)["entries"] == {"u": {"a": "2,8"}}
    assert open(node.state, "rb").read() == written and sorted(os.listdir(str(tmp_path))) == listed


def test_allocate_release_cycle(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    pod = node.pod("uid-1", [("app", "4"), ("side", "500m")], init=[("init", "2", {})])
    assert node.run("allocate", "--pod", pod, "--container", "init")[:2] == (0, '{"cpus": "2,8", "exclusive": true}\n')
    code, out, _err = node.run("allocate", "--pod", pod, "--container", "app")
    assert json.loads(out) == {"cpus": "2,4,8,10", "exclusive": True}  # reuses the init container's CPUs
    code, out, _err = node.run("allocate", "--pod", pod, "--container", "side")
    assert json.loads(out) == {"cpus": "0-1,3,5-7,9,11", "exclusive": False}
    again = node.run("allocate", "--pod", pod, "--container", "app")
    assert json.loads(again[1])["cpus"] == "2,4,8,10"
    assert node.run("release", "--pod-uid", "uid-1", "--container", "init")[1] == '{"released": ""}\n'
    assert node.run("release", "--pod-uid", "uid-1", "--container", "app")[1] == '{"released": "2,4,8,10"}\n'
    code, out, err = node.run("release", "--pod-uid", "uid-1", "--container", "app")  # released already
    assert (code, out) == (2, "") and "nothing to release: no pod with uid uid-1 holds exclusive CPUs there" in err
    assert node.file() == CPUState("static", CPUSet.parse("0-11"))


def test_refusals_leave_the_file_unchanged(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    with open(node.state, "wb") as handle:
        handle.write(encode(CPUState("static", CPUSet.parse("0-11"))))
    before = open(node.state, "rb").read()
    big = node.pod("uid-big", [("app", "12")])
    code, out, err = node.run("allocate", "--pod", big, "--container", "app")
    assert (code, out, err.strip()) == (1, "", "not enough cpus available to satisfy request: requested=12, available=11")
    assert open(node.state, "rb").read() == before
    odd = node.pod("uid-odd", [("app", "3")])
    code, _out, err = node.run("allocate", "--pod", odd, "--container", "app", "--option", "full-pcpus-only")
    assert code == 1 and "SMT Alignment Error" in err and open(node.state, "rb").read() == before


def test_invalid_and_corrupt_states_are_reported_and_kept(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    corrupt = b'{"policyName":"static","defaultCpuSet":"0-11","checksum":7}'
    with open(node.state, "wb") as handle:
        handle.write(corrupt)
    code, _out, err = node.run("state")
    assert code == 1 and "checkpoint is corrupted" in err and node.state in err
    assert open(node.state, "rb").read() == corrupt
    foreign = encode(CPUState("static", CPUSet.parse("0-12")))
    with open(node.state, "wb") as handle:
        handle.write(foreign)
    code, _out, err = node.run("allocate", "--pod", node.pod("u", [("a", "1")]), "--container", "a")
    assert code == 1 and 'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-12"' in err
    assert open(node.state, "rb").read() == foreign
    code, out, err = node.run("state", "--reset")
    assert code == 0 and "moved" in err and json.loads(out)["defaultCpuSet"] == "0-11"
    aside = [n for n in os.listdir(tmp_path) if n.startswith("cpu_manager_state.reset-")]
    assert len(aside) == 1 and open(os.path.join(str(tmp_path), aside[0]), "rb").read() == foreign


def test_reservation_rules(tmp_path, topo_files):
    node = Node(tmp_path, topo_files)
    code, _out, err = node.run("state", "--num-reserved", "1", "--reserved-cpus", "0-1")
    assert code == 2 and "[cpumanager] unable to reserve the required amount of CPUs (size of 0-1 did not equal 1)" in err
    code, out, _err = node.run("state", "--reserved-cpus", "0-1", "--option", "strict-cpu-reservation")
    assert code == 0 and json.loads(out)["defaultCpuSet"] == "2-11"
    (tmp_path / "zero").mkdir()
    assert Node(tmp_path / "zero", topo_files).run("state", "--num-reserved", "0")[:3:2] == (2, ZERO_RESERVED_CLI + "\n")
    code, out, _err = Node(tmp_path / "zero", topo_files).run("state")
    assert code == 0 and json.loads(out)["defaultCpuSet"] == "0-11"  # by default one CPU reserved (CPU 0)


def test_none_policy(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--policy", "none"])
    code, out, _err = node.run("allocate", "--pod", node.pod("u", [("a", "2")]), "--container", "a")
    assert (code, json.loads(out)) == (0, {"cpus": "", "exclusive": False})
    assert open(node.state, "rb").read() == b'{"policyName":"none","defaultCpuSet":"","checksum":1353318690}'
    code, _out, err = node.run("state", "--option", "full-pcpus-only")
    assert code == 2 and "None policy: received unsupported options=map[full-pcpus-only:true]" in err
    code, _out, err = run(["state", "--state", node.state])  # configured static, file says none
    assert code == 1 and 'configured policy "static" differs from state checkpoint policy "none"' in err


def test_read_only_state(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    code, _out, err = node.run("allocate", "--pod", node.pod("u", [("a", "2")]), "--container", "a", "--read-only")
    assert code == 1 and "read-only" in err
    assert node.run("state", "--read-only")[0] == 0


def test_bad_pod_files(tmp_path, topo_files):
    node = Node(tmp_path, topo_files)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert node.run("allocate", "--pod", str(bad), "--container", "a")[0] == 2
    assert node.run("allocate", "--pod", node.pod("u", [("a", "1")]), "--container", "zz")[0] == 2
    assert node.run("allocate", "--pod", str(tmp_path / "missing.json"), "--container", "a")[0] == 2


def test_the_launcher_runs_with_plain_python(topo_files):
    """bin/kubecpu as a user runs it: the sh launcher, python3 from PATH, no Ansible importable."""
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]), "PYTHONNOUSERSITE": "1",
           "KUBECPU_PYTHON": sys.executable}

    def kubecpu(*argv):
        return subprocess.run([KUBECPU, *argv], capture_output=True, text=True, env=env, check=False)
    proc = kubecpu("plan", "--topology", topo_files["topoDualSocketHT"], "--available", "0-11", "--count", "2")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, '{"cpus": "0,6"}\n', "")
    proc = kubecpu("plan", "--available", "0")
    assert proc.returncode == 2 and "required" in proc.stderr
    proc = kubecpu("demo", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["containers"]
    proc = subprocess.run([sys.executable, "-S", KUBECPU, "--version"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "kubecpu " + cli.build_parser.__globals__["VERSION"]  # -S


def test_state_rebuild_from_the_runtime_keeps_the_lost_file(tmp_path):
    crictl = make_node(str(tmp_path / "node"))
    for key, cid in crictl.items():
        if key.count("/") == 2 and not cid.startswith("/"):
            set_cgroup_cpus(crictl, cid, "1-2" if key == "prod/web/main" else "0,3")
    state = tmp_path / "cpu_manager_state"
    state.write_text("truncated{")
    argv = ["state", "--rebuild", "--state", str(state), "--topology", crictl["topology"], "--num-reserved", "1",
            "--crictl", crictl["crictl"], "--cgroup-root", crictl["cgroup"]]
    code, out, err = run(argv + ["--check"])
    assert code == 0 and json.loads(out)["entries"] == {"a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": "1-2"}}
    assert state.read_text() == "truncated{" and "kept" not in err
    code, out, err = run(argv)
    assert code == 0 and "the previous file is kept as %s.rebuild-" % state in err
    assert decode(state.read_bytes(), "static").state.to_dict() == json.loads(out)
    assert run(argv + ["--reset"])[0] == 2


ZERO_RESERVATION = ("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than "
                    "zero")
ZERO_RESERVED_CLI = ZERO_RESERVATION + " (set --reserved-cpus or --num-reserved)"


def _split_node(tmp_path):
    """The crictl stand-in on 8 single-thread CPUs in two NUMA nodes (0-3, 4-7), prod/web/main pinned across both."""
    crictl = make_node(str(tmp_path / "node"), cpus="0-7")
    topology = tmp_path / "two-numa.json"
    topology.write_text(json.dumps({"format": "kubecpu.topology/v1", "source": "file", "cpus": [
        {"cpu": c, "core": c, "socket": 0, "numa": c // 4, "uncore": 0} for c in range(8)]}))
    state = tmp_path / "state"
    state.write_bytes(encode(CPUState("static", CPUSet.parse("0-2,5-7"),
                                      {"a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": CPUSet.parse("3-4")}})))
    common = ["--state", str(state), "--topology", str(topology), "--num-reserved", "1", "--crictl", crictl["crictl"],
              "--cgroup-root", crictl["cgroup"], "--kubelet-state", str(tmp_path / "none")]
    return crictl, state, common


def test_defrag_moves_the_container_that_splits_two_numa_nodes(tmp_path):
    crictl, state, common = _split_node(tmp_path)
    before = state.read_bytes()
    code, out, _err = run(["defrag", "--check"] + common)
    plan = json.loads(out)
    want = {"pod_uid": "a06b0ffe-e387-47dc-90e2-339fa3fc242a", "containers": ["main"], "cpus_before": "3-4",
            "cpus_after": "1,3"}  # it keeps CPU 3 (the fewest CPUs changed)
    assert code == 0 and plan["moves"] == [want]
    assert (plan["before"]["largest_single_numa_whole_cores"], plan["after"]["largest_single_numa_whole_cores"]) == (
        3, 4)
    assert state.read_bytes() == before
    code, out, _err = run(["defrag"] + common)
    assert code == 0 and decode(state.read_bytes(), "static").state.to_dict()["entries"] == {
        "a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": "1,3"}}
    assert cgroup_cpus(crictl, crictl["prod/web/main"]) == "1,3"
    assert cgroup_cpus(crictl, crictl["prod/api/app"]) == "0,2,4-7"
    code, out, _err = run(["defrag"] + common)
    assert code == 0 and json.loads(out)["moves"] == []  # optimal now


def test_defrag_on_a_read_only_checkpoint_plans_the_file_to_write_and_what_it_was_planned_from(tmp_path):
    crictl, state, common = _split_node(tmp_path)
    before = state.read_bytes()
    code, out, err = run(["defrag", "--read-only"] + common)
    doc = json.loads(out)
    assert code == 0 and state.read_bytes() == before and "planned_from=<planned_from>" in err
    assert doc["planned_from"] == fingerprint(before)
    assert decode(doc["rewritten_state"].encode(), "static").state.to_dict()["entries"] == {
        "a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": "1,3"}}
    assert cgroup_cpus(crictl, crictl["prod/web/main"]) != "1,3"  # only planned


def test_defrag_keeps_a_container_on_the_numa_node_of_its_pinned_memory(tmp_path):
    _crictl, _state, common = _split_node(tmp_path)
    (tmp_path / "memory_manager_state").write_text(json.dumps({"policyName": "Static", "entries": {
        "a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": [{"numaAffinity": [1], "type": "memory", "size": 1 << 30}]}}}))
    code, out, _err = run(["defrag", "--check"] + common)  # the file beside --kubelet-state
    assert code == 0 and json.loads(out)["moves"] == []  # not onto 1,3 (node 0): nothing on node 1 helps
    code, out, _err = run(["defrag", "--check", "--keep-numa"] + common[:-2] + ["--kubelet-state", "/nonexistent"])
    assert code == 0 and [m["cpus_after"] for m in json.loads(out)["moves"]] == ["1,3"]  # it was on both nodes
    (tmp_path / "memory_manager_state").write_text("{")
    code, _out, err = run(["defrag", "--check"] + common)
    assert code != 0 and "memory_manager_state: not a memory manager checkpoint" in err


def test_the_checks_create_and_rewrite_nothing(tmp_path):
    _crictl, state, common = _split_node(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(str(tmp_path))
              if (tmp_path / name).is_file()}
    for argv in (["defrag", "--check"], ["reconcile", "--check"], ["state"]):
        assert run(argv + common)[0] == 0, argv
        after = {name: (tmp_path / name).read_bytes() for name in os.listdir(str(tmp_path))
                 if (tmp_path / name).is_file()}
        assert after == before, argv  # no lock, no cache, no state written


def test_defrag_says_whether_its_packing_is_proven_best_within_its_time_budget(tmp_path):
    _crictl, _state, common = _split_node(tmp_path)
    code, out, _err = run(["defrag", "--check", "--time-budget", "5s"] + common)
    assert code == 0 and (json.loads(out)["proven_best"], json.loads(out)["planner"]) == (True, "exact")
    for budget, says in (("0s", 'argument --time-budget: invalid duration "0s"'),
                         ("11m", "--time-budget must be more than 0 and at most 600 seconds, got 660.0")):
        code, _out, err = run(["defrag", "--check", "--time-budget", budget] + common)
        assert code == 2 and says in err


def test_kubelet_version_selects_the_checkpoint_format(tmp_path, topo_files):
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    code, _out, _err = node.run("allocate", "--pod", node.pod("u", [("a", "2")]), "--container", "a",
                                "--kubelet-version", "1.37")
    written = json.loads(open(node.state, encoding="utf-8").read())
    assert code == 0 and set(written) == {"policyName", "defaultCpuSet", "entries", "checksum", "data", "dataChecksum"}
    code, out, err = node.run("state", "--kubelet-version", "1.35")  # 1.35 reads a V4 file's V2 part
    assert code == 0 and json.loads(out)["entries"] == {"u": {"a": json.loads(written["data"])["entries"]["u"]["a"]}}
    code, _out, _err = node.run("state", "--kubelet-version", "1.36", "--feature-gate",
                                "PodLevelResourceManagers=true")
    assert code == 0 and json.loads(open(node.state, encoding="utf-8").read()) == written  # read: not downgraded
    code, _out, err = node.run("state", "--kubelet-version", "1.39")
    assert code == 2 and "is not one kubecpu knows: 1.35, 1.36, 1.37, 1.38" in err
    code, _out, err = node.run("state", "--kubelet-version", "1.37", "--feature-gate", "PodLevelResourceManagers")
    assert code == 2 and "expected NAME=true or NAME=false" in err


def test_plan_chooses_as_the_kubelet_version_does(tmp_path):
    topology = tmp_path / "adjacent.json"
    topology.write_text(json.dumps({"format": "kubecpu.topology/v1", "source": "file", "cpus": [
        {"cpu": c, "core": c // 2, "socket": 0, "numa": 0, "uncore": 0} for c in range(8)]}))
    argv = ["plan", "--topology", str(topology), "--available", "0-7", "--count", "3", "--option",
            "distribute-cpus-across-cores"]
    assert json.loads(run(argv)[1]) == json.loads(run(argv + ["--kubelet-version", "1.37"])[1]) == {"cpus": "0-2"}
    assert json.loads(run(argv + ["--kubelet-version", "1.38.0"])[1]) == {"cpus": "0,2,4"}  # round robin over cores


def test_housekeeping_beside_a_kubelet_that_pins_follows_its_checkpoint(tmp_path):
    """``housekeeping``: the kubelet's checkpoint read (never written), interrupts below --sysfs-root kept off its
    exclusive CPUs; --check reports only; with --irq-isolation off there is nothing to do (exit 2)."""
    root = build(str(tmp_path / "machine"), machine(2, 2, 2))
    irq = proc_irq(os.path.join(root, "proc", "irq"), {24: "0-7", 30: "6"})
    kubelet = tmp_path / "cpu_manager_state"
    kubelet.write_bytes(checkpoint_file("0-5", {"pod-a": {"app": "6-7"}}))
    written = kubelet.read_bytes()
    argv = ["housekeeping", "--sysfs-root", root, "--kubelet-state", str(kubelet), "--state", str(tmp_path / "own")]
    code, out, _err = run(argv + ["--check"])
    doc = json.loads(out)
    assert code == 0 and doc["housekeeping"]["kept_off"] == "6-7" and doc["applied"] is False
    assert affinity(irq, 24) == "0-7" and not os.path.exists(tmp_path / "own.irq.json")
    assert sorted(os.listdir(str(tmp_path))) == ["cpu_manager_state", "machine"]  # no lock file either
    code, out, _err = run(argv)
    doc = json.loads(out)
    assert code == 0 and doc["changed"] and [u["irq"] for u in doc["housekeeping"]["updated"]] == ["24", "30", "default"]
    assert (affinity(irq, 24), affinity(irq, 30)) == ("0-5", "0-5")
    assert doc["housekeeping"]["irqbalance"] == "not running"
    assert kubelet.read_bytes() == written  # the kubelet's file is never written
    kubelet.write_bytes(checkpoint_file("0-7", {}))
    assert run(argv)[0] == 0 and (affinity(irq, 24), affinity(irq, 30)) == ("0-7", "6")
    code, _out, err = run(argv + ["--irq-isolation", "off"])
    assert code == 2 and "nothing to do" in err


def test_housekeeping_with_cpu_power_gives_back_what_a_removed_agent_set(tmp_path):
    """The agent role's removal: a pass beside no checkpoint (nothing held) with --cpu-power gives every power file
    back and removes the record, even where no runtime answers (a pod still holding nothing needs no annotation)."""
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import power

    root = power(build(str(tmp_path / "machine"), machine(2, 2, 2)), range(8))
    latency = os.path.join(root, "sys", "devices", "system", "cpu", "cpu6", "power", "pm_qos_resume_latency_us")
    with open(latency, "w", encoding="ascii") as handle:
        handle.write("n/a\n")
    (tmp_path / "own.power.json").write_text(json.dumps({"format": "kubecpu.power/v1", "files": {
        "cpu6/power/pm_qos_resume_latency_us": {"original": "0\n", "wrote": "n/a", "writing": None, "pod": "pod-a",
                                                "cpus": "6"}}}))
    code, out, _err = run(["housekeeping", "--sysfs-root", root, "--kubelet-state", str(tmp_path / "nothing-held"),
                           "--state", str(tmp_path / "own"), "--irq-isolation", "off", "--cpu-power",
                           "--crictl", str(tmp_path / "no-crictl")])
    doc = json.loads(out)
    assert code == 0 and doc["power"]["updated"] == [{"file": "cpu6/power/pm_qos_resume_latency_us", "from": "n/a",
                                                      "to": "0", "pod": "pod-a"}]
    assert open(latency, encoding="ascii").read() == "0\n" and not os.path.exists(tmp_path / "own.power.json")


def _tree(top):
    """Every directory and file below ``top`` with its bytes (a socket or link by its kind); not the crictl stand-in's
    log of its calls."""
    found = {}
    for where, dirs, files in os.walk(str(top)):
        for name in dirs:
            found[os.path.join(where, name)] = "dir"
        for name in set(files) - {"calls.log"}:
            path = os.path.join(where, name)
            found[path] = open(path, "rb").read() if os.path.isfile(path) and not os.path.islink(path) else "other"
    return found


# Every sub-command: what it does to files. A read creates, rewrites and locks nothing; the others write by design.
WRITES = {"allocate": "records the allocation in the state", "release": "records the release in the state",
          "hook": "pins the container the runtime creates and records it", "nri": "the NRI plugin: a service"}
READS = [
    ("topology", ["--sysfs-root", "{root}"]),
    ("plan", ["--topology", "{topology}", "--available", "1-7", "--count", "2"]),
    ("hints", ["--topology", "{topology}", "--available", "1-7", "--count", "2"]),
    ("merge", ["--policy", "single-numa-node", "--numa-nodes", "0-1", "--hints", "{hints}"]),
    ("state", ["{common}"]),
    ("state", ["{common}", "--kubelet-version", "1.38"]),
    ("state", ["--state", "{tmp}/missing"]),
    ("state", ["{common}", "--rebuild", "--check"]),
    ("reconcile", ["{common}", "--check"]),
    ("defrag", ["{common}", "--check"]),
    ("housekeeping", ["--sysfs-root", "{root}", "--kubelet-state", "{state}", "--state", "{tmp}/own", "--check"]),
    ("demo", ["--topology", "{topology}"]),
    ("demo", ["--topology", "{topology}", "--json"]),
    # a write the user forbade (--read-only, implied on the kubelet's own checkpoint) is refused (exit 1), unrecorded
    ("allocate", ["--state", "{state}", "--topology", "{topology}", "--read-only", "--pod", "{pod}", "--container",
                  "app"]),
    ("release", ["--state", "{state}", "--topology", "{topology}", "--read-only", "--pod-uid",
                 "a06b0ffe-e387-47dc-90e2-339fa3fc242a", "--container", "main"]),
]


def test_every_read_creates_rewrites_and_locks_nothing(tmp_path):
    """Each read (every command that prints, every --check, and --read-only) leaves the node's files as they were:
    no file created (no lock, no cache), none rewritten (a newer kubelet's format stays as it is)."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser

    _crictl, state, common = _split_node(tmp_path)
    root = build(str(tmp_path / "machine"), machine(2, 2, 2))
    proc_irq(os.path.join(root, "proc", "irq"), {24: "0-7"})
    (tmp_path / "hints.json").write_text(json.dumps({"hints": [{"numa_affinity": [0], "preferred": True}]}))
    (tmp_path / "pod.json").write_text(json.dumps({"uid": "u-1", "name": "p", "namespace": "n", "containers": [
        {"name": "app", "cpu_request": "1", "cpu_limit": "1", "memory_request": "1Gi", "memory_limit": "1Gi"}]}))
    values = {"root": root, "topology": str(tmp_path / "two-numa.json"), "hints": str(tmp_path / "hints.json"),
              "tmp": str(tmp_path), "state": str(state), "pod": str(tmp_path / "pod.json")}
    for command, template in READS:
        argv = [command]
        for item in template:
            argv += common if item == "{common}" else [item.format(**values)]
        before = _tree(tmp_path)
        code, out, err = run(argv)
        if "--read-only" in argv:
            assert (code, out) == (1, "") and err.endswith("is read-only: the change was not recorded\n"), (argv, err)
        else:
            assert code == 0 and out, (argv, err)
        assert _tree(tmp_path) == before, argv
    parser = build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)  # pylint: disable=protected-access
    assert commands == {command for command, _argv in READS} | set(WRITES)


class _Reads:
    """What a command reads of its flags: the parsed namespace's attributes, and the fields of the settings made from
    them (``NodeConfig``, ``ManagerOptions``) after they were made (their own validation is no use)."""

    def __init__(self, monkeypatch):
        from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node import config, factory
        from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations import checkpoint_file, defrag

        self.names = set()
        self.monkeypatch = monkeypatch
        reads = self.names

        for cls in (config._NodeConfig, config._ManagerOptions):  # pylint: disable=protected-access
            for index, field in enumerate(cls._fields):
                def getter(obj, index=index, field=field):
                    caller = sys._getframe(1).f_code  # pylint: disable=protected-access
                    if not (caller.co_filename == config.__file__ and caller.co_name in ("__new__", "from_mapping")):
                        reads.add(field)
                    return tuple.__getitem__(obj, index)
                monkeypatch.setattr(cls, field, property(getter))
        built = factory.build_manager

        def build_manager(node_config, *args, **kwargs):  # the manager's options are its passes' (reconcile's)
            if kwargs.get("with_runtime") or (args and args[0]):
                reads.update("manager:" + name for name in config.ManagerOptions._fields)
            return built(node_config, *args, **kwargs)
        for module in (factory, cli, defrag, checkpoint_file):
            monkeypatch.setattr(module, "build_manager", build_manager, raising=False)

    def command(self, function):
        reads = self.names

        class Namespace(argparse.Namespace):
            def __getattribute__(self, name):
                # node_config copies every flag into the settings: their use is the settings' fields read after
                if not name.startswith("_") and sys._getframe(1).f_code.co_name != "node_config":  # pylint: disable=protected-access
                    reads.add(name)
                return object.__getattribute__(self, name)

        def recorded(args, out, err, stdin):
            return function(Namespace(**vars(args)), out, err, stdin)
        return recorded


# a flag's destination -> the setting it becomes (cli_args._SETTING_NAMES, and the repeatable ones)
SETTING_OF = {"state": "state_path", "topology": "topology_path", "crictl": "crictl_path",
              "kubelet_state": "kubelet_state_path", "cache": "cache_path", "option": "policy_options",
              "topology_manager_option": "topology_manager_options", "feature_gate": "feature_gates"}


def _invocations(tmp_path):
    """Per sub-command, runs that together take every branch a listed flag can steer (the services' loops are
    built, not run)."""
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import Node as HookNode

    _crictl, state, common = _split_node(tmp_path)
    root = build(str(tmp_path / "machine"), machine(2, 2, 2))
    proc_irq(os.path.join(root, "proc", "irq"), {24: "0-7"})
    topology = str(tmp_path / "two-numa.json")
    (tmp_path / "hints.json").write_text(json.dumps({"hints": [{"numa_affinity": [0], "preferred": True}]}))
    distances = tmp_path / "distances.json"
    distances.write_text(json.dumps({"0": [10, 20], "1": [20, 10]}))
    pod = tmp_path / "pod.json"
    pod.write_text(json.dumps({"uid": "u-1", "name": "p", "namespace": "n", "containers": [
        {"name": "app", "cpu_request": "1", "cpu_limit": "1", "memory_request": "1Gi", "memory_limit": "1Gi"}]}))
    own = ["--state", str(tmp_path / "own"), "--topology", topology]
    hook_node = HookNode(tmp_path / "hook", v2=True)
    made = hook_node.container()
    hook = ["--state", hook_node.state, "--sysfs-root", hook_node.sysfs, "--cgroup-root", str(hook_node.cgroup),
            "--kubelet-state", hook_node.kubelet_state]
    keeper = ["--sysfs-root", root, "--kubelet-state", str(state), "--state", str(tmp_path / "hk")]
    return {
        "topology": [["--sysfs-root", root], ["--topology", topology]],
        "plan": [["--topology", topology, "--available", "1-7", "--count", "2", "--numa-affinity", "0"],
                 ["--sysfs-root", root, "--available", "1-7", "--count", "2", "--kubelet-version", "1.38",
                  "--feature-gate", "PodLevelResourceManagers=true"]],
        "hints": [["--topology", topology, "--available", "1-7", "--count", "2", "--reusable", "1"],
                  ["--topology", topology, "--available", "1-7", "--count", "2", "--assigned", "3-4"],
                  ["--sysfs-root", root, "--available", "1-7", "--count", "2", "--scope", "pod", "--pod-assigned",
                   "2:3-4"]],
        "merge": [["--policy", "single-numa-node", "--numa-nodes", "0-1", "--hints", str(tmp_path / "hints.json")],
                  ["--policy", "best-effort", "--numa-nodes", "0-1", "--hints", str(tmp_path / "hints.json"),
                   "--option", "prefer-closest-numa-nodes=true", "--numa-distances", str(distances)]],
        "allocate": [own + ["--pod", str(pod), "--container", "app", "--numa-affinity", "0",
                            "--topology-manager-policy", "best-effort"]],
        "release": [own + ["--pod-uid", "u-1", "--container", "app"]],
        "state": [common, common + ["--reset"], common + ["--rebuild", "--check", "--kubelet-stopped"]],
        "reconcile": [common + ["--check"], common + ["--loop", "--metrics-path", str(tmp_path / "m.prom")],
                      common + ["--loop", "--no-watch"]],
        "housekeeping": [keeper + ["--check"], keeper + ["--loop", "--metrics-path", str(tmp_path / "m2.prom")],
                         keeper + ["--loop", "--no-watch"],
                         keeper + ["--check", "--irq-isolation", "off", "--cpu-power", "--crictl", _crictl["crictl"],
                                   "--runtime", "crictl", "--runtime-endpoint", "unix:///run/none.sock",
                                   "--runtime-timeout", "1"]],
        "defrag": [common + ["--check", "--max-moves", "1", "--keep-numa"]],
        "nri": [common + ["--socket", str(tmp_path / "nri.sock")]],
        "hook": [(hook, made["stdin"])],
        "demo": [["--topology", topology, "--json"], ["--sysfs-root", root]],
    }


def test_every_flag_a_sub_command_lists_is_one_it_uses(tmp_path, monkeypatch):
    """``kubecpu COMMAND --help`` lists only flags that COMMAND reads (itself, or as the settings its manager is made
    from). A flag it accepts for a configuration file shared with another command (the agent's, the hook's) is
    accepted but not listed."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services import agent, nri_plugin
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions

    reads = _Reads(monkeypatch)
    for name in list(cli.COMMANDS):
        monkeypatch.setitem(cli.COMMANDS, name, reads.command(cli.COMMANDS[name]))
    monkeypatch.setattr(agent.Agent, "run", lambda self: 0)

    def first_event_only(plugin):  # what each event asks first: does the kubelet pin CPUs itself?
        plugin.manager.steps_aside()
        return 0
    monkeypatch.setattr(nri_plugin.NRIPlugin, "run", first_event_only)
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices  # pylint: disable=protected-access
    unused = {}
    for command, runs in _invocations(tmp_path).items():
        reads.names.clear()
        for given in runs:
            argv, stdin = given if isinstance(given, tuple) else (given, b"")
            out, err = io.StringIO(), io.StringIO()
            code = cli.main([command] + argv, out, err, io.TextIOWrapper(io.BytesIO(stdin)))
            assert code in (0, 1), (command, argv, err.getvalue())
        listed = [action for action in subparsers[command]._actions  # pylint: disable=protected-access
                  if action.option_strings and action.help != argparse.SUPPRESS and action.dest != "help"]
        missed = [action.option_strings[-1] for action in listed
                  if action.dest != "config"  # run_command reads it (test_cli_args: the file's flags come first)
                  and not {action.dest, SETTING_OF.get(action.dest)} & reads.names
                  and not (action.dest in ManagerOptions._fields + ("topology_manager_option",)
                           and "manager:" + SETTING_OF.get(action.dest, action.dest) in reads.names)]
        if missed:
            unused[command] = missed
    assert unused == {}, json.dumps(unused, indent=1)


# --- Read-only means read-only (issue 63, case 8, and its generalisation) -----------------------------------------
def _snapshot(top):
    """Every entry below ``top``: its kind, inode, mtime_ns, size and bytes (a directory's mtime moves when anything is
    created or removed in it, a lock file's when a holder takes it); not the crictl stand-in's log of its calls."""
    found = {}
    for where, dirs, files in os.walk(str(top)):
        for name in dirs + sorted(set(files) - {"calls.log"}):
            path = os.path.join(where, name)
            info = os.lstat(path)
            data = open(path, "rb").read() if os.path.isfile(path) and not os.path.islink(path) else None
            found[path] = (info.st_mode, info.st_ino, info.st_mtime_ns, info.st_size, data)
    found[str(top)] = os.stat(str(top)).st_mtime_ns
    return found


@pytest.fixture(scope="module")
def read_node(tmp_path_factory):
    """One node for every read: the crictl stand-in and its cgroupfs, a state file with its lock file (so a lock taken
    shows as the lock file's mtime), the kubelet's checkpoint, a sysfs tree with /proc/irq, a pod, hints, distances and
    a configuration file. Reads change nothing, so every example runs on the same tree."""
    tmp = tmp_path_factory.mktemp("reads")
    _crictl, state, common = _split_node(tmp)
    (tmp / "state.lock").write_text("")
    (tmp / "node" / "calls.log").write_text("")  # the stand-in appends to it: its directory's mtime stays
    root = build(str(tmp / "machine"), machine(2, 2, 2))
    proc_irq(os.path.join(root, "proc", "irq"), {24: "0-7"})
    (tmp / "kubelet_state").write_bytes(checkpoint_file("0-7", {}))
    (tmp / "hints.json").write_text(json.dumps({"hints": [{"numa_affinity": [0], "preferred": True}]}))
    (tmp / "distances.json").write_text(json.dumps({"0": [10, 20], "1": [20, 10]}))
    (tmp / "agent.json").write_text(json.dumps({"runtime_timeout": 1}))
    (tmp / "pod.json").write_text(json.dumps({"uid": "a06b0ffe-e387-47dc-90e2-339fa3fc242a", "name": "p",
                                              "namespace": "n", "containers": [
                                                  {"name": "main", "cpu_request": "1", "cpu_limit": "1", "memory_request": "1Gi", "memory_limit": "1Gi"}]}))
    values = {"tmp": str(tmp), "state": str(state), "root": root, "topology": str(tmp / "two-numa.json"),
              "crictl": common[common.index("--crictl") + 1], "cgroup": common[common.index("--cgroup-root") + 1]}
    return tmp, values


# The flags every run of a command has: the required ones, and for the commands that reach the runtime the stand-in
# crictl and its cgroupfs (never this machine's own runtime).
RUNTIME_BASE = ["--crictl", "{crictl}", "--cgroup-root", "{cgroup}", "--topology", "{topology}"]
READ_BASE = {
    "topology": [], "plan": ["--available", "1-7", "--count", "2"], "hints": ["--available", "1-7", "--count", "2"],
    "merge": ["--policy", "single-numa-node", "--numa-nodes", "0-1", "--hints", "{tmp}/hints.json"],
    "demo": [], "state": RUNTIME_BASE + ["--state", "{state}"],
    "reconcile": RUNTIME_BASE + ["--state", "{state}", "--check"],
    "housekeeping": ["--sysfs-root", "{root}", "--kubelet-state", "{tmp}/kubelet_state", "--state", "{tmp}/own",
                     "--check"],
    "defrag": RUNTIME_BASE + ["--state", "{state}", "--check", "--time-budget", "50ms"],
    "allocate": ["--topology", "{topology}", "--state", "{state}", "--read-only", "--pod", "{tmp}/pod.json",
                 "--container", "main"],
    "release": ["--topology", "{topology}", "--state", "{state}", "--read-only", "--pod-uid",
                "a06b0ffe-e387-47dc-90e2-339fa3fc242a", "--container", "main"],
}
# Every value a flag of these commands is tried with (a flag missing here fails the test: a new flag is covered as
# soon as it exists); None marks a switch.
READ_VALUES = {
    "topology": ["{topology}"], "sysfs_root": ["{root}"], "option": ["full-pcpus-only", "strict-cpu-reservation"],
    "kubelet_version": ["1.35", "1.37", "1.38"],
    "feature_gate": ["PodLevelResourceManagers=true", "InPlacePodVerticalScalingExclusiveCPUs=false", "Foo=true"],
    "numa_affinity": ["0", "1"], "reusable": ["1"], "assigned": ["3-4"], "scope": ["container", "pod"],
    "pod_assigned": ["2:3-4"], "numa_distances": ["{tmp}/distances.json"],
    "state": ["{state}", "{tmp}/missing", "{tmp}/no-such-dir/state"], "policy": ["static", "none"],
    "num_reserved": ["0", "1", "2"], "reserved_cpus": ["0", "0-1"], "runtime": ["crictl"],
    "runtime_endpoint": ["unix://{tmp}/no.sock"], "crictl": ["{crictl}"], "runtime_timeout": ["1"],
    "cgroup_root": ["{cgroup}"], "kubelet_state": ["{tmp}/none", "{tmp}/kubelet_state"],
    "cache": ["{tmp}/cache.json"], "isolated_cpus": ["ignore", "prefer"], "cpu_quota": ["keep", "unlimited"],
    "irq_isolation": ["off", "exclusive"], "topology_manager_policy": ["none", "single-numa-node"],
    "topology_manager_scope": ["container", "pod"], "topology_manager_option": ["prefer-closest-numa-nodes"],
    "period": ["1s"], "metrics_path": ["{tmp}/metrics.prom"], "config": ["{tmp}/agent.json"], "max_moves": ["1"],
    "time_budget": ["100ms"],
    "read_only": None, "reset": None, "rebuild": None, "kubelet_stopped": None, "check": None, "loop": None,
    "no_watch": None, "force": None, "align_memory": None, "besteffort_idle": None, "cpu_burst": None,
    "cpu_power": None,
    "keep_numa": None, "json": None, "exclusive_burstable": None, "system_partition": None,
    "system_namespaces": ["kube-system"], "system_priority_classes": ["system-node-critical", ""],
}
WRITE_FLAGS = {"reset", "rebuild"}  # state's: a write unless --check or --read-only holds it back


def _flag_actions(command):
    """The sub-command's flags, from its parser (hidden ones too: they are accepted)."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # pylint: disable=protected-access
    return [action for action in sub._actions  # pylint: disable=protected-access
            if action.option_strings and action.dest != "help"]


def _optional_actions(command):
    """The sub-command's flags but the ones its base run has."""
    given = {word for word in READ_BASE[command] if word.startswith("--")}
    return [action for action in _flag_actions(command) if not set(action.option_strings) & given]


def _is_read(command, argv):
    if command != "state":
        return True  # each base run is a read: a print, --check or --read-only
    return not set(argv) & {"--reset", "--rebuild"} or "--check" in argv or "--read-only" in argv


def _read_run(read_node, command, extra):
    """Run ``command`` with its base flags and ``extra``; assert that the tree is as it was and that a combination
    that cannot be honoured exits 2 saying so. Returns the exit code."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_checks import conflicts

    tmp, values = read_node
    argv = [command] + [word.format(**values) for word in READ_BASE[command] + extra]
    before = _snapshot(tmp)
    code, out, err = run(argv)
    assert _snapshot(tmp) == before, (argv, code, err)
    assert code in (0, 1, 2) and (code != 0 or out), (argv, code, err)
    parsed = argparse.Namespace(**{action.dest: True for action in _flag_actions(command)
                                   if set(action.option_strings) & set(argv)})
    if conflicts(parsed) and "unrecognized" not in err and "not allowed with argument" not in err:
        assert code == 2 and ("drop one of them" in err or "add --check" in err), (argv, err)
    return code


def _extras(actions, chosen):
    extra = []
    for action, value in chosen:
        extra += [action.option_strings[-1]] if READ_VALUES[action.dest] is None else [action.option_strings[-1],
                                                                                       value]
    return extra


@pytest.mark.parametrize("command", sorted(READ_BASE))
def test_every_flag_of_every_read_has_a_value_to_try(command):
    missing = [action.option_strings[-1] for action in _optional_actions(command) if action.dest not in READ_VALUES]
    assert missing == []


# state's switches, and the switches beside each command's --check: every combination that is a read
MODE_FLAGS = {"state": ["--reset", "--rebuild", "--kubelet-stopped", "--check", "--read-only", "--force"],
              "reconcile": ["--loop", "--no-watch", "--metrics-path", "--read-only", "--force"],
              "housekeeping": ["--loop", "--no-watch", "--metrics-path", "--read-only"],
              "defrag": ["--read-only", "--force", "--keep-numa"]}
MODE_RUNS = [(command, [flag for bit, flag in enumerate(flags) if mask >> bit & 1])
             for command, flags in sorted(MODE_FLAGS.items()) for mask in range(1 << len(flags))]


@pytest.mark.parametrize("command,flags", [run_ for run_ in MODE_RUNS if _is_read(run_[0], run_[1])],
                         ids=lambda item: " ".join(item) if isinstance(item, list) else item)
def test_every_combination_of_a_reads_switches_changes_nothing(read_node, command, flags):
    """The exhaustive table: each read's switches in every combination (--metrics-path with its file). A combination
    that cannot be honoured (--reset or --loop or --metrics-path with --check, --reset or --rebuild with --read-only)
    exits 2, and nothing is created, moved, modified or locked."""
    extra = []
    for flag in flags:
        extra += [flag, "{tmp}/metrics.prom"] if flag == "--metrics-path" else [flag]
    code = _read_run(read_node, command, extra)
    if {"--reset", "--check"} <= set(flags) or {"--loop", "--metrics-path"} & set(flags):
        assert code == 2


@st.composite
def _read_flags(draw, command):
    actions = _optional_actions(command)
    picked = draw(st.lists(st.sampled_from(actions), unique_by=lambda action: action.dest, max_size=6))
    chosen = [(action, None if READ_VALUES[action.dest] is None else draw(st.sampled_from(READ_VALUES[action.dest])))
              for action in picked]
    return _extras(actions, chosen)


@pytest.mark.parametrize("command", sorted(READ_BASE))
@hypothesis.settings(max_examples=10)  # 11 commands x 10: 35 s each at 25 in the suite (the switches test is exhaustive)
@hypothesis.given(data=st.data())
def test_no_flag_combination_of_a_read_changes_anything(read_node, command, data):
    """Random flag sets, drawn from each read command's own parser, with values of every kind (a missing file, a
    directory that does not exist, a refused reservation, an unknown gate): the tree stays as it was."""
    extra = data.draw(_read_flags(command))
    if command == "state" and not _is_read(command, READ_BASE[command] + extra):
        extra += ["--check"]
    _read_run(read_node, command, extra)


def test_state_reset_with_check_resets_nothing(tmp_path, topo_files):
    """Issue 63, case 8: ``state --reset --check`` moved the checkpoint aside, wrote an empty one and exited 0; on the
    kubelet's file with --kubelet-stopped, the kubelet then started with no assignments. It is refused (exit 2)."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    node.run("allocate", "--pod", node.pod("u", [("a", "2")]), "--container", "a")
    before = _snapshot(tmp_path)
    for extra in ([], ["--kubelet-stopped"], ["--read-only"]):
        code, out, err = node.run("state", "--reset", "--check", *extra)
        assert (code, out) == (2, "") and "--check with --reset" in err, err
        assert _snapshot(tmp_path) == before
    code, _out, err = node.run("state", "--reset", "--read-only")
    assert code == 2 and "--read-only with --reset" in err and _snapshot(tmp_path) == before


# --- The CLI refuses instead of guessing (issue 64) -------------------------------------------------------------
def test_allocate_refuses_a_state_path_whose_directory_does_not_exist(tmp_path, topo_files):
    """``allocate --state /nonexistent-dir/st`` created /nonexistent-dir (mode 0700) wherever the typo pointed. Every
    command that takes --state refuses it (exit 2, the path named) and creates nothing."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    pod = node.pod("u", [("a", "2")])
    before = _snapshot(tmp_path)
    for target in (tmp_path / "nonexistent-dir" / "st", tmp_path / "u.json" / "st"):
        code, out, err = run(["allocate", "--topology", topo_files["topoDualSocketHT"], "--state", str(target),
                              "--pod", pod, "--container", "a"])
        assert (code, out) == (2, "") and "--state %s: its directory %s" % (target, target.parent) in err
        assert _snapshot(tmp_path) == before
    for command in ("release", "state", "reconcile", "defrag", "housekeeping"):
        code, _out, err = run([command, "--state", str(tmp_path / "nonexistent-dir" / "st"), "--pod-uid", "u",
                               "--container", "a"] if command == "release" else
                              [command, "--state", str(tmp_path / "nonexistent-dir" / "st")])
        assert code == 2 and "does not exist" in err, (command, err)
    assert _snapshot(tmp_path) == before


def test_kubecpus_own_state_directory_is_still_made_when_missing(tmp_path, topo_files, monkeypatch):
    """The agent role makes the state directory itself (present.yml, mode 0700); a bare node running kubecpu by hand
    gets its own /var/lib/kubecpu made as before (here a stand-in for it)."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli_checks

    own = tmp_path / "var-lib-kubecpu"
    monkeypatch.setattr(cli_checks, "OWN_DIRECTORY", str(own))
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    code, out, err = run(["allocate", "--topology", topo_files["topoDualSocketHT"], "--state", str(own / "state"),
                          "--pod", node.pod("u", [("a", "2")]), "--container", "a"])
    assert code == 0 and json.loads(out)["exclusive"], err
    assert os.stat(str(own)).st_mode & 0o777 == 0o700


def test_release_of_an_unknown_pod_uid_is_refused_and_creates_nothing(tmp_path, topo_files):
    """``release --pod-uid nope`` created a state file and its lock and printed {"released": ""} with exit 0."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    code, out, err = node.run("release", "--pod-uid", "nope", "--container", "app")
    assert (code, out) == (2, "") and "nothing to release: no pod with uid nope holds exclusive CPUs there" in err
    assert os.listdir(str(tmp_path)) == []
    node.run("allocate", "--pod", node.pod("u", [("a", "2"), ("b", "500m")]), "--container", "a")
    node.run("allocate", "--pod", node.pod("u", [("a", "2"), ("b", "500m")]), "--container", "b")
    before = _snapshot(tmp_path)
    for uid, container, says in (("nope", "a", "no pod with uid nope"), ("u", "b", "pod u holds exclusive CPUs for "
                                 "a only"), ("u", "zz", "pod u holds exclusive CPUs for a only")):
        code, out, err = node.run("release", "--pod-uid", uid, "--container", container)
        assert (code, out) == (2, "") and says in err and '"%s" is not released' % container in err
        assert _snapshot(tmp_path) == before
    assert node.run("release", "--pod-uid", "u", "--container", "a")[:2] == (0, '{"released": "2,8"}\n')


def test_a_failed_reconcile_leaves_no_lock_behind(tmp_path):
    """A reconcile whose runtime cannot be reached fails (exit 1) and leaves nothing: no lock file, no state, no
    cache."""
    _crictl, state, common = _split_node(tmp_path)
    state.unlink()
    before = _snapshot(tmp_path)
    for backend in (["--runtime", "cri", "--runtime-endpoint", "unix://%s/no.sock" % tmp_path],
                    ["--crictl", str(tmp_path / "no-crictl")]):
        code, out, err = run(["reconcile"] + common + backend)
        assert (code, out) == (1, "") and ("container runtime unavailable" in err or "crictl not found" in err), err
        assert _snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root to make a root-owned socket and setpriv to run as another user")
def test_a_failed_non_root_reconcile_says_run_as_root_and_leaves_no_lock(tmp_path):
    """A non-root ``reconcile`` against a root-owned socket said "permission denied" and left its lock file. It says
    to run as root, and leaves the state's directory as it was."""
    import socket
    import tempfile

    top = tempfile.mkdtemp(prefix="kubecpu-nonroot-")
    try:
        os.chmod(top, 0o755)
        server = socket.socket(socket.AF_UNIX)
        server.bind(os.path.join(top, "runtime.sock"))
        server.listen(1)
        os.chmod(os.path.join(top, "runtime.sock"), 0o600)
        states = os.path.join(top, "states")
        os.mkdir(states)
        os.chmod(states, 0o777)
        topology = os.path.join(top, "topology.json")
        with open(topology, "w", encoding="utf-8") as handle:
            json.dump(fixture_as_document("topoDualSocketHT"), handle)
        os.chmod(topology, 0o644)
        # the user runs a copy it can read (the checkout or ansible-test's copy may sit in a folder only root reads),
        # with the system's interpreter (a virtual environment's may be as private)
        shutil.copytree(os.path.join(ROOT, "plugins", "module_utils"), os.path.join(top, "plugins", "module_utils"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        os.makedirs(os.path.join(top, "bin"))
        shutil.copy(KUBECPU, os.path.join(top, "bin", "kubecpu"))
        for folder, dirs, files in os.walk(top):
            for name in dirs:
                os.chmod(os.path.join(folder, name), 0o755)
            for name in files:
                if name.endswith(".py") or name == "kubecpu":
                    os.chmod(os.path.join(folder, name), 0o644)
        proc = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                               os.path.join(top, "bin", "kubecpu"), "reconcile", "--runtime", "cri", "--runtime-endpoint",
                               "unix://%s/runtime.sock" % top, "--state", os.path.join(states, "state"), "--topology",
                               topology, "--kubelet-state", os.path.join(top, "none")],
                              capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"})
        server.close()
        assert proc.returncode == 1 and "permission denied" in proc.stderr, proc.stderr
        assert "kubecpu runs as uid 65534" in proc.stderr and "run it as root" in proc.stderr
        assert os.listdir(states) == []
    finally:
        subprocess.run(["rm", "-rf", "--", top], check=False)


@pytest.mark.parametrize("text,uid,hint", [
    ("cannot open lock file /var/lib/kubecpu/cpu_manager_state.lock: Permission denied", 1000, True),
    ("container runtime unavailable: rpc error: ...: permission denied (endpoint unix:///run/x.sock)", 1000, True),
    ("container runtime unavailable: rpc error: ...: permission denied (endpoint unix:///run/x.sock)", 0, False),
    ("container runtime unavailable: connection refused", 1000, False),
])
def test_permission_denied_says_run_as_root_only_where_that_is_the_cause(text, uid, hint):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import as_root

    said = as_root(text, uid)
    assert said.startswith(text) and ("run it as root" in said) == hint


@pytest.mark.parametrize("argv", [
    ["plan", "--topology", "{topology}", "--available", "0-11", "--count", "1"], ["state", "{common}"],
    ["allocate", "{common}", "--pod", "{pod}", "--container", "a"],
])
def test_an_unknown_feature_gate_is_refused_in_the_kubelets_words(tmp_path, topo_files, argv):
    """``--feature-gate Foo=true`` was accepted (exit 0). The kubelet refuses to start with "unrecognized feature gate:
    Foo" (component-base/featuregate); kubecpu says the same, and changes nothing."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    pod = node.pod("u", [("a", "1")])
    argv = [part for word in argv for part in (node.common if word == "{common}" else
                                               [word.format(pod=pod, topology=topo_files["topoDualSocketHT"])])]
    before = _snapshot(tmp_path)
    code, out, err = run(argv + ["--feature-gate", "Foo=true"])
    assert (code, out) == (2, "") and "unrecognized feature gate: Foo" in err and _snapshot(tmp_path) == before
    code, _out, err = run(argv + ["--kubelet-version", "1.37", "--feature-gate", "PodLevelResourceManagers=true"])
    assert code == 0, err


def _num_reserved_commands():
    """Every sub-command whose help lists --num-reserved, from the parser."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices  # pylint: disable=protected-access
    return sorted(name for name, sub in subs.items() for action in sub._actions  # pylint: disable=protected-access
                  if "--num-reserved" in action.option_strings and action.help != argparse.SUPPRESS)


@pytest.mark.parametrize("command", _num_reserved_commands())
def test_num_reserved_0_is_refused_wherever_static_applies(tmp_path, topo_files, command):
    """``demo --num-reserved 0`` was accepted although the kubelet refuses the static policy with nothing reserved
    (ALGORITHM.md section 3). Every command that lists --num-reserved refuses 0 under static, in the kubelet's words,
    before it reads or writes anything; under the none policy 0 is fine."""
    node = Node(tmp_path, topo_files)
    argv = {"allocate": ["--pod", node.pod("u", [("a", "1")]), "--container", "a"],
            "release": ["--pod-uid", "u", "--container", "a"]}.get(command, [])
    before = _snapshot(tmp_path)
    code, out, err = run([command, "--topology", topo_files["topoDualSocketHT"], "--num-reserved", "0"] + argv)
    assert (code, out) == (2, "") and err.startswith(ZERO_RESERVATION), err
    assert _snapshot(tmp_path) == before
    if command != "demo":  # (parsed and checked, not run: nri and hook are services)
        from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_args import build_parser
        from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces.cli_checks import refuse

        refuse(build_parser().parse_args([command, "--num-reserved", "0", "--policy", "none", "--state",
                                          str(tmp_path / "state")] + argv))


# --- A Kubernetes Pod given to --pod -------------------------------------------------------------------------------
def _resources(cpu=None, memory=None, requests=None):
    limits = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    found = {"limits": limits} if limits else {}
    if requests:
        found["requests"] = requests
    return found


POD_MANIFEST = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "prod", "uid": "7c1e0b9e-2f0a-4a5b-9a7c-2d4b8c9e1f00"},
    "spec": {"initContainers": [{"name": "log", "restartPolicy": "Always", "resources": _resources("1", "64Mi")},
                                {"name": "setup", "resources": _resources(2, "1Gi")}],
             "containers": [{"name": "app", "image": "nginx", "resources": _resources("2", "1Gi")},
                            {"name": "metrics", "resources": _resources("500m", "64Mi")}]},
    "status": {"qosClass": "Guaranteed", "phase": "Running"}}
POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: prod
  uid: 7c1e0b9e-2f0a-4a5b-9a7c-2d4b8c9e1f00
spec:
  initContainers:
  - name: log
    restartPolicy: Always
    resources:
      limits: {cpu: "1", memory: 64Mi}
  - name: setup
    resources:
      limits:
        cpu: 2
        memory: 1Gi
  containers:
  - name: app
    image: nginx
    resources:
      limits: {cpu: "2", memory: 1Gi}
  - name: metrics
    resources:
      limits: {cpu: 500m, memory: 64Mi}
"""


@pytest.mark.parametrize("text", [json.dumps(POD_MANIFEST), POD_YAML], ids=["json", "yaml"])
def test_a_kubernetes_pod_manifest_is_accepted_and_converted(tmp_path, topo_files, text):
    """A ``kind: Pod`` given to --pod got ``"uid" must be a non-empty string``. It is read as the kubelet reads the
    pod: the uid from metadata.uid, requests defaulted to limits, an init container with restartPolicy Always as a
    sidecar (it keeps its CPUs), and the QoS class computed from the containers (not status.qosClass)."""
    node = Node(tmp_path, topo_files, extra=["--num-reserved", "1"])
    (tmp_path / "pod").write_text(text)
    got = {}
    for name in ("setup", "log", "app", "metrics"):
        code, out, err = node.run("allocate", "--pod", str(tmp_path / "pod"), "--container", name)
        assert code == 0, err
        got[name] = json.loads(out)
    assert [got[n]["exclusive"] for n in ("setup", "log", "app", "metrics")] == [True, True, True, False]
    assert len(CPUSet.parse(got["app"]["cpus"])) == 2 and set(node.file().entries) == {POD_MANIFEST["metadata"]["uid"]}
    assert CPUSet.parse(got["log"]["cpus"]).isdisjoint(CPUSet.parse(got["app"]["cpus"]))  # a sidecar keeps its CPUs


def test_a_pod_manifest_and_kubecpus_pod_document_allocate_alike(tmp_path, topo_files):
    """The manifest and kubecpu's own document of the same pod: the same answers, the same state file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    manifest, document = Node(tmp_path / "a", topo_files), Node(tmp_path / "b", topo_files)
    (tmp_path / "pod.json").write_text(json.dumps(POD_MANIFEST))
    twin = document.pod(POD_MANIFEST["metadata"]["uid"], [("app", "2"), ("metrics", "500m")],
                        init=[("log", "1", {"restart_policy": "Always"}), ("setup", "2", {})])
    for name in ("setup", "log", "app", "metrics"):
        assert manifest.run("allocate", "--pod", str(tmp_path / "pod.json"), "--container", name)[:2] == \
            document.run("allocate", "--pod", twin, "--container", name)[:2]
    assert manifest.file() == document.file()


@pytest.mark.parametrize("doc,message", [
    (dict(POD_MANIFEST, metadata={"name": "web"}), "a Pod manifest needs metadata.uid"),
    (dict(POD_MANIFEST, kind="Deployment"), "kind is 'Deployment': a Pod is expected"),
    (dict(POD_MANIFEST, spec=dict(POD_MANIFEST["spec"], resources={"limits": {"cpu": "4"}})),
     "spec.resources (pod-level resources) is not modelled"),
    (dict(POD_MANIFEST, spec={"containers": [{"name": "a", "resources": {"limits": {"cpu": True}}}]}),
     "spec.containers[0]: resources.limits.cpu: a quantity is expected, got True"),
    (dict(POD_MANIFEST, spec={"containers": "a"}), "spec.containers must be a list"),
    (dict(POD_MANIFEST, spec={"containers": []}), '"containers" must list at least one container'),
])
def test_a_pod_manifest_kubecpu_cannot_read_as_the_kubelet_does_is_refused(tmp_path, topo_files, doc, message):
    node = Node(tmp_path, topo_files)
    (tmp_path / "pod.json").write_text(json.dumps(doc))
    code, out, err = node.run("allocate", "--pod", str(tmp_path / "pod.json"), "--container", "app")
    assert (code, out) == (2, "") and message in err, err
    assert not os.path.exists(node.state)


def test_a_yaml_pod_without_pyyaml_says_to_give_json(tmp_path, topo_files, monkeypatch):
    """The core needs nothing but the standard library: YAML is read through PyYAML where this Python has it (Ansible
    brings it; Debian's python3-yaml), and without it the message says what to give instead."""
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    node = Node(tmp_path, topo_files)
    (tmp_path / "pod.yaml").write_text(POD_YAML)
    code, _out, err = node.run("allocate", "--pod", str(tmp_path / "pod.yaml"), "--container", "app")
    assert code == 2 and "is not JSON, and this Python" in err and "kubectl get pod NAME -o json" in err


def test_the_checkpoint_named_as_the_kubelets_is_never_reset_without_the_kubelet_stopped(tmp_path):
    """Issue 63's review: a kubelet with --root-dir keeps its checkpoint elsewhere. With --state and --kubelet-state the
    same file, ``state --reset`` moved the running kubelet's checkpoint aside and wrote a fresh one without
    --kubelet-stopped and without the judge; that file is now the kubelet's, only read until the kubelet is stopped."""
    topology = tmp_path / "topo.json"
    topology.write_text(json.dumps({"format": "kubecpu.topology/v1", "source": "file", "cpus": [
        {"cpu": c, "core": c, "socket": 0, "numa": 0, "uncore": 0} for c in range(4)]}))
    kubelets = tmp_path / "kubelet" / "cpu_manager_state"
    kubelets.parent.mkdir()
    before = checkpoint_file("0,3", {"pod-a": {"app": "1-2"}})
    kubelets.write_bytes(before)
    code, _out, err = run(["state", "--reset", "--topology", str(topology), "--state", str(kubelets),
                           "--kubelet-state", str(kubelets), "--num-reserved", "1"])
    assert code != 0 and kubelets.read_bytes() == before, (code, err)
    assert sorted(os.listdir(kubelets.parent)) == ["cpu_manager_state"]
