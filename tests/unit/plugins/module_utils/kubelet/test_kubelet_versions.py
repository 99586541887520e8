"""Kubelet versions (KUBELET_VERSIONS.md): the known ones, and the list named when another is asked for."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import (POD_LEVEL,
                                                                                                   KubeletVersion,
                                                                                                   kubelet_version)


def test_versions_outside_the_known_ones_are_refused_with_the_list():
    assert kubelet_version("Kubernetes v1.37.2") == KubeletVersion(37, ())
    assert kubelet_version(None).name == "1.35"
    for text in ("1.34", "1.39", "2.0", "latest"):
        with pytest.raises(ConfigError, match=r"is not one kubecpu knows: 1\.35, 1\.36, 1\.37, 1\.38"):
            kubelet_version(text)
    with pytest.raises(ConfigError, match="must be true or false"):
        kubelet_version("1.36", {POD_LEVEL: "yes"})
