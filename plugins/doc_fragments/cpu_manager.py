# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Options shared by the modules that manage the CPU manager state (kubecpu.cpu_manager.cpu_manager)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  state_path:
    description:
      - The checkpoint file, in the kubelet's C(cpu_manager_state) format.
      - Locked with C(flock) on C(<state_path>.lock) for every read-modify-write, so modules and the agent
        never double-book a CPU. The kubelet's own file (C(/var/lib/kubelet/cpu_manager_state)) is only
        ever read.
    type: path
    default: /var/lib/kubecpu/cpu_manager_state
  policy:
    description:
      - The CPU manager policy. V(none) pins nothing and pushes no cpusets, like the kubelet's.
    type: str
    choices: [static, none]
    default: static
  kubelet_version:
    description:
      - The kubelet whose checkpoint format and rules apply to O(state_path), V(1.35) (the default, and kubecpu's own
        state), V(1.36), V(1.37) or V(1.38); a patch version (V(1.37.2)) is its minor. 1.35 reads and writes V2; 1.36
        writes V3 with the gate C(PodLevelResourceManagers), else V2; 1.37 and 1.38 write V4. Pod-level assignments
        and resize baselines in the file are kept through every change. Other versions are refused.
    type: str
    version_added: 0.4.0
  feature_gates:
    description:
      - The kubelet's feature gates that change its checkpoint (C(PodLevelResourceManagers),
        C(InPlacePodVerticalScalingExclusiveCPUs)), names to true or false.
    type: dict
    version_added: 0.4.0
  reserved_cpus:
    description:
      - Reserved CPUs as a Linux CPU list (C(0,64)); they never become exclusive and stay in the shared pool
        unless O(policy_options) has C(strict-cpu-reservation).
      - With O(num_reserved) the two must agree, as in the kubelet.
    type: str
  num_reserved:
    description:
      - Number of reserved CPUs, chosen by topology as the kubelet does (lowest whole cores first) unless
        O(reserved_cpus) lists them.
      - Under V(static) some CPU must be reserved (O(reserved_cpus) or O(num_reserved)); none at all is refused
        with the kubelet's own words, as the kubelet refuses to start so (the shared pool could become empty).
    type: int
  policy_options:
    description:
      - Static policy options, kubelet names to values (C(full-pcpus-only), C(distribute-cpus-across-numa),
        C(align-by-socket), C(distribute-cpus-across-cores), C(strict-cpu-reservation),
        C(prefer-align-cpus-by-uncorecache)); values are parsed like Go's C(strconv.ParseBool).
    type: dict
    default: {}
  runtime:
    description:
      - How to talk to the container runtime. V(crictl) runs C(crictl) (needs nothing but python3);
        V(cri) speaks CRI over gRPC directly (needs nothing but python3 either, as gRPC, HTTP/2 and the protobuf
        encoding are kubecpu's own; its messages come from a table, no code is generated on the node).
    type: str
    choices: [crictl, cri]
    default: crictl
  runtime_endpoint:
    description:
      - The CRI endpoint, for example C(unix:///run/containerd/containerd.sock).
      - Default what crictl itself uses (C(CONTAINER_RUNTIME_ENDPOINT), then C(/etc/crictl.yaml)), else
        containerd's socket.
    type: str
  crictl_path:
    description: The crictl binary.
    type: path
    default: crictl
  runtime_timeout:
    description: Timeout of each runtime call, in seconds.
    type: float
    default: 2.0
  cgroup_root:
    description: Where cgroupfs is mounted; cpusets are read back from here to verify what the runtime applied.
    type: path
    default: /sys/fs/cgroup
  sysfs_root:
    description:
      - Discover the CPU topology from sysfs below this directory (a fake tree in tests).
    type: path
    default: /
  topology_path:
    description:
      - Read the topology from this C(kubecpu.topology/v1) JSON file instead of discovering it.
    type: path
  kubelet_state_path:
    description:
      - The kubelet's checkpoint. When it says policy C(static) the kubelet pins CPUs itself and the module
        refuses to act (two managers would fight over cpusets) unless O(force=true).
    type: path
    default: /var/lib/kubelet/cpu_manager_state
  force:
    description: Act even though the kubelet pins CPUs on this node itself.
    type: bool
    default: false
  isolated_cpus:
    description:
      - Beyond the kubelet. V(prefer) takes exclusive CPUs from the kernel's isolcpus set
        (C(/sys/devices/system/cpu/isolated)) first; V(only) takes them only from it.
    type: str
    choices: [ignore, prefer, only]
    default: ignore
  align_memory:
    description:
      - Beyond the kubelet. Set a pinned container's C(cpuset.mems) to the NUMA nodes of its exclusive CPUs.
    type: bool
    default: false
  cpu_quota:
    description:
      - Beyond the kubelet. V(unlimited) removes the CFS quota of containers holding exclusive CPUs and of
        their pod cgroup (as the kubelet's C(DisableCPUQuotaWithExclusiveCPUs) does); restored on release.
    type: str
    choices: [keep, unlimited]
    default: keep
  irq_isolation:
    description:
      - Beyond the kubelet. V(exclusive) keeps every device interrupt (C(/proc/irq/N/smp_affinity_list)) and the
        default affinity of new ones off the CPUs held exclusively, tells a running irqbalance its banned CPUs
        through its socket (never a restart) and keeps them in C(IRQBALANCE_BANNED_CPULIST) of
        C(/etc/default/irqbalance); released CPUs get their interrupts back. Managed interrupts the kernel will not
        move are counted, not errors. The affinities interrupts had are recorded in C(<state_path>.irq.json).
        See C(docs/HOUSEKEEPING.md).
      - V(annotated) does the same for the exclusive CPUs of the pods whose annotation
        C(irq-load-balancing.kubecpu.io) is C(disable) only (CRI-O's C(irq-load-balancing.crio.io) is read too);
        the pods' annotations come from the runtime (a pod sandbox status per new pod, or NRI's pod).
    type: str
    choices: ["off", exclusive, annotated]
    default: "off"
    version_added: 0.5.0
  besteffort_idle:
    description:
      - Beyond the kubelet. Write C(cpu.idle=1) into each running BestEffort pod's cgroup (cgroup v2, kernel 5.15 or
        newer; elsewhere nothing is written), so that a CPU running only BestEffort work counts as idle for other
        work waking up. The BestEffort QoS cgroup and the containers stay at C(cpu.idle=0), and a 1 written there
        by 0.6.2 and before is set back to 0, because the kernel refuses a cgroup's C(cpu.weight) while it is idle,
        and the kubelet rewrites the QoS cgroup's weight, the runtime a container's with every update.
      - Turned off, the next pass sets the pods' C(cpu.idle) back to 0.
    type: bool
    default: false
    version_added: 0.5.0
  cpu_burst:
    description:
      - Beyond the kubelet. Set C(cpu.max.burst) of each running Burstable container whose pod is annotated
        C(cpu-burst.kubecpu.io) with a duration (C(20ms)), at most its CFS quota (cgroup v2, kernel 5.14 or newer;
        a container without a quota is left alone). A value that is not a duration is reported in C(errors).
    type: bool
    default: false
    version_added: 0.5.0
  cpu_power:
    description:
      - Beyond the kubelet. Set the C-state limit (C(pm_qos_resume_latency_us)) and the cpufreq governor
        (C(scaling_governor)) of the exclusive CPUs of each pod annotated C(cpu-c-states.kubecpu.io) (V(enable),
        V(disable), C(max_latency:<microseconds>)) or C(cpu-freq-governor.kubecpu.io) (a governor's name), or with
        CRI-O's names for them (C(cpu-c-states.crio.io), C(cpu-freq-governor.crio.io)), writing what CRI-O's
        high-performance hooks write for the same value.
      - What each file had is recorded beside the state (C(<state>.power.json)) before the first write and given
        back when the pod releases the CPU, when its annotation goes, when this is turned off and after a crash. A
        CPU without cpufreq or the governor, and a refused annotation, are reported in C(errors).
    type: bool
    default: false
    version_added: 0.8.0
  exclusive_burstable:
    description:
      - Beyond the kubelet. Give exclusive CPUs to the containers of a Burstable pod that its annotation
        C(cpu-exclusive.kubecpu.io) names (container names separated by commas, C(app,db)); each with a CPU request
        of a whole number of CPUs (its limit absent or equal) gets that many, chosen by the static policy with its
        options and the Topology Manager, as a Guaranteed pod's container would. Their entries are in kubecpu's state
        file only, never in a checkpoint written for a kubelet.
      - A named container whose request is missing or fractional, whose limit is not its request or whose pod is not
        Burstable, and an annotation that is not a list of container names, are reported in C(errors) (kind
        C(exclusive)) and the container stays in the shared pool; the NRI plugin and the OCI hook refuse its creation.
      - Refused on a node whose kubelet pins CPUs itself. Turned off, the next pass gives those CPUs back.
    type: bool
    default: false
    version_added: 0.8.0
  system_partition:
    description:
      - Beyond the kubelet. The shared containers of the system pods (O(system_namespaces), O(system_priority_classes))
        run on the reserved CPUs only, every other shared container on the shared pool without them. A container
        with exclusive CPUs keeps them. System pods requesting more than the reserved CPUs are a warning in C(errors)
        (kind C(partition)), never moved back.
      - Refused on a node whose kubelet pins CPUs itself. Turned off, the next pass gives every shared container the
        whole shared pool again.
    type: bool
    default: false
    version_added: 0.8.0
  system_namespaces:
    description:
      - With O(system_partition), every pod of these namespaces is a system pod (the kubelet's
        C(io.kubernetes.pod.namespace) label, which a pod does not write).
    type: list
    elements: str
    default: []
    version_added: 0.8.0
  system_priority_classes:
    description:
      - With O(system_partition), a pod whose annotation C(priority-class.kubecpu.io) names one of these is a system
        pod. No runtime shows a pod's priority class, so it is read from that annotation (set it from
        C(spec.priorityClassName) in the manifest or with a mutating admission policy); a pod's annotations are its
        author's, so on a cluster whose tenants create pods, allow that annotation only through admission, or choose
        by namespace alone (V([])).
    type: list
    elements: str
    default: [system-node-critical]
    version_added: 0.8.0
  topology_manager_policy:
    description:
      - The Topology Manager policy applied before exclusive CPUs are chosen, as the kubelet applies it. V(none)
        (the default) keeps the CPU manager's own choice. With a policy the CPU hints (and, in
        M(kubecpu.cpu_manager.cpu_manager_allocate), a preferred hint for its C(numa_affinity) or C(near_device))
        are merged; the CPUs are taken inside the
        merged NUMA affinity, and a container the policy does not admit gets the kubelet's error
        C(Resources cannot be allocated with Topology locality), stays in the shared pool and nothing is recorded.
    type: str
    choices: [none, best-effort, restricted, single-numa-node]
    default: none
    version_added: 0.3.0
  topology_manager_scope:
    description: V(container) merges hints per container, V(pod) per pod (the pod's total request).
    type: str
    choices: [container, pod]
    default: container
    version_added: 0.3.0
  topology_manager_policy_options:
    description:
      - Topology Manager policy options (C(prefer-closest-numa-nodes), C(max-allowable-numa-nodes)); the NUMA
        distances come from the topology (C(numa_distances), read from sysfs).
    type: dict
    default: {}
    version_added: 0.3.0
"""

    # Where the topology comes from, for the modules that need nothing else of the node
    # (kubecpu.cpu_manager.cpu_manager.topology).
    TOPOLOGY = r"""
options:
  sysfs_root:
    description: Discover the CPU topology from sysfs below this directory (a fake tree in tests).
    type: path
    default: /
  topology_path:
    description: Read the topology from this C(kubecpu.topology/v1) JSON file instead of discovering it.
    type: path
"""

    # The attributes of the modules that only read (kubecpu.cpu_manager.cpu_manager.read_only).
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  idempotent:
    support: full
    description: Never changes anything.
"""

    # The container runtime alone, for the modules that plan against what runs
    # (kubecpu.cpu_manager.cpu_manager.runtime; the same text as in DOCUMENTATION: fragments are literals).
    RUNTIME = r"""
options:
  runtime:
    description:
      - How to talk to the container runtime. V(crictl) runs C(crictl) (needs nothing but python3);
        V(cri) speaks CRI over gRPC directly (needs nothing but python3 either, as gRPC, HTTP/2 and the protobuf
        encoding are kubecpu's own; its messages come from a table, no code is generated on the node).
    type: str
    choices: [crictl, cri]
    default: crictl
  runtime_endpoint:
    description:
      - The CRI endpoint, for example C(unix:///run/containerd/containerd.sock).
      - Default what crictl itself uses (C(CONTAINER_RUNTIME_ENDPOINT), then C(/etc/crictl.yaml)), else
        containerd's socket.
    type: str
  crictl_path:
    description: The crictl binary.
    type: path
    default: crictl
  runtime_timeout:
    description: Timeout of each runtime call, in seconds.
    type: float
    default: 2.0
  cgroup_root:
    description: Where cgroupfs is mounted; cpusets are read back from here to verify what the runtime applied.
    type: path
    default: /sys/fs/cgroup
"""
