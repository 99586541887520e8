# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""kubecpu's core, in layers that import one way (docs/ARCHITECTURE.md): ``kubelet`` and ``wire`` at the bottom,
then ``runtime``, ``node``, ``services``, ``operations``, and ``interfaces`` at the top. ``errors`` and ``atomic``,
here at the root, may be imported from anywhere and import nothing of the core but each other.
"""
