"""A stand-in kubelet for the Molecule podman scenario: it behaves like the real one where the roles care.

Installed as /usr/local/lib/kubelet-standin.py behind a /usr/local/bin/kubelet wrapper (prepare.yml).

- ``kubelet --version`` prints ``Kubernetes v<KUBELET_STANDIN_VERSION>`` (default 1.33.2).
- Otherwise it reads ``--config`` (a KubeletConfiguration) and ``<root-dir>/cpu_manager_state`` and restores the
  checkpoint as the kubelet does (the kubecpu core, kubelet-exact on the kubelet's own cases, does the checking):
  a missing file becomes a fresh state; a policy name, CPU set or reservation the checkpoint does not match makes
  it log the kubelet's "could not restore state from checkpoint" error and exit 1, so systemd restarts it (the
  crash loop the role must never leave behind). While they agree it serves ``ok`` on 127.0.0.1:10248/healthz.
- ``/etc/kubelet-standin/fail`` (test switch): exit 1 after logging that file's text, like a broken kubelet.
- ``KUBELET_STANDIN_SYSFS`` (default ``/``): the sysfs tree it takes the machine's CPUs from (a 4-CPU fake tree for
  the changes without a drain, whose containers live in a stand-in crictl).
"""

import http.server
import os
import sys

import yaml

sys.path.insert(0, "/opt/kubelet-standin")
from kubecpu_core.kubelet.checkpoint import RestoreFailure, decode, encode
from kubecpu_core.kubelet.cpuset import CPUSet
from kubecpu_core.kubelet.discovery import discover
from kubecpu_core.errors import KubecpuError
from kubecpu_core.kubelet.policy import new_policy
from kubecpu_core.kubelet.state import CPUState

STATE = "/var/lib/kubelet/cpu_manager_state"


def fatal(message):
    sys.stderr.write('E1123 00:00:00.000000 1 kubelet.go:1566] "Failed to start ContainerManager" err="%s"\n' % message)
    sys.exit(1)


def main(argv):
    if "--version" in argv:
        print("Kubernetes v%s" % os.environ.get("KUBELET_STANDIN_VERSION", "1.33.2"))
        return 0
    config_path = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "/var/lib/kubelet/config.yaml")
    if os.path.exists("/etc/kubelet-standin/fail"):
        with open("/etc/kubelet-standin/fail") as handle:
            fatal(handle.read().strip())
    with open(config_path) as handle:
        config = yaml.safe_load(handle) or {}
    policy_name = config.get("cpuManagerPolicy") or "none"
    reserved = CPUSet.parse(str(config.get("reservedSystemCPUs") or ""))
    options = {k: str(v) for k, v in (config.get("cpuManagerPolicyOptions") or {}).items()}
    try:
        machine = discover(os.environ.get("KUBELET_STANDIN_SYSFS", "/"))
        policy = new_policy(policy_name, machine, len(reserved), reserved or None, options)
    except KubecpuError as exc:
        sys.stderr.write('"Failed to run kubelet" err="failed to run Kubelet: new static policy error: %s"\n' % exc)
        return 1
    if os.path.exists(STATE):
        with open(STATE, "rb") as handle:
            data = handle.read()
        try:
            state = decode(data, policy_name).state
            policy.start(state)
        except (RestoreFailure, KubecpuError) as exc:
            fatal('start cpu manager error: could not restore state from checkpoint: %s, please drain this node and '
                  'delete the CPU manager checkpoint file \\"%s\\" before restarting Kubelet' % (exc, STATE))
    else:
        state = CPUState(policy_name)
        policy.start(state)
        with open(STATE, "wb") as handle:
            handle.write(encode(state))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/healthz"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(b"ok" if ok else b"not found")

        def log_message(self, *args):
            pass

    sys.stderr.write("I1123 stand-in kubelet running: policy %s, reserved %s, state %s\n"
                     % (policy_name, reserved or "none", STATE))
    http.server.HTTPServer(("127.0.0.1", 10248), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
