"""The fleet playbooks over local nodes: rollout, plan and report, by fleet size and forks.

Every node is its own directory (scripts/fleet.py: a fake sysfs tree, a kubelet configuration and checkpoint, or an
agent's state and a stand-in crictl) reached with ``ansible_connection: local``. plan.yml and report.yml run over
the mixed fleet (all four node kinds) and change nothing. rollout.yml runs the kubelet role over a fresh fleet of
kubelet nodes (policy none, already static, and a reservation that moves): a stand-in ``systemctl`` (every unit
loaded and active, NRestarts 0) and one local HTTP health endpoint stand in for the kubelets, so the migrations,
restarts and health gates really run; the agent role is left out of the rollout because it installs a systemd unit
on the host itself (the Molecule podman scenario covers it on real systemd nodes). The rollout keeps its canary
batching (serial: 1, then 20%; with --quick 1, then the rest). Wall time of each ansible-playbook run, on this machine.

    python benchmarks/fleet.py [--nodes 200] [--forks 10,50] [--one-size] [--only PLAYBOOK] [--quick]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fleet  # noqa: E402

SYSTEMCTL = """#!/bin/sh
# stand-in systemctl for local fleet nodes: every unit is loaded and active; start, stop, restart succeed
for arg in "$@"; do
  case "$arg" in --property=NRestarts) echo 0; exit 0 ;; esac
done
case "$1" in
  show) unit="${2:-kubelet}"
        printf 'Id=%s.service\\nNames=%s.service\\n' "$unit" "$unit"
        printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\n'
        printf 'UnitFileState=enabled\\nNRestarts=0\\nDescription=stand-in %s\\n' "$unit" ;;
  is-active) echo active ;;
  is-enabled) echo enabled ;;
esac
exit 0
"""


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args: object) -> None:
        pass


def _environment(work: str) -> Dict[str, str]:
    bin_dir = os.path.join(work, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    with open(os.path.join(bin_dir, "systemctl"), "w", encoding="utf-8") as handle:
        handle.write(SYSTEMCTL)
    os.chmod(os.path.join(bin_dir, "systemctl"), 0o755)
    collections = os.environ.get("KUBECPU_COLLECTIONS_PATH") or os.path.join(ROOT, ".cache", "collections")
    return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], ANSIBLE_COLLECTIONS_PATH=collections,
                ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_STDOUT_CALLBACK="default")


def _play(env: Dict[str, str], playbook: str, inventory: str, forks: int, extra: Dict[str, object], *,
          log: str) -> float:
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, "-f", str(forks),
            os.path.join(ROOT, "playbooks", playbook), "-e", json.dumps(extra)]
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        with open(log, encoding="utf-8") as out:
            sys.exit("%s failed (exit %d), its output:\n%s" % (playbook, proc.returncode, out.read()[-6000:]))
    return seconds


def _outcome(directory: str) -> str:
    """What the rollout left on the nodes: the policy in each kubelet config, checkpoints backed up and removed."""
    static = backups = 0
    nodes = sorted(os.listdir(os.path.join(directory, "nodes")))
    for name in nodes:
        kubelet = os.path.join(directory, "nodes", name, "kubelet")
        with open(os.path.join(kubelet, "config.yaml"), encoding="utf-8") as handle:
            static += "\ncpuManagerPolicy: static\n" in handle.read()
        backups += any(".bak" in entry or "backup" in entry for entry in os.listdir(kubelet))
    if static != len(nodes):
        sys.exit("rollout left %d of %d kubelet configs without the static policy" % (len(nodes) - static, len(nodes)))
    return "%d of %d configs static, %d checkpoints backed up and removed" % (static, len(nodes), backups)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="the largest fleet (also run at a quarter of it)")
    parser.add_argument("--only", choices=("plan.yml", "report.yml", "rollout.yml"), help="run this playbook only")
    parser.add_argument("--forks", default="10,50", help="comma-separated fork counts")
    parser.add_argument("--quick", action="store_true",
                        help="4 nodes (one of each kind), forks 4, the rollout's canary then the other three (a smoke "
                             "run for the test suite)")
    parser.add_argument("--one-size", action="store_true", help="only the largest fleet")
    args = parser.parse_args()
    sizes = [4] if args.quick else [args.nodes] if args.one_size else sorted({max(4, args.nodes // 4), args.nodes})
    forks = [4] if args.quick else [int(f) for f in args.forks.split(",")]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    health = "http://127.0.0.1:%d/healthz" % server.server_address[1]
    rows: List[Tuple[str, int, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="kubecpu-fleet-") as work:
        env = _environment(work)
        for nodes in sizes:
            mixed = os.path.join(work, "mixed-%d" % nodes)
            fleet.build(mixed, nodes, sys.executable)
            for count in forks:
                for playbook, extra in (("plan.yml", {"kubecpu_plan_file": os.path.join(mixed, "plan.json")}),
                                        ("report.yml", {"kubecpu_report_dir": os.path.join(mixed, "report")})):
                    if args.only not in (None, playbook):
                        continue
                    log = os.path.join(work, "%s-%d-%d.log" % (playbook, nodes, count))
                    rows.append((playbook, nodes, count, _play(env, playbook, os.path.join(mixed, "inventory.yml"),
                                                               count, extra, log=log)))
                    print("%-11s %4d nodes  forks %3d  %7.1f s" % rows[-1], flush=True)
                if args.only not in (None, "rollout.yml"):
                    continue
                kubelets = os.path.join(work, "kubelet-%d-%d" % (nodes, count))
                fleet.build(kubelets, nodes, sys.executable, kinds=("kubelet-none", "kubelet-static", "kubelet-moved"))
                extra = {"kubelet_cpu_manager_health_url": health, "kubelet_cpu_manager_health_settle": 0}
                if args.quick:
                    extra["kubecpu_serial"] = [1, "100%"]
                log = os.path.join(work, "rollout-%d-%d.log" % (nodes, count))
                rows.append(("rollout.yml", nodes, count, _play(env, "rollout.yml", os.path.join(
                    kubelets, "inventory.yml"), count, extra, log=log)))
                print("%-11s %4d nodes  forks %3d  %7.1f s  (%s)" % (rows[-1] + (_outcome(kubelets),)), flush=True)
    server.shutdown()
    header = ("playbook", "nodes", "forks", "wall s", "s per node", "vs fewer forks", "vs fewer nodes")
    print("\n%-11s %6s %6s %9s %12s %14s %16s" % header)
    times = {(name, nodes, count): seconds for name, nodes, count, seconds in rows}
    for name, nodes, count, seconds in rows:
        by_forks = times.get((name, nodes, forks[0]))
        by_nodes = times.get((name, sizes[0], count))
        print("%-11s %6d %6d %9.1f %12.2f %14s %16s" % (
            name, nodes, count, seconds, seconds / nodes,
            "%.2fx" % (seconds / by_forks) if count != forks[0] and by_forks else "-",
            "%.2fx for %.0fx" % (seconds / by_nodes, nodes / sizes[0]) if nodes != sizes[0] and by_nodes else "-"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
