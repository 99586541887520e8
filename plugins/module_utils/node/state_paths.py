# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Where the state lives unless told otherwise: kubecpu's own checkpoint and the kubelet's (a module of its own so
that the OCI hook's check path knows them without loading the checkpoint codec)."""

DEFAULT_PATH = "/var/lib/kubecpu/cpu_manager_state"
KUBELET_PATH = "/var/lib/kubelet/cpu_manager_state"
