# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What the OCI hook (``services.hook``) knows of a container's pod beyond its spec's CPU resources, for the options
that read a pod's annotations: ``exclusive_burstable`` (``node/exclusive.py``: the containers of a Burstable pod that
its ``cpu-exclusive.kubecpu.io`` names are pinned) and ``system_partition`` (``node/partition.py``: the system pods'
shared containers on the reserved CPUs, every other one off them).

The pod's annotations come from the container's spec, where CRI-O copies every annotation of the pod and containerd
those its configuration's ``pod_annotations`` lists. When an option needs one the spec of a containerd container does
not have, the hook asks the runtime for the pod sandbox's status (one call, before the state lock is taken, only for
a container the option concerns: a Burstable one for ``exclusive_burstable``, a shared one outside
``system_namespaces`` for the partition's priority classes; asked at the hook's first question, before the lock).
When the runtime cannot tell, the container is refused (the kubelet retries): placing it without its pod's word could
leave a named container unpinned, or a system pod's off its CPUs.

A container that takes exclusive CPUs moves the other container cgroups on them to the shared pool without the
reserved CPUs (the hook does not know their pods): a system pod's container among them is back on the reserved CPUs
at the agent's next pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Optional, Sequence, Tuple

from ..errors import ContainerRuntimeError, HookRefusal
from ..kubelet.qos import BURSTABLE
from ..node.config import NodeConfig
from ..node.exclusive import named, refused_message
from ..node.partition import Partition, partition_of, shared_pool, shared_target
from ..runtime.model import (EXCLUSIVE_ANNOTATION, PRIORITY_ANNOTATION, ContainerInfo, ListedContainer, Runtime,
                             RuntimeBase, kubecpu_annotations)
from ..runtime.oci_hook import CONTAINER, HookedContainer

if TYPE_CHECKING:  # the hook's check path loads neither the pod model nor the policy
    from ..kubelet.cpuset import CPUSet
    from ..kubelet.pod import Pod
    from ..kubelet.state import CPUState

Pair = Tuple[ListedContainer, ContainerInfo]


class HookPods:
    """The hooked container's pod as the options see it (each answer kept for the hook's one run)."""

    def __init__(self, config: NodeConfig, runtime: Callable[[], Runtime]) -> None:
        self.config = config
        self.options = config.options
        self.runtime = runtime
        self._infos: Dict[str, ContainerInfo] = {}
        self._partition: Optional[Tuple[Optional[Partition]]] = None

    # --- the pod's annotations ------------------------------------------------------------------------------------
    def _wanted(self, hooked: HookedContainer) -> Tuple[str, ...]:
        """The annotations of its pod that the options need to place this container."""
        keys = []
        if self.options.exclusive_burstable and hooked.kind == CONTAINER:
            keys.append(EXCLUSIVE_ANNOTATION)
        if (self.options.system_partition and self.options.system_priority_classes
                and hooked.pod_namespace not in self.options.system_namespaces):
            keys.append(PRIORITY_ANNOTATION)
        return tuple(keys)

    def info(self, hooked: HookedContainer) -> ContainerInfo:
        """``hooked.info`` with the annotations of its pod that kubecpu reads (see the module's text)."""
        known = self._infos.get(hooked.id)
        if known is not None:
            return known
        wanted = self._wanted(hooked)
        annotations = kubecpu_annotations(hooked.annotations) if wanted else {}
        concerned = ((EXCLUSIVE_ANNOTATION in wanted and hooked.qos == BURSTABLE)
                     or (PRIORITY_ANNOTATION in wanted and not self._pinned_anyway(hooked)))
        if concerned and not hooked.by_crio and not all(key in annotations for key in wanted):
            annotations = self._from_runtime(hooked)
        info = hooked.info._replace(annotations=annotations)
        self._infos[hooked.id] = info
        return info

    @staticmethod
    def _pinned_anyway(hooked: HookedContainer) -> bool:
        """A Guaranteed container with a whole request: it holds exclusive CPUs, whatever the partition says."""
        from ..node.pod_views import lone_pod  # noqa: PLC0415  # the check path does not need the pod model

        return hooked.kind == CONTAINER and lone_pod(hooked.info).guaranteed_cpus(hooked.name) > 0

    def _from_runtime(self, hooked: HookedContainer) -> Dict[str, str]:
        sandbox = hooked.sandbox_id
        try:
            if not sandbox:
                raise ContainerRuntimeError("its spec names no pod sandbox (%s)" % "io.kubernetes.cri.sandbox-id",
                                            "inspect_pod", hooked.pod_uid)
            runtime = self.runtime()
            try:
                if not isinstance(runtime, RuntimeBase):
                    raise ContainerRuntimeError("runtime %s does not show a pod's annotations" % runtime.name,
                                                "inspect_pod", sandbox)
                return kubecpu_annotations(runtime.pod_annotations(sandbox))
            finally:
                runtime.close()
        except ContainerRuntimeError as exc:
            raise HookRefusal("container %s not created: kubecpu needs its pod's annotations (%s) and the runtime "
                              "could not show them: %s" % (hooked.ref, ", ".join(self._wanted(hooked)), exc)) from None

    # --- exclusive CPUs -----------------------------------------------------------------------------------------
    def is_marked(self, hooked: HookedContainer) -> bool:
        """Whether its pod's annotation names it and it may have exclusive CPUs; HookRefusal, naming it and why,
        when the annotation names it and it may not (or the annotation cannot be read)."""
        if not self.options.exclusive_burstable or hooked.kind != CONTAINER:
            return False
        info = self.info(hooked)
        is_named, why = named(info)
        if why:
            raise HookRefusal("container %s not created: %s" % (hooked.ref, refused_message(info, why)))
        return is_named

    def lone(self, hooked: HookedContainer) -> Pod:
        """Its pod model when its siblings are not known (``pod_views.lone_pod``), marked."""
        from ..node.pod_views import lone_pod  # noqa: PLC0415  # the check path does not need the pod model

        return lone_pod(self.info(hooked) if self._wanted(hooked) else hooked.info, self.is_marked(hooked))

    def count(self, hooked: HookedContainer) -> int:
        """The exclusive CPUs it needs (0: the shared pool's side)."""
        return self.lone(hooked).guaranteed_cpus(hooked.name) if hooked.kind == CONTAINER else 0

    def marks(self, hooked: HookedContainer, pairs: Sequence[Pair]) -> FrozenSet[Tuple[str, str]]:
        """The containers of its pod marked for exclusive CPUs: itself, and the siblings listed (``pairs``) that its
        pod's annotation names and that may have them."""
        if not self.is_marked(hooked):
            return frozenset()
        info = self.info(hooked)
        found = {(hooked.pod_uid, hooked.name)}
        for listed, sibling in pairs:
            if listed.pod_uid == hooked.pod_uid and named(sibling._replace(annotations=info.annotations)) == (True, ""):
                found.add((listed.pod_uid, listed.name))
        return frozenset(found)

    # --- the shared pool's sides --------------------------------------------------------------------------------
    def partition(self) -> Optional[Partition]:
        """The node's system partition (None when off); its reserved CPUs are the policy's (the topology is read
        only when the option is on)."""
        if self._partition is None:
            found = None
            if self.options.system_partition:
                from ..node.factory import build_policy, load_topology  # noqa: PLC0415  # only with the partition

                config = self.config
                policy = build_policy(load_topology(config), config.policy, config.reserved_cpus, config.num_reserved,
                                      config.policy_options, kubelet_minor=config.kubelet.minor)
                found = partition_of(self.options, policy.reserved)
            self._partition = (found,)
        return self._partition[0]

    def shared(self, hooked: HookedContainer, state: CPUState) -> CPUSet:
        """Its CPUs when it holds none exclusively: the shared pool, or its side of the partition."""
        partition = self.partition()
        return shared_target(partition, self.info(hooked) if partition is not None else hooked.info, state)

    def pool(self, state: CPUState) -> CPUSet:
        """The other shared containers' CPUs (where those on newly exclusive CPUs move)."""
        return shared_pool(self.partition(), state)
