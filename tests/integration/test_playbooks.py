"""The fleet playbooks over local "nodes" (scripts/fleet.py: fake sysfs trees, kubelet configs and checkpoints, a
stand-in crictl on the agent nodes): plan.yml's per-node answers, and report.yml's page opened in a real browser
(playwright driving Debian's chromium), its core map checked through the DOM."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from test_modules import ROOT, collections_path

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fleet

CHROMIUM = shutil.which("chromium")
POD_A, POD_B = fleet.POD_A, fleet.POD_B


def run_playbook(name, inventory, extra, *args, rc=0):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_LOCALHOST_WARNING="0")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, "-f", "10",
            os.path.join(ROOT, "playbooks", name), "-e", json.dumps(extra), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == rc, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout
    return proc


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("fleet"))
    fleet.build(directory, 8, sys.executable)
    return directory


def test_plan_answers_per_node_and_changes_nothing(local_fleet, tmp_path):
    inventory = os.path.join(local_fleet, "inventory.yml")
    before = {p: open(p, "rb").read() for p in _state_files(local_fleet)}
    proc = run_playbook("plan.yml", inventory, {"kubecpu_plan_file": str(tmp_path / "plan.json")})
    plans = {p["node"]: p for p in json.load(open(tmp_path / "plan.json"))}
    assert len(plans) == 8
    none_node, static_node, agent_node, moved_node = (plans["node00%d-%s" % (i, k)] for i, k in enumerate(fleet.KINDS))
    assert none_node["state_rejected"] and 'configured policy "static" differs' in none_node["state_reason"]
    assert none_node["changes"][:2] == ["cpuManagerPolicy", "reservedSystemCPUs"]
    assert none_node["reserved_cpus"] == "0,8" and none_node["pods_moving"] == []
    assert static_node == dict(static_node, changes=[], state_rejected=False, pinned_today=2, pods_moving=[])
    assert agent_node["reserved_cpus"] == "0" and not agent_node["state_rejected"] and agent_node["pinned_today"] == 1
    assert agent_node["pods_moving"] == []  # the agent's own pass already pinned prod/web main
    assert moved_node["state_rejected"] and "not all reserved cpus" in moved_node["state_reason"]
    assert [(m["pod"], m["container"], m["cpus_now"]) for m in moved_node["pods_moving"]] == [(POD_A, "app", "0,8")]
    assert moved_node["path"] == "rewrite" and moved_node["pods_moving"][0]["cpus_after"] == "1,9"  # no drain
    assert none_node["path"] == "drain" and "the runtime cannot list them" in none_node["rewrite_reason"]
    assert static_node["path"] == "restart" and agent_node["path"] == "restart"
    summary = proc.stdout[proc.stdout.index("NODE "):]
    assert re.search(r"node001-kubelet-static\s+kubelet\s+0,8\s+kept\s+restart\s+0\s+nothing", summary)
    assert re.search(r"node003-kubelet-moved\s+kubelet\s+\S+\s+REJECTED\s+rewrite\s+1\s", summary)
    assert ("8 nodes: 6 would change, 4 state files rejected (2 rewritten without a drain, 2 drained), 0 refused, "
            "2 containers would lose or move CPUs") in summary
    assert {p: open(p, "rb").read() for p in _state_files(local_fleet)} == before  # a dry run


def _state_files(directory):
    return sorted(os.path.join(d, f) for d, _dirs, files in os.walk(directory) for f in files if f == "cpu_manager_state")


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_report_page_in_a_real_browser(local_fleet, tmp_path):
    report = tmp_path / "report"
    run_playbook("report.yml", os.path.join(local_fleet, "inventory.yml"), {"kubecpu_report_dir": str(report)})
    fleet_doc = json.load(open(report / "fleet.json"))
    assert [n["node"] for n in fleet_doc["nodes"]][:4] == ["node00%d-%s" % (i, k) for i, k in enumerate(fleet.KINDS)]
    html = (report / "index.html").read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)  # offline: nothing fetched
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        page.goto((report / "index.html").as_uri())
        page.screenshot(path=str(report / "screenshot.png"), full_page=True)

        def owners(node):
            return page.eval_on_selector_all(
                '.cpu[data-node="%s"]' % node,
                "els => Object.fromEntries(els.map(e => [e.dataset.cpu, [e.dataset.kind, e.dataset.owner]]))")

        static = owners("node001-kubelet-static")
        assert static["0"] == ["reserved", ""] and static["8"] == ["reserved", ""]
        assert static["4"] == static["12"] == ["exclusive", POD_A + "/app"]
        assert all(static[str(c)] == ["exclusive", POD_B + "/db"] for c in (5, 6, 7, 13, 14, 15))
        assert all(static[str(c)] == ["shared", ""] for c in (1, 2, 3, 9, 10, 11))
        agent = owners("node002-agent")  # names from the (stand-in) runtime
        assert agent == {"0": ["reserved", ""], "1": ["exclusive", "prod/web/main"],
                         "2": ["exclusive", "prod/web/main"], "3": ["shared", ""]}
        assert page.eval_on_selector('.node[data-node="node001-kubelet-static"] .cpu[data-cpu="4"]',
                                     "e => e.closest('.numa').dataset.numa + '/' + e.closest('.socket').dataset.socket"
                                     ) == "1/1"
        free = page.eval_on_selector_all('.node[data-node="node001-kubelet-static"] .fragmentation tr[data-numa]',
                                         "rows => rows.map(r => r.innerText.replace(/\\s+/g, ' '))")
        assert free == ["0 3", "1 0"]
        room = page.eval_on_selector_all('.node[data-node="node001-kubelet-static"] .headroom tr[data-headroom]',
                                         "rows => rows.map(r => r.dataset.headroom + ' ' + r.cells[1].innerText)")
        assert room == ["largest_full_pcpus_only 6", "largest_single_numa 6", "largest_single_socket 6",
                        "largest_single_numa_whole_cores 6", "free_whole_cores 3"]
        page.fill("#filter", "prod/web")
        visible = page.eval_on_selector_all(".node:not(.hidden)", "els => els.map(e => e.dataset.node)")
        assert visible == ["node002-agent", "node006-agent"]
        page.fill("#filter", "numa:1")
        assert page.eval_on_selector_all(".cpu.hit", "els => els.length") == 8 * 6  # six 16-CPU nodes
        page.fill("#filter", "")
        page.select_option("#kind", "exclusive")
        assert len(page.eval_on_selector_all(".node:not(.hidden)", "els => els")) == 6
        browser.close()
    assert (report / "screenshot.png").stat().st_size > 10000


def test_plan_answers_what_a_topology_manager_policy_would_admit(local_fleet, tmp_path):
    run_playbook("plan.yml", os.path.join(local_fleet, "inventory.yml"),
                 {"kubecpu_plan_file": str(tmp_path / "plan.json"), "kubecpu_plan_topology_manager_policy": "restricted",
                  "kubecpu_hosts": "node002-agent"})
    (plan,) = json.load(open(tmp_path / "plan.json"))
    assert plan["admission"]["policy"] == "restricted" and plan["admission"]["error"] is None
    assert [(c["pod"], c["container"], c["admitted"], c["numa_nodes"]) for c in plan["admission"]["containers"]] == [
        ("prod/web", "main", True, [0])]


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_report_reads_the_checkpoint_without_a_kubelet_configuration_and_shows_failed_reads(tmp_path):
    """A kubelet node whose configuration is not readable shows what its checkpoint says (policy from the file, and
    the page says so); a node whose read fails is counted and shown as an error with its message, never as empty."""
    directory = str(tmp_path / "fleet")
    fleet.build(directory, 3, sys.executable, ("kubelet-static", "kubelet-static", "agent"))
    nodes = os.path.join(directory, "nodes")
    os.unlink(os.path.join(nodes, "node000-kubelet-static", "kubelet", "config.yaml"))
    with open(os.path.join(nodes, "node001-kubelet-static", "kubelet", "cpu_manager_state"), "w") as handle:
        handle.write('{"policyName":"static","defaultCpuSet":"0-3","checksum":1}')
    report = tmp_path / "report"
    proc = run_playbook("report.yml", os.path.join(directory, "inventory.yml"), {"kubecpu_report_dir": str(report)})
    assert "3 nodes, 1 with errors" in " ".join(proc.stdout.split())
    doc = {n["node"]: n for n in json.load(open(report / "fleet.json"))["nodes"]}
    unconfigured, broken, agent = (doc[name] for name in sorted(doc))
    assert unconfigured["error"] is None
    assert unconfigured["policy"] == "static" and unconfigured["policy_source"] == "checkpoint"
    owners = {c["cpu"]: c["owner"] for c in unconfigured["cpus"] if c["kind"] == "exclusive"}
    assert owners == {4: POD_A + "/app", 12: POD_A + "/app", **{c: POD_B + "/db" for c in (5, 6, 7, 13, 14, 15)}}
    assert "checkpoint is corrupted" in broken["error"] and broken["policy"] is None
    assert agent["error"] is None and agent["policy_source"] == "configured"
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((report / "index.html").as_uri())
        meta = page.inner_text('.node[data-node="node000-kubelet-static"] .meta')
        assert "policy static (from the checkpoint: no kubelet configuration)" in meta
        error = page.inner_text('.node[data-node="node001-kubelet-static"] .error')
        assert error.startswith("error: ") and "checkpoint is corrupted" in error
        assert "1 node with errors" in page.inner_text("body")
        browser.close()


def failing_fleet(directory, kinds, **host_vars):
    """A local fleet of ``kinds`` (scripts/fleet.py), each host's variables updated from ``host_vars`` (by name)."""
    fleet.build(directory, len(kinds), sys.executable, kinds)
    path = os.path.join(directory, "inventory.yml")
    with open(path, encoding="utf-8") as handle:
        inventory = json.load(handle)
    for name, values in host_vars.items():
        inventory["all"]["hosts"][name].update(values)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(inventory, handle)
    return path


def table(proc):
    """The plan's summary table, one line per node by name, and its last line."""
    shown = json.loads(re.search(r"Print the summary table\] \*+\nok: \[localhost\] => (\{.*?\n\})",
                                 proc.stdout, re.S).group(1))["msg"]
    return {line.split()[0]: line for line in shown[1:-1]}, shown[-1]


def test_plan_fails_and_shows_every_refused_and_unreachable_node_with_its_error(tmp_path):
    """Issue 64: a misspelt option, a reserved CPU the node lacks, a kubelet reservation beyond its CPUs and a node
    that cannot be reached are each refused on their own line, with the error underneath ("One or more items failed"
    told nothing); the nodes that can be planned are planned; the table and the file hold every node; and only then
    the run fails, so that a CI gate on the plan stops."""
    inventory = failing_fleet(str(tmp_path / "fleet"), ("kubelet-static", "agent", "agent-misspelt-option",
                                                        "agent-missing-cpu", "unreachable", "kubelet-static"),
                              **{"node005-kubelet-static": {"kubelet_cpu_manager_reserved_cpus": "0,99"}})
    proc = run_playbook("plan.yml", inventory, {"kubecpu_plan_file": str(tmp_path / "plan.json")}, rc=2)
    plans = {p["node"]: p for p in json.load(open(tmp_path / "plan.json"))}
    assert sorted(plans) == ["node000-kubelet-static", "node001-agent", "node002-agent-misspelt-option",
                             "node003-agent-missing-cpu", "node004-unreachable", "node005-kubelet-static"]
    errors = {name: plan["error"] for name, plan in plans.items()}
    assert errors["node000-kubelet-static"] is None and errors["node001-agent"] is None
    assert errors["node002-agent-misspelt-option"] == ('the agent\'s settings do not fit this node: unknown CPU Manager '
                                                       'Policy option: "%s"' % fleet.MISSPELT_OPTION)
    assert "reserved CPUs lists CPU(s) 7 that are not in the topology (online CPUs: 0-3)" in errors[
        "node003-agent-missing-cpu"]
    assert "reserved-cpus: 0,99 is not a subset of online-cpus: 0-15" in errors["node005-kubelet-static"]
    lost = plans["node004-unreachable"]
    assert lost["unreachable"] and "Failed to connect to the host via ssh" in lost["error"], lost
    assert [name for name, plan in plans.items() if plan["unreachable"]] == ["node004-unreachable"]
    assert plans["node001-agent"]["changes"] == ["install agent", "agent configuration", "restart agent"]

    lines, summary = table(proc)
    assert sorted(lines) == sorted(plans)
    for name, error in errors.items():
        if error is not None:
            said = "UNREACHABLE: " if name == "node004-unreachable" else "REFUSED: "
            assert lines[name].endswith(said + error), lines[name]
    assert re.search(r"^node000-kubelet-static\s+kubelet\s+0,8\s+kept\s+restart\s+0\s+nothing$",
                     lines["node000-kubelet-static"])
    assert summary.startswith("6 nodes: 1 would change, 0 state files rejected") and "4 refused (1 unreachable)" in summary
    assert "One or more items failed" not in proc.stdout
    assert "4 of 6 nodes refused: node002-agent-misspelt-option, node003-agent-missing-cpu, node004-unreachable, " \
           "node005-kubelet-static" in proc.stdout


def test_plan_refuses_a_node_that_cannot_run_the_agent(tmp_path):
    """Issue 64: PID 1 is not systemd and the agent's Python is too old - refused with both problems, not "would
    change"; a kubelet node whose PID 1 is not systemd is refused too."""
    directory = str(tmp_path / "fleet")
    old = tmp_path / "python3.8"
    old.write_text("#!/bin/sh\necho 'Python 3.8.10'\n")
    old.chmod(0o755)
    inventory = failing_fleet(directory, ("agent", "kubelet-static"),
                              **{"node000-agent": {"cpu_manager_agent_python": str(old)}})
    for name, init in (("node000-agent", "bash"), ("node001-kubelet-static", "tini")):
        (tmp_path / "fleet" / "nodes" / name / "root" / "proc" / "1" / "comm").write_text(init + "\n")
    proc = run_playbook("plan.yml", inventory, {"kubecpu_plan_file": str(tmp_path / "plan.json")}, rc=2)
    plans = {p["node"]: p for p in json.load(open(tmp_path / "plan.json"))}
    agent = plans["node000-agent"]["error"]
    assert "PID 1 is bash, not systemd: kubecpu-agent.service needs systemd" in agent
    assert "the agent's Python (%s) is Python 3.8.10: kubecpu needs Python 3.9 or newer" % old in agent
    assert plans["node000-agent"]["changes"] == []  # refused, not "install agent"
    assert "PID 1 is tini, not systemd" in plans["node001-kubelet-static"]["error"]
    lines, summary = table(proc)
    assert "REFUSED: " in lines["node000-agent"] and summary.startswith("2 nodes: 0 would change")


def _state_files(directory):
    return {path: open(path, "rb").read() for path in sorted(
        os.path.join(d, f) for d, _dirs, files in os.walk(directory) for f in files if f.startswith("cpu_manager_state"))}


def test_rollout_changes_nothing_anywhere_when_its_preflight_refuses_a_node(tmp_path):
    """Every node is checked before the first batch: one refused node (a reserved CPU it lacks) stops the rollout
    there, and no batch starts (check mode: this machine is the fleet's every node)."""
    directory = str(tmp_path / "fleet")
    inventory = failing_fleet(directory, ("kubelet-static", "kubelet-static", "agent-missing-cpu"))
    before = _state_files(directory)
    proc = run_playbook("rollout.yml", inventory, {}, "--check", rc=2)
    assert "CPU(s) 7 that are not in the topology" in proc.stdout
    assert "PLAY [Roll out CPU management, batch by batch]" not in proc.stdout
    assert _state_files(directory) == before


def test_rollout_stops_later_batches_after_a_node_becomes_unreachable(tmp_path):
    """Issue 64: max_fail_percentage counts failed nodes, not lost ones - the rollout went on after a node became
    unreachable. Here the removal of the agent (no preflight: nothing must run there) in batches [1, 2, 1]: the
    canary is done, the second batch loses its first node and finishes its other, the last batch does not start."""
    directory = str(tmp_path / "fleet")
    inventory = failing_fleet(directory, ("agent", "unreachable", "agent", "agent"))
    nodes = os.path.join(directory, "nodes")
    proc = run_playbook("rollout.yml", inventory, {"cpu_manager_agent_state": "absent", "kubecpu_serial": [1, 2]},
                        rc=2)
    assert "stopped before this batch: node001-unreachable failed or became unreachable" in proc.stdout
    for name, removed in (("node000-agent", True), ("node002-agent", True), ("node003-agent", False)):
        assert os.path.exists(os.path.join(nodes, name, "kubecpu", "cpu_manager_state")) is not removed, name
    assert re.search(r"^node003-agent\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", proc.stdout, re.M)


def test_removal_gives_back_interrupts_and_irqbalance_environment(tmp_path):
    """Issue 64: removing the agent gives back what it changed on the node. The agent moved three interrupts, the
    default affinity and irqbalance's environment file off the CPUs it pinned (prod/web main on 1-2); the removal
    gives each back what it had (the file byte for byte), keeps a backup of the state and nothing else of the agent;
    a second removal, from nothing, changes nothing."""
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq

    directory = str(tmp_path / "fleet")
    inventory = failing_fleet(directory, ("agent",),
                              **{"node000-agent": {"cpu_manager_agent_python": sys.executable}})
    base = os.path.join(directory, "nodes", "node000-agent")
    root, state = os.path.join(base, "root"), os.path.join(base, "kubecpu", "cpu_manager_state")
    irq = proc_irq(os.path.join(root, "proc", "irq"), {24: "0-3", 25: "1", 26: "2-3"}, default="f")
    environment = os.path.join(root, "etc", "default", "irqbalance")
    os.makedirs(os.path.dirname(environment))
    original = b"#Configuration for the irqbalance daemon\r\nIRQBALANCE_ONESHOT=0"  # its line ends, no final newline
    with open(environment, "wb") as handle:
        handle.write(original)
    runtime = os.path.join(base, "runtime")
    subprocess.run([os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--state", state, "--num-reserved", "1",
                    "--sysfs-root", root, "--crictl", os.path.join(runtime, "crictl"), "--cgroup-root",
                    os.path.join(runtime, "cgroup"), "--kubelet-state", os.path.join(base, "absent"),
                    "--irq-isolation", "exclusive"], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
    assert [affinity(irq, n) for n in (24, 25, 26)] == ["0,3", "0,3", "3"]  # what the agent did
    assert b"IRQBALANCE_BANNED_CPULIST=1-2" in open(environment, "rb").read()
    install = os.path.join(base, "opt")  # the agent as the role installs it
    shutil.copytree(os.path.join(ROOT, "bin"), os.path.join(install, "bin"))
    shutil.copytree(os.path.join(ROOT, "plugins", "module_utils"), os.path.join(install, "plugins", "module_utils"))

    proc = run_playbook("rollout.yml", inventory, {"cpu_manager_agent_state": "absent"})
    assert re.search(r"Give the interrupts and irqbalance back what they had.*?\nchanged: \[node000-agent\]",
                     proc.stdout, re.S)
    assert [affinity(irq, n) for n in (24, 25, 26)] == ["0-3", "1", "2-3"]
    assert open(os.path.join(irq, "default_smp_affinity")).read().strip() == "f"
    assert open(environment, "rb").read() == original
    left = sorted(os.listdir(os.path.join(base, "kubecpu")))
    assert len(left) == 1 and re.match(r"cpu_manager_state\.\d{8}T\d{6}Z\.bak$", left[0]), left
    assert not os.path.exists(install)

    again = run_playbook("rollout.yml", inventory, {"cpu_manager_agent_state": "absent"})
    assert re.search(r"^node000-agent\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", again.stdout, re.M)
    assert sorted(os.listdir(os.path.join(base, "kubecpu"))) == left


@pytest.mark.parametrize("state_before", [True, False])
def test_a_failed_first_installation_of_the_agent_leaves_nothing_of_its_own(tmp_path, state_before):
    """Issue 64: a rollout that failed halfway on a node left the installation, the configuration and the state
    directory behind. Here the agent is installed failing closed where containerd has no configuration: the hook's
    step fails after the installation, the configuration and the directories were made (no systemd needed before
    it). The node had no agent: the installation, the configuration and the directories it made are gone, a state
    file that was there before stays byte for byte (one that was not is not made), and the error says so."""
    directory = str(tmp_path / "fleet")
    inventory = failing_fleet(directory, ("agent",), **{"node000-agent": {
        "cpu_manager_agent_python": sys.executable, "cpu_manager_fail_closed": True}})
    base = os.path.join(directory, "nodes", "node000-agent")
    if not state_before:
        shutil.rmtree(os.path.join(base, "kubecpu"))
    before = _state_files(base)
    proc = run_playbook("rollout.yml", inventory, {}, rc=2)
    assert "Install the OCI hook into the runtime, or take it out failed: %s does not exist" % os.path.join(
        base, "containerd", "config.toml") in proc.stdout
    assert "-- taken back: this node had no agent before this run, and nothing of it is left" in proc.stdout
    assert "Write the agent's configuration" in proc.stdout  # it had got that far
    assert _state_files(base) == before
    for made in ("opt", "etc", os.path.join("kubecpu", "metrics")):
        assert not os.path.exists(os.path.join(base, made)), made
    assert os.path.exists(os.path.join(base, "kubecpu")) is state_before  # the state's directory only when it was


def test_report_lists_every_node_failed_and_unreachable_ones_with_their_error(tmp_path):
    """Issue 64: a node that could not be read or reached was left out of fleet.json and the page, whose header says
    it shows them. Here one node's machine is gone (its topology cannot be read) and one cannot be reached: both are
    in the file with their error, the run does not fail, and the summary counts them."""
    directory = str(tmp_path / "fleet")
    inventory = failing_fleet(directory, ("kubelet-static", "agent", "unreachable", "agent"))
    shutil.rmtree(os.path.join(directory, "nodes", "node003-agent", "root", "sys"))
    report = tmp_path / "report"
    proc = run_playbook("report.yml", inventory, {"kubecpu_report_dir": str(report)})
    assert "4 nodes, 2 with errors (1 unreachable)" in " ".join(proc.stdout.split())
    nodes = {n["node"]: n for n in json.load(open(report / "fleet.json"))["nodes"]}
    assert sorted(nodes) == ["node000-kubelet-static", "node001-agent", "node002-unreachable", "node003-agent"]
    assert nodes["node000-kubelet-static"]["error"] is None and nodes["node001-agent"]["error"] is None
    lost = nodes["node002-unreachable"]
    assert lost["unreachable"] and "Failed to connect to the host via ssh" in lost["error"] and lost["cpus"] == []
    broken = nodes["node003-agent"]
    assert not broken["unreachable"] and broken["error"] and broken["cpus"] == [], broken
    html = (report / "index.html").read_text()
    assert "node002-unreachable" in html and "node003-agent" in html
    if CHROMIUM is None and not os.environ.get("CI"):
        return  # the page's own text is checked where a browser is (CI always)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((report / "index.html").as_uri())
        said = page.inner_text('.node[data-node="node002-unreachable"] .error')
        assert said.startswith("unreachable: ") and "Failed to connect" in said
        assert page.inner_text('.node[data-node="node003-agent"] .error').startswith("error: ")
        assert "2 nodes with errors (1 unreachable)" in page.inner_text("#stats")
        meta = page.inner_text('.node[data-node="node001-agent"] .meta')
        assert "4 CPUs, 4 cores, 1 socket, 1 NUMA node" in meta  # no "1 sockets"
        assert "reserved CPUs: 0" in meta and "shared pool CPUs: 0,3" in meta  # CPU lists, not counts
        captions = page.eval_on_selector_all('.node[data-node="node001-agent"] .side caption',
                                             "els => els.map(e => e.innerText)")
        assert "Free whole cores per NUMA node" in captions and "Exclusive CPUs by owner" in captions
        browser.close()


NRI_CHECK = """---
- name: The agent role's NRI check
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check
      ansible.builtin.include_role:
        name: kubecpu.cpu_manager.cpu_manager_agent
        tasks_from: nri_check.yml
"""


@pytest.mark.parametrize("socket_kind, python, error", [
    ("socket", sys.executable, None),
    ("none", sys.executable, "the container runtime has NRI disabled on this node"),
    ("file", sys.executable, "is not a socket"),
])
def test_the_agent_role_checks_the_runtimes_nri_before_it_runs_the_plugin(tmp_path, socket_kind, python, error):
    import socket as sockets

    path = tmp_path / "nri.sock"
    listener = None
    if socket_kind == "socket":
        listener = sockets.socket(sockets.AF_UNIX)
        listener.bind(str(path))
    elif socket_kind == "file":
        path.write_text("")
    playbook = tmp_path / "check.yml"
    playbook.write_text(NRI_CHECK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            str(playbook), "-e", json.dumps({"cpu_manager_agent_nri_socket": str(path),
                                             "cpu_manager_agent_python": python,
                                             "ansible_python_interpreter": sys.executable})]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if listener is not None:
        listener.close()
    if error is None:
        assert proc.returncode == 0, proc.stdout[-3000:]
    else:
        assert proc.returncode != 0 and error in " ".join(proc.stdout.split()), proc.stdout[-3000:]


HOUSEKEEPING_CHECK = """---
- name: The kubelet role's housekeeping in check mode
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Only its drop-ins
      ansible.builtin.include_role:
        name: kubecpu.cpu_manager.kubelet_cpu_manager
        tasks_from: housekeeping.yml
"""


@pytest.mark.parametrize("controllers, key", [("cpuset cpu io memory pids", "AllowedCPUs"), ("cpu memory", "CPUAffinity")])
def test_the_kubelet_roles_check_mode_shows_the_drop_ins_it_would_write(tmp_path, controllers, key):
    """With cgroup v2's cpuset: AllowedCPUs= for the slices, the scope and the services; without: CPUAffinity= for the
    services only. Check mode writes nothing (the guest's role test applies them for real)."""
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "cgroup" / "cgroup.controllers").write_text(controllers + "\n")
    playbook = tmp_path / "check.yml"
    playbook.write_text(HOUSEKEEPING_CHECK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    extra = {"kubelet_cpu_manager_plan": {"reserved_cpus": "0-1"}, "kubelet_cpu_manager_housekeeping": True,
             "kubelet_cpu_manager_cgroup_root": str(tmp_path / "cgroup"), "ansible_python_interpreter": sys.executable}
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "--check", "--diff", str(playbook), "-e", json.dumps(extra)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    shown = json.loads(re.search(r"Show the drop-ins it would write.*?=> (\{.*?\n\})", proc.stdout, re.S).group(1))["msg"]
    units = {path.split("/")[4][:-2]: text for path, text in shown.items()}
    want = ["containerd.service", "init.scope", "kubelet.service", "system.slice", "user.slice"]
    assert sorted(units) == (want if key == "AllowedCPUs" else ["containerd.service", "kubelet.service"])
    assert all(text.endswith("\n%s=0-1\n" % key) for text in units.values())
    assert "+AllowedCPUs=0-1" in proc.stdout or key == "CPUAffinity"  # the diff shows each file's content
    assert not os.path.exists("/etc/systemd/system/system.slice.d/50-kubecpu-housekeeping.conf")
