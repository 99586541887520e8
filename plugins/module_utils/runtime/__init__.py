# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Container runtimes and cgroups: the container model and the ``Runtime`` protocol (``model``), its backends
(crictl, the CRI over gRPC), the NRI messages, the container-facts cache, what cgroupfs shows (v1 and v2, the cgroupfs
and systemd drivers) and the inotify wakers (docs/RUNTIME.md). Imports ``kubelet``, ``wire`` and the root modules;
never a layer above.
"""
