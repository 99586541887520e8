# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The crictl backend: argument lists only, global flags before the sub-command (RUNTIME.md sections 2, 4).

Parses exactly the shapes crictl 1.32 prints (``shared/crictl-samples``) and maps its ``level=fatal`` lines
to the core's runtime errors. The command runner is injected: the default runs the process with a hard
timeout; tests pass a fake that replays recorded output.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import (ContainerNotFoundError, ContainerRuntimeError, RuntimeOutputError, RuntimeTimeoutError,
                      RuntimeUnavailableError)
from ..kubelet.cpuset import CPUSet
from .cri_decode import as_dict, as_int, container_info, listed_container, pid_cgroup, sandbox_cgroup_parent
from .ids import check_container_id
from .model import CONTAINER_STATES, DEFAULT_TIMEOUT, ContainerInfo, ListedContainer, RuntimeBase

Runner = Callable[[Sequence[str], float], Tuple[int, str, str]]
MAX_BATCH = 32  # containers per ``crictl update`` process (update_many): the process's start is most of one update
_FATAL = re.compile(r'level=fatal msg="((?:[^"\\]|\\.)*)"')


def run_process(argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
    """Run ``argv`` (no shell), killing it after ``timeout`` seconds."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeTimeoutError("%s did not answer within %.1fs (killed)" % (" ".join(argv[:2]), timeout),
                                  argv[-1] if argv else "") from None
    except FileNotFoundError:
        raise RuntimeUnavailableError("crictl not found: %s (install cri-tools, set crictl_path, or use the cri "
                                      "runtime)" % argv[0]) from None
    except PermissionError:
        raise RuntimeUnavailableError("crictl at %s is not executable" % argv[0]) from None
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def fatal_message(stderr: str) -> str:
    """The message of crictl's last ``level=fatal`` line, unescaped; else the last non-empty stderr line."""
    matches = _FATAL.findall(stderr)
    if matches:
        try:
            return str(json.loads('"%s"' % matches[-1]))  # Go's %q escapes are JSON's for these texts
        except ValueError:
            return str(matches[-1])
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "no error output"


def classify(operation: str, target: str, message: str) -> ContainerRuntimeError:
    """Map a crictl/CRI error text to the core's error types."""
    head = "%s%s" % (operation, " " + target if target else "")
    text = "%s failed: %s" % (head, message)
    if "code = NotFound" in message:
        return ContainerNotFoundError("container %s not found by the runtime (%s)" % (target, message),
                                      operation, target)
    if "DeadlineExceeded" in message or "context deadline exceeded" in message:
        return RuntimeTimeoutError(text, operation, target)
    if ("code = Unavailable" in message or "connection refused" in message or "connect: no such file" in message
            or "validate service connection" in message):
        return RuntimeUnavailableError("container runtime unavailable: %s" % message, operation, target)
    if "numerical result out of range" in message:
        return ContainerRuntimeError("%s: a CPU in the requested set is not online on this node (%s)"
                                     % (head, message), operation, target)
    return ContainerRuntimeError(text, operation, target)


class CrictlRuntime(RuntimeBase):
    """Talks to the runtime through ``crictl`` (every kubeadm node has it)."""

    name = "crictl"

    def __init__(self, crictl_path: str = "crictl", endpoint: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, runner: Optional[Runner] = None) -> None:
        super().__init__()
        self.crictl_path = crictl_path
        self.endpoint = endpoint
        self.timeout = timeout
        self.runner = runner or run_process

    def argv(self, *args: str) -> List[str]:
        """crictl's global flags come before the sub-command."""
        argv = [self.crictl_path]
        if self.endpoint:
            argv.append("--runtime-endpoint=%s" % self.endpoint)
        if self.timeout != DEFAULT_TIMEOUT:
            argv.append("--timeout=%ss" % _seconds(self.timeout))
        argv.extend(args)
        return argv

    def _run(self, operation: str, target: str, *args: str) -> str:
        self.count(operation)
        # crictl retries a refused dial up to three times, each bounded by --timeout: allow for that.
        rc, out, err = self.runner(self.argv(*args), self.timeout * 4 + 1)
        if rc != 0:
            raise classify(operation, target, fatal_message(err))
        return out

    def _json(self, operation: str, target: str, *args: str) -> Dict[str, Any]:
        out = self._run(operation, target, *args)
        try:
            return as_dict(json.loads(out), "crictl %s output" % operation)
        except ValueError as exc:
            raise RuntimeOutputError("crictl %s printed something that is not JSON (%s): %r"
                                     % (operation, exc, out[:200]), operation, target) from None

    def version(self) -> Dict[str, str]:
        out = self._run("version", "", "version")
        fields = {}
        for line in out.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "RuntimeName" not in fields:
            raise RuntimeOutputError("crictl version printed no RuntimeName: %r" % out[:200], "version")
        return fields

    def list_containers(self) -> List[ListedContainer]:
        doc = self._json("list", "", "ps", "-a", "-o", "json")
        items = doc.get("containers")
        if items is None:
            return []
        if not isinstance(items, list):
            raise RuntimeOutputError("crictl ps: \"containers\" is not a list", "list")
        result = []
        for item in items:
            row = as_dict(item, "crictl ps item")
            state = row.get("state")
            if state not in CONTAINER_STATES:
                raise RuntimeOutputError("crictl ps: unknown container state %r" % (state,), "list")
            result.append(listed_container(row, str(state), as_int(row.get("createdAt"), "createdAt")))
        return result

    def inspect(self, container_id: str) -> ContainerInfo:
        check_container_id(container_id)
        doc = self._json("inspect", container_id, "inspect", container_id)
        status = as_dict(doc.get("status"), "crictl inspect status")
        info = as_dict(doc.get("info"), "crictl inspect info")
        result = container_info(status, info, pid_cgroup=pid_cgroup(info))
        finished = status.get("finishedAt")
        if isinstance(finished, str) and finished and not finished.startswith("0001-"):
            result = result._replace(finished_at=_rfc3339_ns(finished))
        return result

    def pod_annotations(self, sandbox_id: str) -> Mapping[str, Any]:
        check_container_id(sandbox_id)
        doc = self._json("inspect_pod", sandbox_id, "inspectp", sandbox_id)
        status = as_dict(doc.get("status"), "crictl inspectp status")
        return as_dict(status.get("annotations"), "crictl inspectp status.annotations")

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        check_container_id(sandbox_id)
        doc = self._json("inspect_pod", sandbox_id, "inspectp", sandbox_id)
        return sandbox_cgroup_parent(as_dict(doc.get("info"), "crictl inspectp info"), "pod sandbox " + sandbox_id)

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        check_container_id(container_id)
        flags = []
        if cpuset_cpus is not None:
            flags.append("--cpuset-cpus=%s" % cpuset_cpus)
        if cpuset_mems is not None:
            flags.append("--cpuset-mems=%s" % cpuset_mems)
        if cpu_quota is not None:
            flags.append("--cpu-quota=%d" % cpu_quota)
        if cpu_period is not None:
            flags.append("--cpu-period=%d" % cpu_period)
        if not flags:
            return
        self._run("update", container_id, "update", *flags, container_id)

    def update_many(self, container_ids: List[str], cpuset_cpus: CPUSet) -> List[Tuple[str, Optional[Exception]]]:
        """The same cpuset for many containers (the shared pool's): one crictl process for up to ``MAX_BATCH`` of them
        (``crictl update`` takes many IDs and stops at the first it cannot update, naming it). Each container's
        outcome, in order: None when updated, else the error (the ones after a failed one are tried again)."""
        for cid in container_ids:
            check_container_id(cid)
        outcome: List[Tuple[str, Optional[Exception]]] = []
        waiting = list(container_ids)
        while waiting:
            batch, waiting = waiting[:MAX_BATCH], waiting[MAX_BATCH:]
            self.count("update")
            rc, _out, err = self.runner(self.argv("update", "--cpuset-cpus=%s" % cpuset_cpus, *batch),
                                        self.timeout * (3 + len(batch)) + 1)
            if rc == 0:
                outcome.extend((cid, None) for cid in batch)
                continue
            message = fatal_message(err)
            failed = next((cid for cid in batch if '"%s"' % cid in message), None)
            whole = classify("update", "", message)
            if failed is None and isinstance(whole, (RuntimeUnavailableError, RuntimeTimeoutError)):
                outcome.extend((cid, whole) for cid in batch)  # the runtime, not a container: the same for all
                continue
            if failed is None:  # it names none of them: each one's own error, one by one
                for cid in batch:
                    try:
                        self.update(cid, cpuset_cpus=cpuset_cpus)
                        outcome.append((cid, None))
                    except ContainerRuntimeError as exc:
                        outcome.append((cid, exc))
                continue
            at = batch.index(failed)
            outcome.extend((cid, None) for cid in batch[:at])
            outcome.append((failed, classify("update", failed, message)))
            waiting = batch[at + 1:] + waiting
        return outcome


def _seconds(value: float) -> str:
    return ("%.3f" % value).rstrip("0").rstrip(".")


def _rfc3339_ns(text: str) -> int:
    """RFC 3339 with nanoseconds (crictl's inspect times) to ns since the epoch; 0 when unparsable."""
    match = re.match(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$", text)
    if not match:
        return 0
    seconds = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((match.group(2) or "0").ljust(9, "0"))


def default_endpoint() -> Optional[str]:
    """What crictl itself would use before its deprecated probing: env, then the config file (RUNTIME.md 4)."""
    env = os.environ.get("CONTAINER_RUNTIME_ENDPOINT")
    if env:
        return env
    config = os.environ.get("CRI_CONFIG_FILE") or "/etc/crictl.yaml"
    try:
        with open(config, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "runtime-endpoint":
                    return value.strip().strip("'\"") or None
    except OSError:
        pass
    return None
