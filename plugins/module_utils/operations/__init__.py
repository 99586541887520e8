# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What changes a node beyond a pass, on an operator's request: a checkpoint for a new kubelet
configuration (no drain), a checkpoint rebuilt from what runs, a checkpoint file validated, written or reset,
defragmentation, the kubelet configuration's verdict, what is pinned where (``info``), and the demo. Imports every layer
below it (``kubelet`` to ``services``) and the root modules.
"""
