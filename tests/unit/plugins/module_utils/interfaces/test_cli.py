"""bin/kubecpu: the kubelet cases through the command line, exit codes, and the state commands."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli
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
    assert node.run("release", "--pod-uid", "uid-1", "--container", "app")[1] == '{"released": ""}\n'
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


ZERO_RESERVED_CLI = ("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than "
                     "zero (set --reserved-cpus or --num-reserved)")


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
                         keeper + ["--loop", "--no-watch"]],
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
