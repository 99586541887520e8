# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Domain errors of the kubecpu core.

Every error names the object it is about and the cause. Where the kubelet has an exact error text,
``str(err)`` is that text, so callers can compare it with the kubelet's messages and tests can
compare it with the kubelet's own test expectations.
"""

from __future__ import annotations

from typing import Any, Dict


class KubecpuError(Exception):
    """Base class of every error the core raises on purpose. ``bin/kubecpu`` exits 1 on it (a refusal) unless it
    is a ``ConfigError`` (exit 2); a module turns either into ``fail_json``."""


class ConfigError(KubecpuError):
    """Bad arguments or configuration: a setting, a flag, a requested kubelet configuration the kubelet would
    refuse. ``bin/kubecpu`` exits 2 on every subclass."""


class UsageError(ConfigError):
    """Bad command-line arguments or an unreadable input file named on the command line."""


class CPUSetError(ConfigError, ValueError):
    """A CPU list or hex mask could not be parsed.

    ``detail`` is the kubelet-compatible reason (for example Go's
    ``strconv.Atoi: parsing "a": invalid syntax``); ``text`` is the whole input.
    """

    def __init__(self, text: str, detail: str) -> None:
        self.text = text
        self.detail = detail
        super().__init__('invalid CPU list "%s": %s' % (text, detail))


class TopologyError(ConfigError):
    """A topology document or a sysfs tree is unusable."""


class OptionError(ConfigError):
    """A static policy option is unknown, badly valued or refused in this combination."""


class QuantityError(KubecpuError, ValueError):
    """A Kubernetes resource quantity could not be parsed."""


class PodSpecError(ConfigError):
    """A pod description is malformed."""


class PolicyError(ConfigError):
    """The policy cannot be built (reservation problems, unknown policy)."""


class TopologyManagerError(ConfigError):
    """The Topology Manager cannot be built (the kubelet's NewManager error texts)."""


class AllocationError(KubecpuError):
    """An allocation request cannot be met (kubelet texts such as 'not enough cpus available ...')."""


class TopologyAffinityError(AllocationError):
    """The Topology Manager does not admit the container (the kubelet's TopologyAffinityError)."""

    TEXT = "Resources cannot be allocated with Topology locality"

    def __init__(self, detail: str = "") -> None:
        super().__init__("%s (%s)" % (self.TEXT, detail) if detail else self.TEXT)


class SMTAlignmentError(AllocationError):
    """The kubelet's SMTAlignmentError (full-pcpus-only)."""

    kind = "SMTAlignmentError"

    def __init__(self, requested_cpus: int, cpus_per_core: int, available_physical_cpus: int = 0,
                 caused_by_physical_cpus: bool = False) -> None:
        self.requested_cpus = requested_cpus
        self.cpus_per_core = cpus_per_core
        self.available_physical_cpus = available_physical_cpus
        self.caused_by_physical_cpus = caused_by_physical_cpus
        if caused_by_physical_cpus:
            text = ("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, "
                    "requested CPUs = %d, CPUs per core = %d"
                    % (available_physical_cpus, requested_cpus, cpus_per_core))
        else:
            text = ("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d"
                    % (requested_cpus, cpus_per_core))
        super().__init__(text)


class StateError(KubecpuError):
    """The checkpoint does not validate against the node (kubelet validateState texts)."""


class CheckpointError(KubecpuError):
    """The checkpoint file cannot be restored (corrupt, foreign policy, unparsable sets).

    ``reason`` is the kubelet's inner error text; ``str(err)`` is the kubelet's wrapped message that
    names the file.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            'could not restore state from checkpoint: %s, please drain this node and delete the CPU '
            'manager checkpoint file "%s" before restarting Kubelet' % (reason, path))


class RestoreFailure(Exception):
    """The kubelet's inner checkpoint restore error text; ``checkpoint`` raises it and the store wraps it into a
    ``CheckpointError`` that names the file."""


class TypeMismatch(Exception):
    """A checkpoint's JSON did not decode into the kubelet's struct, in Go's words: a ``*json.UnmarshalTypeError``
    (``value`` the JSON kind as Go names it, ``struct`` and ``field`` the struct and field path, empty for a value
    that is no struct field, ``go_type`` the Go type), or, with ``go_type`` empty, the error a field's own
    ``UnmarshalJSON`` returned. ``kubelet.go_json`` raises it; ``kubelet.checkpoint`` turns it into a
    ``RestoreFailure``."""

    def __init__(self, value: str, struct: str = "", field: str = "", go_type: str = "") -> None:
        self.value, self.struct, self.field, self.go_type = value, struct, field, go_type
        if not go_type:
            text = value
        elif struct or field:
            text = "json: cannot unmarshal %s into Go struct field %s.%s of type %s" % (value, struct, field, go_type)
        else:
            text = "json: cannot unmarshal %s into Go value of type %s" % (value, go_type)
        super().__init__(text)

    def within(self, struct: str, fields: str) -> TypeMismatch:
        """The error as the decoder of an enclosing struct returns it (Go's ``addErrorContext``): a type error is
        named by that struct and its field path, ``fields``, then the field inside; any other error is kept."""
        if not self.go_type:
            return self
        return TypeMismatch(self.value, struct, "%s.%s" % (fields, self.field) if self.field else fields,
                            self.go_type)


class StoreError(KubecpuError):
    """The state store cannot be read, locked or written (I/O, permissions, read-only store)."""


class StaleCheckpointError(StoreError):
    """A file was planned from other bytes than those on disk now: someone (the kubelet) wrote it since."""

    def __init__(self, path: str, planned_from: str, now: str) -> None:
        self.path, self.planned_from, self.now = path, planned_from, now
        super().__init__("%s changed since the plan was made (planned from %s, now %s): nothing was written; plan "
                         "again from the file as it is (with the kubelet stopped, it stays as it is)"
                         % (path, planned_from[:19], now[:19]))


class ChangedThenFailed(KubecpuError):
    """An error raised after a file was changed: ``cause`` is the error, ``done`` what was changed before it (the
    result a module returns with its failure, so that a rollback knows what to put back: the checkpoint's ``kept``).
    Its text is the cause's, then where the previous file is; ``kind`` is the cause's type name."""

    def __init__(self, cause: Exception, done: Dict[str, Any], what: str) -> None:
        self.cause = cause
        self.done = done
        self.kind = type(cause).__name__
        text = str(cause) if isinstance(cause, KubecpuError) else "unexpected %s: %s" % (self.kind, cause)
        super().__init__("%s (%s)" % (text, what))


class HealthError(KubecpuError):
    """A service did not become healthy after a change, or did not stay so (its health URL, systemd's restart
    count)."""


class ContainerRuntimeError(KubecpuError):
    """A container runtime call failed. ``operation`` names the call, ``target`` the container or pod."""

    def __init__(self, message: str, operation: str = "", target: str = "") -> None:
        self.operation = operation
        self.target = target
        super().__init__(message)


class RuntimeUnavailableError(ContainerRuntimeError):
    """The runtime endpoint cannot be reached (refused, missing socket, no crictl, no gRPC packages)."""


class RuntimeTimeoutError(RuntimeUnavailableError):
    """A runtime call did not answer within the configured timeout."""


class RuntimeRefusedError(RuntimeUnavailableError):
    """The runtime answered a call with an error status: that call failed, the connection it came on stands."""


class ContainerNotFoundError(ContainerRuntimeError):
    """The runtime does not know the container (it may have been removed in the middle of a pass)."""


class RuntimeOutputError(ContainerRuntimeError):
    """The runtime answered with something that is not the documented shape."""


class HookInputError(ContainerRuntimeError):
    """What the OCI runtime handed the hook (its state on stdin, the bundle's config.json) cannot be read."""


class RpcStatus(Exception):
    """A gRPC call ended with a status other than OK. ``code`` is the status name (``NOT_FOUND``), ``details`` its
    message. The CRI backend, which knows the call and its target, turns it into one of the runtime errors above."""

    def __init__(self, code: str, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__("%s: %s" % (code, details))


class ConnectionBroken(RuntimeUnavailableError):
    """The runtime broke the NRI framing or the ttrpc envelope, or went silent mid-frame: the connection is unusable
    (wire/ttrpc.py raises it; the NRI plugin connects again)."""


class HookRefusal(KubecpuError):
    """The OCI hook cannot place a container correctly: the runtime must not create it."""


class MessageError(ValueError):
    """Bytes that are not the protobuf message they should be (truncated, a wrong wire type, a bad string)."""


class ProtocolError(Exception):
    """The peer broke HTTP/2 or HPACK; the gRPC client reports it as the status INTERNAL."""


class HousekeepingError(KubecpuError):
    """The node's housekeeping (interrupt affinity in /proc/irq, irqbalance, its record file) cannot be read or
    changed: the message names the file or the daemon and the cause."""


class CPUPowerError(HousekeepingError):
    """The CPUs' power settings (sysfs's pm_qos_resume_latency_us and scaling_governor, their record file) cannot be
    read or changed at all: the message names the file and the cause."""


class SafetyError(KubecpuError):
    """kubecpu refuses to act because another manager pins CPUs on this node, or the setup would break it."""


class KubeletPinsError(SafetyError):
    """The kubelet's checkpoint says the static policy: the kubelet pins CPUs itself and kubecpu steps aside (the
    hook and the NRI plugin pass every container untouched, a pass of the agent writes nothing)."""


class PreflightError(KubecpuError):
    """A node lacks what a rollout needs (root, systemd as PID 1, an interpreter the core runs on, a runtime that
    answers, a reservation that exists and is free); ``problems`` names each, its text joins them."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))
