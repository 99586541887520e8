"""A stand-in ``crictl`` made from the recorded crictl 1.32 output (shared/crictl-samples).

``make_node(directory)`` writes an executable ``crictl`` that answers ``ps -a -o json``, ``inspect ID``,
``update ... ID...`` (many IDs, as crictl 1.37) and ``version`` with the recorded shapes, and a fake cgroupfs in which an update lands as
runc would put it (``cpuset.cpus``, ``cpuset.mems``, ``cpu.cfs_quota_us``). Every call is appended to
``calls.log``. Unknown IDs get the recorded NotFound error. The one container without a recorded
inspection (prod/db-migrate app) gets one derived from its sibling's, with its own ID, name and request.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Dict

from .kubelet_cases import SHARED

SAMPLES = os.path.join(SHARED, "crictl-samples")

SCRIPT = r'''#!%(python)s
import json, os, sys
HERE = %(here)r
argv = sys.argv[1:]
with open(os.path.join(HERE, "calls.log"), "a") as log:
    log.write(json.dumps(argv) + "\n")
while argv and argv[0].startswith("--"):  # global flags come first
    argv = argv[1:]
def fail(name):
    with open(os.path.join(HERE, name)) as handle:
        sys.stderr.write(handle.read())
    sys.exit(1)
def out(path):
    with open(os.path.join(HERE, path)) as handle:
        sys.stdout.write(handle.read())
if argv[:1] == ["version"]:
    out("version.txt")
elif argv[:4] == ["ps", "-a", "-o", "json"]:
    out("ps.json")
elif argv[:1] == ["inspect"]:
    path = os.path.join("inspect", argv[-1] + ".json")
    if not os.path.exists(os.path.join(HERE, path)):
        fail("notfound.txt")
    out(path)
elif argv[:1] == ["update"]:  # as crictl 1.37: many IDs, each in turn, the first it cannot update named
    flags = [arg for arg in argv[1:] if arg.startswith("--")]
    ids = [arg for arg in argv[1:] if not arg.startswith("--")]
    for cid in ids:
        path = os.path.join(HERE, "inspect", cid + ".json")
        if not os.path.exists(path):
            if len(ids) == 1:
                fail("notfound.txt")
            sys.stderr.write('time="x" level=fatal msg="updating container resources for \\"%%s\\": rpc error: '
                             'code = NotFound desc = an error occurred when try to find container \\"%%s\\": not '
                             'found"\n' %% (cid, cid))
            sys.exit(1)
        with open(path) as handle:
            cgroup = json.load(handle)["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
        files = {"--cpuset-cpus": ("cpuset", "cpuset.cpus"), "--cpuset-mems": ("cpuset", "cpuset.mems"),
                 "--cpu-quota": ("cpu", "cpu.cfs_quota_us")}
        for flag in flags:
            name, _, value = flag.partition("=")
            if name in files and value not in ("", "0"):
                controller, leaf = files[name]
                with open(os.path.join(HERE, "cgroup", controller, cgroup, leaf), "w") as handle:
                    handle.write(value + "\n")
        print(cid)
else:
    sys.stderr.write('time="x" level=fatal msg="unknown command %%s"\n' %% argv)
    sys.exit(1)
'''


def _read(name: str) -> str:
    with open(os.path.join(SAMPLES, name), encoding="utf-8") as handle:
        return handle.read()


def _inspections() -> Dict[str, dict]:
    with open(os.path.join(SAMPLES, "captures.json"), encoding="utf-8") as handle:
        captures = json.load(handle)["captures"]
    found = {}
    for capture in captures:
        if capture["command"][1] == "inspect" and capture["exit_code"] == 0 and "after-update" not in capture["name"]:
            found[capture["command"][-1]] = json.loads(_read(capture["stdout"]))
    listed = json.loads(_read("ps-all.stdout.json"))["containers"]
    for item in listed:
        if item["id"] in found:
            continue
        sibling = next(doc for cid, doc in found.items() if doc["status"]["labels"]["io.kubernetes.pod.uid"]
                       == item["labels"]["io.kubernetes.pod.uid"])
        doc = json.loads(json.dumps(sibling))
        old = doc["status"]["id"]
        doc["status"].update(id=item["id"], state=item["state"], exitCode=0, reason="",
                             finishedAt="0001-01-01T00:00:00Z", labels=item["labels"], metadata=item["metadata"])
        doc["info"]["config"]["linux"]["resources"]["cpu_shares"] = 102  # its recorded 100m request
        spec = doc["info"]["runtimeSpec"]["linux"]
        spec["cgroupsPath"] = spec["cgroupsPath"].replace(old, item["id"])
        found[item["id"]] = doc
    return found


def make_node(directory: str, cpus: str = "0-3") -> Dict[str, str]:
    """The stand-in crictl, a fake cgroupfs holding every recorded container at ``cpus``, and a topology of
    ``cpus`` single-thread cores on one socket. Returns the paths and the container IDs by pod/container."""
    os.makedirs(os.path.join(directory, "inspect"), exist_ok=True)
    with open(os.path.join(directory, "ps.json"), "w", encoding="utf-8") as handle:
        handle.write(_read("ps-all.stdout.json"))
    with open(os.path.join(directory, "version.txt"), "w", encoding="utf-8") as handle:
        handle.write(_read("version.stdout.txt"))
    with open(os.path.join(directory, "notfound.txt"), "w", encoding="utf-8") as handle:
        handle.write(_read("error-inspect-nonexistent-id.stderr.txt"))
    ids = {}
    for cid, doc in _inspections().items():
        with open(os.path.join(directory, "inspect", cid + ".json"), "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
        labels = doc["status"]["labels"]
        key = "%s/%s/%s" % (labels["io.kubernetes.pod.namespace"], labels["io.kubernetes.pod.name"],
                            labels["io.kubernetes.container.name"])
        if doc["status"]["metadata"]["attempt"]:
            key += "#%d" % doc["status"]["metadata"]["attempt"]
        ids[key] = cid
        path = doc["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
        for controller, leaf, value in (("cpuset", "cpuset.cpus", cpus), ("cpuset", "cpuset.mems", "0"),
                                        ("cpu", "cpu.cfs_quota_us", "-1"), ("cpu", "cpu.cfs_period_us", "100000"),
                                        ("cpu", "cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time 5000")):
            for level in (path, os.path.dirname(path)):
                folder = os.path.join(directory, "cgroup", controller, level)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, leaf), "w", encoding="utf-8") as handle:
                    handle.write(value + "\n")
    script = os.path.join(directory, "crictl")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(SCRIPT % {"python": sys.executable, "here": directory})
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
    topology = {"format": "kubecpu.topology/v1", "source": "file",
                "cpus": [{"cpu": c, "core": c, "socket": 0, "numa": 0, "uncore": 0} for c in CPUSet.parse(cpus)]}
    with open(os.path.join(directory, "topology.json"), "w", encoding="utf-8") as handle:
        json.dump(topology, handle)
    ids.update(crictl=script, cgroup=os.path.join(directory, "cgroup"), topology=os.path.join(directory,
               "topology.json"), log=os.path.join(directory, "calls.log"))
    return ids


def add_guaranteed(directory: str, count: int, cpus: str) -> Dict[str, str]:
    """``count`` more running Guaranteed 1-CPU pods (copies of the recorded prod/web main, each with its own pod
    UID, name, container ID and cgroup at ``cpus``), listed by the stand-in crictl. Returns pod UID -> container ID."""
    with open(os.path.join(directory, "ps.json"), encoding="utf-8") as handle:
        listed = json.load(handle)
    template = next(item for item in listed["containers"] if item["labels"]["io.kubernetes.pod.name"] == "web"
                    and item["metadata"]["name"] == "main")
    with open(os.path.join(directory, "inspect", template["id"] + ".json"), encoding="utf-8") as handle:
        inspected = handle.read()
    old_uid, added = template["labels"]["io.kubernetes.pod.uid"], {}
    for n in range(count):
        uid, cid = "00000000-0000-4000-8000-%012d" % n, "%064x" % (0xC0FFEE000 + n)
        item = json.loads(json.dumps(template).replace(template["id"], cid).replace(old_uid, uid))
        item["labels"]["io.kubernetes.pod.name"] = "load-%d" % n
        listed["containers"].append(item)
        doc = json.loads(inspected.replace(template["id"], cid).replace(old_uid, uid))
        doc["status"]["labels"] = item["labels"]
        doc["info"]["config"]["linux"]["resources"].update(cpu_quota=100000, cpu_shares=1024)
        doc["status"]["resources"]["linux"].update(cpuQuota="100000", cpuShares="1024")
        with open(os.path.join(directory, "inspect", cid + ".json"), "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
        path = doc["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
        for controller, leaf, value in (("cpuset", "cpuset.cpus", cpus), ("cpuset", "cpuset.mems", "0"),
                                        ("cpu", "cpu.cfs_quota_us", "100000"), ("cpu", "cpu.cfs_period_us", "100000")):
            for level in (path, os.path.dirname(path)):
                os.makedirs(os.path.join(directory, "cgroup", controller, level), exist_ok=True)
                with open(os.path.join(directory, "cgroup", controller, level, leaf), "w", encoding="utf-8") as handle:
                    handle.write(value + "\n")
        added[uid] = cid
    with open(os.path.join(directory, "ps.json"), "w", encoding="utf-8") as handle:
        json.dump(listed, handle)
    return added


def calls(log: str):
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _cpuset_file(node: Dict[str, str], cid: str) -> str:
    with open(os.path.join(node["cgroup"], "..", "inspect", cid + ".json"), encoding="utf-8") as handle:
        path = json.load(handle)["info"]["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
    return os.path.join(node["cgroup"], "cpuset", path, "cpuset.cpus")


def cgroup_cpus(node: Dict[str, str], cid: str) -> str:
    with open(_cpuset_file(node, cid), encoding="utf-8") as handle:
        return handle.read().strip()


def set_cgroup_cpus(node: Dict[str, str], cid: str, cpus: str) -> None:
    """A container's cpuset as if something had set it (a pinned container whose checkpoint was lost)."""
    with open(_cpuset_file(node, cid), "w", encoding="utf-8") as handle:
        handle.write(cpus + "\n")
