# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The long-running processes on a node: the agent (the reconcile loop, woken by events) and the NRI plugin
(containers pinned before they are created). Each runs a node manager's passes and outlives a bad peer. Imports the
layers below it (``kubelet``, ``wire``, ``runtime``, ``node``) and the root modules.
"""
