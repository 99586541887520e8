"""The agent node after the podman scenario: the agent installed, hardened, enabled, running, writing metrics and
pinning the stand-in runtime's Guaranteed container."""

import json

testinfra_hosts = ["ansible://kubecpu-agent-node"]


def test_agent_enabled_active_and_hardened(host):
    service = host.service("kubecpu-agent")
    assert service.is_enabled and service.is_running
    unit = host.file("/etc/systemd/system/kubecpu-agent.service").content_string
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                 "RestrictAddressFamilies=AF_UNIX", "CapabilityBoundingSet=", "ReadWritePaths=/var/lib/kubecpu"):
        assert line in unit
    host.run_expect([0], "systemd-analyze verify /etc/systemd/system/kubecpu-agent.service")
    exposure = host.check_output("systemd-analyze security --no-pager kubecpu-agent.service | tail -1")
    assert "OK" in exposure or "MEDIUM" in exposure, exposure


def test_agent_metrics_file(host):
    metrics = host.file("/var/lib/kubecpu/metrics/kubecpu.prom")
    assert metrics.exists
    text = metrics.content_string
    for name in ("cpu_manager_pinning_requests_total", "cpu_manager_pinning_errors_total",
                 "cpu_manager_shared_pool_size_millicores", "cpu_manager_exclusive_cpu_allocation_count"):
        assert name in text


def test_agent_state_file_and_pinning(host):
    state_file = host.file("/var/lib/kubecpu/cpu_manager_state")
    assert state_file.mode == 0o600 and state_file.user == "root"
    assert host.file("/var/lib/kubecpu").mode == 0o700
    state = json.loads(state_file.content_string)
    assert state["policyName"] == "static"
    assert state["entries"] == {"a06b0ffe-e387-47dc-90e2-339fa3fc242a": {"main": "1-2"}}
    config = json.loads(host.file("/etc/kubecpu/agent.json").content_string)
    assert config["period"] == "1s" and config["num_reserved"] == 1
