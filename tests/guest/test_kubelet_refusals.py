"""What the real kubelet refuses to start on, the kubelet role refuses first, in the kubelet's words: kubelets 1.35.4,
1.36.3 and 1.37.2 (tests/guest/kubelets.py) on the real server, each configuration written straight into the
kubelet's file, and the same asked of the role's planning (``plan_change``)."""

from __future__ import annotations

import pytest
from kubelets import BASE, RELEASES, Kubelet, planned, said_in

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired

ZERO = CPUSet.parse("0")
REFUSED = (  # what the role is asked for; the same keys written straight into the kubelet's configuration
    ("the none policy with an option", Desired(policy="none", policy_options={"full-pcpus-only": "true"}),
     {"cpuManagerPolicy": "none", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"}}),
    ("the static policy with nothing reserved", Desired(policy="static"), {"cpuManagerPolicy": "static"}),
    ("reserved CPUs the node does not have", Desired(policy="static", reserved_cpus=CPUSet.parse("0,9")),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0,9"}),
    ("an option no kubelet knows", Desired(policy="static", reserved_cpus=ZERO, policy_options={"bogus": "true"}),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0", "cpuManagerPolicyOptions": {"bogus": "true"}}),
    ("a Topology Manager policy no kubelet knows", Desired(policy="static", reserved_cpus=ZERO,
                                                           topology_manager_policy="bogus"),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0", "topologyManagerPolicy": "bogus"}),
)
ROLE_ADVICE = " (set reserved_cpus or num_reserved)"  # what the role adds after the kubelet's words


def test_what_the_kubelet_refuses_the_role_refuses_first_in_its_words(kubelet_binary, lab21, tmp_path):
    """Each configuration the kubelet refuses at its start, planned by the role first: the role refuses it, and its
    reason (less the role's advice on what to set) is the kubelet's, word for word."""
    minor, binary = kubelet_binary
    for n, (what, desired, keys) in enumerate(REFUSED):
        with pytest.raises(ConfigError) as refused:
            planned(desired, minor, tmp_path, lab21)
        reason = str(refused.value)
        reason = reason[:-len(ROLE_ADVICE)] if reason.endswith(ROLE_ADVICE) else reason
        kubelet = Kubelet(binary, str(tmp_path / str(n)), dict(BASE, containerRuntimeEndpoint=lab21.endpoint, **keys))
        kubelet.start()
        try:
            log = kubelet.refused(minor)
        finally:
            kubelet.stop()
        assert said_in(reason, log), "%s: the role says %r; kubelet %s said:\n%s" % (what, reason, minor, log[-3000:])
        print("kubelet %s, %s: %s" % (RELEASES[minor], what, reason))
