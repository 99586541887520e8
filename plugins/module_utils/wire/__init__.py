# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The protocols kubecpu speaks to a runtime, standard library only: HPACK and gRPC over HTTP/2 (the CRI), the
protobuf wire format from a table of field numbers, and NRI's multiplexed ttrpc. Every byte here comes from a peer and
is hostile until parsed, within the limits each module names. A bottom layer beside ``kubelet``: it imports nothing
outside itself but ``errors`` and knows nothing of CPUs.
"""
