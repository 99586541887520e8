# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""One node's CPU manager: its validated settings (``config``), the state file under its lock, a pass (observe,
decide, commit, apply) and its plan, the pod views it decides on, Topology Manager admission, in-place resize, the
cgroup targets, metrics, and the factory that builds a manager from a configuration. Imports ``kubelet``, ``wire``,
``runtime`` and the root modules.
"""
