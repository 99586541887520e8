"""The kubelet node after the podman scenario: migrated from policy none to static with a drain, then (side effect)
changed six times without a drain on a 4-CPU machine and drained once more on its own 2 CPUs; every checkpoint
replaced kept beside it, the kubelet healthy and not restarting, only the CPU manager keys changed in its
configuration; the housekeeping drop-ins converge wrote taken out again."""

import json
import time

import yaml

testinfra_hosts = ["ansible://kubecpu-kubelet-node"]
KUBEADM_KEYS = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
    "authentication": {"anonymous": {"enabled": False}}, "cgroupDriver": "systemd", "clusterDNS": ["10.96.0.10"],
    "clusterDomain": "cluster.local", "evictionHard": {"memory.available": "100Mi"}, "rotateCertificates": True,
    "staticPodPath": "/etc/kubernetes/manifests",
}


def test_kubelet_config_keys(host):
    config = yaml.safe_load(host.file("/var/lib/kubelet/config.yaml").content_string)
    assert config["cpuManagerPolicy"] == "static"
    assert config["reservedSystemCPUs"] == "0"
    assert config["cpuManagerReconcilePeriod"] == "5s"
    for key, value in KUBEADM_KEYS.items():
        assert config[key] == value, key  # every other key kept with its value
    assert set(config) - set(KUBEADM_KEYS) == {"cpuManagerPolicy", "reservedSystemCPUs", "cpuManagerReconcilePeriod"}


def test_every_replaced_checkpoint_is_kept(host):
    backups = host.check_output("ls /var/lib/kubelet | grep -c '^cpu_manager_state\\..*\\.bak$'")
    # converge's drain, six rewrites, the three rolled-back rewrites', the rolled-back drain's, the last drain; the
    # period changes kept the checkpoint
    assert backups == "12"
    first = host.check_output("ls /var/lib/kubelet/cpu_manager_state.*.bak | head -1")
    assert json.loads(host.file(first).content_string)["policyName"] == "none"
    assert host.file(first).mode == 0o600
    written = host.check_output("ls /var/lib/kubelet | grep -c '^cpu_manager_state\\.write-'")
    # cpu_manager_checkpoint keeps the file each rewrite replaced too: the rolled-back ones whose checkpoint was
    # written (two; a rollback's write of the same bytes, which moves the web container back, replaces nothing)
    assert written == "8"
    state = json.loads(host.file("/var/lib/kubelet/cpu_manager_state").content_string)
    assert state["policyName"] == "static" and state["defaultCpuSet"] == "0-1"


def test_kubelet_healthy_and_not_restarting(host):
    assert host.service("kubelet").is_running
    before = host.check_output("systemctl show --property=NRestarts --value kubelet")
    time.sleep(3)
    health = host.check_output("python3 -c \"import urllib.request; "
                               "print(urllib.request.urlopen('http://127.0.0.1:10248/healthz').read().decode())\"")
    assert health == "ok"
    assert host.check_output("systemctl show --property=NRestarts --value kubelet") == before


def test_housekeeping_left_nothing_behind(host):
    """Converge confined the kubelet's service to the reserved CPU (CPUAffinity=), the side effect turned it off: no
    drop-in left, and the kubelet, restarted since, may use every CPU."""
    assert host.check_output("find /etc/systemd/system -name 50-kubecpu-housekeeping.conf") == ""
    pid = host.check_output("systemctl show --property=MainPID --value kubelet")
    allowed = host.check_output("grep -h Cpus_allowed_list /proc/%s/status" % pid).split(":")[1].strip()
    assert allowed == host.file("/sys/devices/system/cpu/online").content_string.strip()
