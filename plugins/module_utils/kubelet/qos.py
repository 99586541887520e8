# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The three QoS classes by their Kubernetes names (ALGORITHM.md section 5); a module of its own so that the OCI
hook's check path can name them without loading the pod model."""

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"
