# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet's model, exact: CPU sets, the machine's topology and its discovery, the static policy and its
options, topology hints and the Topology Manager, pods and quantities, the assignments and the checkpoint's bytes in
every format a kubelet version reads or writes (docs/ALGORITHM.md, KUBELET_VERSIONS.md, HINTS.md, TOPOLOGY.md).
The bottom layer: nothing here knows a container runtime, a socket or a file lock. It imports nothing outside itself
but ``errors``; every layer above may import it.
"""
