"""The kubelet's CPU units as the CRI carries them (pkg/kubelet/cm/helpers_linux.go): what the fakes and the lab
write into containers' configs, the inverse of what runtime.ContainerInfo reads back."""

from __future__ import annotations


def milli_to_shares(milli: int) -> int:
    return min(max(milli * 1024 // 1000, 2), 262144)


def milli_to_quota(milli: int, period: int = 100000) -> int:
    if milli <= 0:
        return 0
    return max(milli * period // 1000, 1000)
