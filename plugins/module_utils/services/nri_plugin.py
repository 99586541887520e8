# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""``kubecpu nri``: the CPU manager as an NRI plugin, so a container runs on its CPUs from its first instruction.

The runtime (containerd >= 1.7 with NRI enabled, CRI-O >= 1.26) tells the plugin what it runs and asks it before a
container is created. Every decision is the node manager's own reconcile pass over what NRI told, through
``NRIView``, a runtime whose list is NRI's containers and whose updates are collected into the reply instead of
pushed: the same state file, lock, policy, options and Topology Manager as the agent and the modules, so they can
all run on one node and never double-book a CPU.

* Synchronize (on every (re)connection): adopts what runs, replies with the updates that bring each container to
  its target (a pass over every container, cgroupfs read);
* CreateContainer: the new container's cpuset (and with the options memory nodes and quota) in the adjustment, the
  shared containers whose pool shrank in the same reply; a container of a Burstable pod that its
  ``cpu-exclusive.kubecpu.io`` names and that may not have exclusive CPUs is refused (``node/exclusive.py``);
* UpdateContainer (an in-place resize, new resources for the same container): decided again with them;
* StopContainer: the container is stopped (an init container's CPUs stay for its pod's app containers); a removed
  container is released, and the containers whose pool grew are updated unsolicited.

Every other request is a pass scoped to the pod it concerns (and the pods whose last allocation or resize failed,
retried each time): the cost of a reply does not grow with the containers that did not change, only with those it
updates (the shared containers, when the shared pool changed), and one shared update is encoded once for all of them.

A reply that cannot be made within the runtime's request timeout (default 2 s) is not made at all (the runtime has
given up on it) and the log says why. What the runtime sends is hostile until parsed: a payload the plugin cannot read
is that request's INVALID_ARGUMENT, a broken frame or envelope that connection's end (the plugin connects again), and
any other failure of a request its INTERNAL; each is a log line and ``kubecpu_peer_errors_total``, never the process's
end. SIGTERM ends the plugin within ``ttrpc.POLL`` seconds whatever it waits for.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, TextIO, Tuple

from ..errors import (ConnectionBroken, ContainerNotFoundError, HousekeepingError, KubecpuError, KubeletPinsError,
                      MessageError, PodSpecError, RuntimeRefusedError, RuntimeTimeoutError, StateError, StoreError)
from ..kubelet.cpuset import CPUSet
from ..node.exclusive import refused_in
from ..node.housekeeping import kept_off
from ..node.manager import NodeManager
from ..node.metrics import Metrics
from ..runtime.model import EXITED, RUNNING, ContainerInfo, ListedContainer, RuntimeBase
from ..runtime.nri_api import (CREATE_CONTAINER, DEFAULT_INDEX, DEFAULT_NAME, DEFAULT_SOCKET, PLUGIN_SERVICE,
                               REMOVE_CONTAINER, RUNTIME_SERVICE, STOP_CONTAINER, UPDATE_CONTAINER, container_model,
                               event_mask, now_ns, schema)
from ..wire.proto_schema import Encoded
from ..wire.ttrpc import INTERNAL, INVALID_ARGUMENT, OK, POLL, UNIMPLEMENTED, UNKNOWN, Channel
from .agent import say, write_metrics

DEFAULT_REQUEST_TIMEOUT = 2.0
# Seconds for the runtime's answer to UpdateContainers, which it sends after applying every update: at 250 containers
# on containerd 2.4.2 the request timeout of 2 s ran out and the plugin reconnected 11 times in one storm
# (benchmarks/peers.py, 2026-12-07); the kubelet gives a CRI update 2 minutes
UPDATE_CONTAINERS_TIMEOUT = 120.0
EVENTS = event_mask(CREATE_CONTAINER, UPDATE_CONTAINER, STOP_CONTAINER, REMOVE_CONTAINER)
Fields = Dict[str, Any]


class NRIView(RuntimeBase):
    """The containers NRI told of, as the manager's runtime; updates are collected, not pushed."""

    name = "nri"
    live = True  # NRI tells each container's facts as they change (created, updated, stopped, removed)

    def __init__(self) -> None:
        super().__init__()
        self.known: Dict[str, Tuple[ListedContainer, ContainerInfo]] = {}
        self.pending: Dict[str, Fields] = {}

    def list_containers(self) -> List[ListedContainer]:
        self.count("list")
        return [listed for listed, _info in self.known.values()]

    def inspect(self, container_id: str) -> ContainerInfo:
        if container_id not in self.known:
            raise ContainerNotFoundError("container %s not known to NRI" % container_id, "inspect", container_id)
        return self.known[container_id][1]

    def describe(self, listed: ListedContainer) -> ContainerInfo:
        return self.inspect(listed.id)

    def update_many(self, container_ids: List[str], cpuset_cpus: CPUSet) -> List[Tuple[str, Optional[Exception]]]:
        """The same new cpuset for many containers (the shared pool's followers): one entry shared by all."""
        self.count("update")
        fields: Fields = {"cpus": cpuset_cpus}
        for cid in container_ids:
            self.pending[cid] = fields
        return [(cid, None) for cid in container_ids]

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        self.count("update")
        self.inspect(container_id)
        fields = self.pending[container_id] = dict(self.pending.get(container_id, {}))  # a follower's is shared
        fields.update({k: v for k, v in (("cpus", cpuset_cpus), ("mems", cpuset_mems), ("quota", cpu_quota),
                                         ("period", cpu_period)) if v is not None})


def resources(pb: Any, fields: Fields) -> Any:
    """NRI LinuxResources with only the given CPU fields."""
    message = pb.LinuxResources()
    if "cpus" in fields:
        message.cpu.cpus = str(fields["cpus"])
    if "mems" in fields:
        message.cpu.mems = str(fields["mems"])
    if "quota" in fields:
        message.cpu.quota.value = fields["quota"]
    if "period" in fields:
        message.cpu.period.value = fields["period"]
    return message


class NRIPlugin:
    """One plugin connection at a time; reconnects (and synchronizes again) when the runtime restarts."""

    def __init__(self, manager: NodeManager, view: NRIView, log: TextIO, *, socket_path: str = DEFAULT_SOCKET,
                 name: str = DEFAULT_NAME, index: str = DEFAULT_INDEX, metrics_path: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.view = view
        self.log = log
        self.socket_path = socket_path
        self.name = name
        self.index = index
        self.metrics_path = metrics_path
        self.metrics = Metrics()
        self.clock = clock
        self.pb = schema()
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.stopping: Optional[int] = None
        self.unsolicited: Dict[str, Fields] = {}
        self.channel: Optional[Channel] = None
        self.collecting = False  # a Synchronize in several parts ("more")
        self.last_errors: List[Dict[str, str]] = []
        self.retry: Set[str] = set()  # pods whose allocation or resize failed: in the scope of every pass
        self.metrics_due = False
        self.aside = ""  # why the last pass stepped aside (the kubelet pins CPUs): said once, not every event
        manager.baselines.deferred = True  # written after the reply (serve_connection): a lost one is taken again
        if manager.irq is not None:  # interrupts too: a container's creation does not wait for /proc/irq
            manager.irq.deferred = True
        self.handlers: Dict[str, Callable[[bytes], Any]] = {
            "Configure": self._on_configure, "Synchronize": self._on_synchronize,
            "CreateContainer": self._on_create_container, "UpdateContainer": self._on_update_container,
            "StopContainer": self._on_stop_container, "StateChange": self._on_state_change,
            "Shutdown": self._on_shutdown}

    def _say(self, level: str, message: str, **fields: Any) -> None:
        say(self.log, level, message, **fields)

    # --- the connection -------------------------------------------------------------------------------------
    def run(self, retry: float = 1.0) -> int:
        """Connect, register and serve until SIGTERM or SIGINT; reconnect after the runtime goes away."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        self._say("info", "NRI plugin started", socket=self.socket_path, plugin=self.name, index=self.index,
                  state=self.manager.store.path, policy=self.manager.policy.name)
        try:
            while self.stopping is None:
                try:
                    self.serve_connection()
                except Exception as exc:  # pylint: disable=broad-except  # whatever the runtime did ends this connection only
                    if self.stopping is None:
                        self._peer_error("broken" if isinstance(exc, ConnectionBroken) else "connection")
                        self._say("warning", "NRI connection: %s; retrying in %.1fs" % (exc, retry))
                self._sleep(retry)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._say("info", "NRI plugin stopped")
        return 0

    def _sleep(self, seconds: float) -> None:
        """A pause that a stop request ends within POLL seconds."""
        until = time.monotonic() + seconds
        while self.stopping is None and time.monotonic() < until:
            time.sleep(min(POLL, max(until - time.monotonic(), 0.0)))

    def _peer_error(self, kind: str) -> None:
        self.metrics.inc("kubecpu_peer_errors_total", peer="nri", kind=kind)
        write_metrics(self.metrics, self.metrics_path, self.log)

    def _stop(self, signum: int, _frame: Any) -> None:
        self.stopping = signum
        if self.channel is not None:
            self.channel.closed = True

    def serve_connection(self) -> None:
        self.channel = Channel.connect(self.socket_path, self.request_timeout)
        try:
            request = self.pb.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index)
            self.channel.call(RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(), self.request_timeout,
                              self.handle)
            self._say("info", "registered with the runtime", plugin=self.name, index=self.index)
            while self.stopping is None and not self.channel.closed:
                self.channel.serve(self.handle, timeout=0.5)
                self._send_unsolicited()
                self._after_replies()
        finally:
            self.channel.close()
            self.channel = None

    def _after_replies(self) -> None:
        """What the replies did not wait for: the resize baselines, the interrupts and the metrics file."""
        try:
            if self.manager.baselines.pending:
                with self.manager.store.locked():  # every write of the node's files is under the state lock
                    self.manager.baselines.flush()
        except StoreError as exc:
            self._say("error", str(exc))
        irq = self.manager.irq
        if irq is not None and irq.pending is not None:
            try:
                with self.manager.store.locked():  # around what the state gives now: a pass since may have changed it
                    report = irq.flush(kept_off(self.manager.options.irq_isolation, self.manager.read_state(),
                                                self.manager.irq_pods)) or {}
                self.metrics.observe_housekeeping(report)
                if report.get("updated"):
                    self._say("info", "interrupts kept off %s" % report["kept_off"],
                              updated=len(report["updated"]), refused=report["refused"])
            except (StoreError, HousekeepingError) as exc:
                self.metrics.inc("kubecpu_irq_errors_total")
                self._say("error", str(exc))
            self.metrics_due = True
        if self.metrics_due:
            self.metrics_due = False
            write_metrics(self.metrics, self.metrics_path, self.log)

    def _send_unsolicited(self) -> None:
        """The updates of the passes that no reply carried (a release, a removal), in one UpdateContainers. The
        runtime applies every update before it answers, so the call has a timeout of its own
        (UPDATE_CONTAINERS_TIMEOUT; the runtime's requests are served meanwhile). An update the runtime did not
        apply, or did not answer for in time, or answered with an error status or a reply the plugin cannot read, is
        forgotten as pushed: the next pass checks that container again. The connection stays: a slow or failed
        answer is no broken peer.

        containerd applies the call under the lock its CreateContainer holds while the plugin replies (containerd/nri
        pkg/adaptation, updateContainers), so a reply made meanwhile can reach a container before this older update:
        each container is sent the cpuset it was last given (``_latest``), and one given another while the call
        waited is sent that again after it."""
        if not self.unsolicited or self.channel is None:
            return
        updates, self.unsolicited = self._latest(self.unsolicited), {}
        sent = {cid: fields.get("cpus") for cid, fields in updates.items()}
        request = self.pb.UpdateContainersRequest(update=self._updates(updates))
        failed: List[str] = list(updates)
        try:
            reply = self.pb.UpdateContainersResponse.FromString(self.channel.call(
                RUNTIME_SERVICE, "UpdateContainers", request.SerializeToString(), UPDATE_CONTAINERS_TIMEOUT,
                self.handle))
        except (RuntimeTimeoutError, RuntimeRefusedError, MessageError) as exc:
            why = str(exc)
            if isinstance(exc, MessageError):
                self._peer_error("payload")
                why = "UpdateContainers: the runtime's answer cannot be read: %s" % exc
            self._say("warning", "%s: the updates of %d container(s) are checked again at the next pass" % (
                why, len(updates)))
        else:
            failed = [entry.container_id for entry in reply.failed]
            for cid in failed:
                self._say("warning", "the runtime could not update container %s" % cid)
        pushed = self.manager.cgroup_targets.pushed
        again: Dict[str, Fields] = {}  # one entry for each cpuset, shared as the followers' are
        for cid, cpus in sent.items():  # given another cpuset while the call waited: sent again after it
            if cpus is not None and cid in pushed and pushed[cid] != cpus:
                now = pushed[cid]
                self.unsolicited.setdefault(cid, again.setdefault(str(now), {"cpus": now}))
        self._forget(failed)

    def _latest(self, updates: Dict[str, Fields]) -> Dict[str, Fields]:
        """The queued updates with the cpuset each container was given last: a reply since may have given it another
        (the followers' shared entries stay shared)."""
        pushed = self.manager.cgroup_targets.pushed
        latest: Dict[str, Fields] = {}
        moved: Dict[Tuple[int, str], Fields] = {}
        for cid, fields in updates.items():
            cpus = pushed.get(cid)
            stale = "cpus" in fields and cpus is not None and cpus != fields["cpus"]
            latest[cid] = moved.setdefault((id(fields), str(cpus)), dict(fields, cpus=cpus)) if stale else fields
        return latest

    def _forget(self, container_ids: Iterable[str]) -> None:
        """These containers are no longer taken to have what a pass pushed to them (``_unsent``)."""
        pushed = self.manager.cgroup_targets.pushed
        for cid in container_ids:
            pushed.pop(cid, None)

    # --- the requests ---------------------------------------------------------------------------------------
    def handle(self, service: str, method: str, payload: bytes, deadline: float) -> Optional[Tuple[int, str, bytes]]:
        """One request of the runtime; None when the answer would come after the runtime's deadline."""
        on = self.handlers.get(method) if service == PLUGIN_SERVICE else None
        if on is None:
            return UNIMPLEMENTED, "kubecpu does not handle %s.%s" % (service, method), b""
        started = self.clock()
        try:
            reply = on(payload)
        except MessageError as exc:
            self._peer_error("payload")
            self._say("error", "%s: the runtime's request cannot be read: %s" % (method, exc))
            return INVALID_ARGUMENT, "kubecpu cannot read this %s request: %s" % (method, exc), b""
        except KubecpuError as exc:
            self._say("error", "%s: %s" % (method, exc))
            return UNKNOWN, str(exc), b""
        except Exception as exc:  # pylint: disable=broad-except  # one request's failure, never the plugin's
            self._peer_error("request")
            self._say("error", "%s failed: %s: %s" % (method, type(exc).__name__, exc))
            return INTERNAL, "kubecpu could not handle %s: %s" % (method, type(exc).__name__), b""
        late = deadline and time.monotonic() > deadline
        if late:
            self._say("error", "%s answered after the runtime's request timeout (%.3fs): not sent; the runtime has "
                      "gone on without it" % (method, self.clock() - started))
            self._unsent()
            return None
        return OK, "", reply.SerializeToString()

    def _unsent(self) -> None:
        """A reply the runtime never applied: the containers its pass updated (the new one's adjustment too) are no
        longer taken to have what it gave them, so the next pass reads their cgroups and updates them again (the state
        it saved stands: the runtime's retry finds the entry, and the others still on its CPUs move then)."""
        self._forget(self.view.pending)

    def _on_configure(self, payload: bytes) -> Any:
        request = self.pb.ConfigureRequest.FromString(payload)
        if request.request_timeout > 0:
            self.request_timeout = request.request_timeout / 1000.0
        # the state lock must be had (or given up) well within the runtime's timeout
        self.manager.store.lock_timeout = self.request_timeout / 2
        self.manager.store.hard_timeout = True
        self._say("info", "configured by %s %s" % (request.runtime_name, request.runtime_version),
                  request_timeout_seconds=self.request_timeout, events=EVENTS)
        return self.pb.ConfigureResponse(events=EVENTS)

    def _on_synchronize(self, payload: bytes) -> Any:
        request = self.pb.SynchronizeRequest.FromString(payload)
        pods = {pod.id: pod for pod in request.pods}
        if not self.collecting:
            self.view.known = {}
        self.collecting = request.more
        for order, container in enumerate(request.containers):
            pod = pods.get(container.pod_sandbox_id)
            if pod is not None:
                self.view.known[container.id] = container_model(pod, container, order + 1)
        if request.more:
            return self.pb.SynchronizeResponse(more=True)
        updates = self._pass("synchronize", None)
        return self.pb.SynchronizeResponse(update=self._updates(updates))

    def _on_create_container(self, payload: bytes) -> Any:
        request = self.pb.CreateContainerRequest.FromString(payload)
        cid = request.container.id
        self.view.known[cid] = container_model(request.pod, request.container, now_ns(), state=RUNNING)
        updates = self._pass("create", request.pod.uid)
        refused = refused_in(self.last_errors, cid)
        if refused:  # a container cpu-exclusive.kubecpu.io names that may not have exclusive CPUs: not created
            self.view.known.pop(cid, None)
            self._unsent()
            raise PodSpecError(refused.replace(": it stays in the shared pool", ": not created"))
        reply = self.pb.CreateContainerResponse()
        own = updates.pop(cid, None)
        if own:
            reply.adjust.linux.resources.CopyFrom(resources(self.pb, own))
        reply.update.extend(self._updates(updates))
        return reply

    def _on_update_container(self, payload: bytes) -> Any:
        request = self.pb.UpdateContainerRequest.FromString(payload)
        cid = request.container.id
        state = self.view.known[cid][0].state if cid in self.view.known else RUNNING
        self.view.known[cid] = container_model(request.pod, request.container, self._created(cid), state=state,
                                               resources=request.linux_resources)
        updates = self._pass("update", request.pod.uid)
        refused = [e["error"] for e in self.last_errors if e.get("container_id") == cid
                   and e["error"].startswith("resize refused")]
        if refused:  # the kubelet refuses a resize below the baseline: so does the runtime, told by the plugin
            raise StateError(refused[0])
        return self.pb.UpdateContainerResponse(update=self._updates(updates))

    def _on_stop_container(self, payload: bytes) -> Any:
        request = self.pb.StopContainerRequest.FromString(payload)
        cid = request.container.id  # when it stopped tells an init container from the app containers after it
        self.view.known[cid] = container_model(request.pod, request.container, self._created(cid), state=EXITED,
                                               finished_at=now_ns())
        return self.pb.StopContainerResponse(update=self._updates(self._pass("stop", request.pod.uid)))

    def _on_state_change(self, payload: bytes) -> Any:
        event = self.pb.StateChangeEvent.FromString(payload)
        if event.event == REMOVE_CONTAINER:
            self.view.known.pop(event.container.id, None)
            self.unsolicited.update(self._pass("remove", event.pod.uid or None))
        return self.pb.Empty()

    def _on_shutdown(self, payload: bytes) -> Any:
        self._say("info", "the runtime is shutting down")
        return self.pb.Empty()

    # --- deciding -------------------------------------------------------------------------------------------
    def _created(self, cid: str) -> int:
        return self.view.known[cid][0].created_at if cid in self.view.known else now_ns()

    def _pass(self, why: str, pod_uid: Optional[str]) -> Dict[str, Fields]:
        """The manager's reconcile pass over what NRI told, scoped to ``pod_uid`` and the pods to retry (None: every
        pod); returns the collected updates by container ID."""
        self.view.pending = {}
        started = self.clock()
        try:
            plan = self.manager.reconcile(apply=True, scope=None if pod_uid is None else self.retry | {pod_uid})
        except KubeletPinsError as exc:  # the kubelet places every container itself: no adjustment, no refusal
            if self.aside != str(exc):
                self._say("warning", str(exc))
            self.aside = str(exc)
            return {}
        if self.aside:
            self._say("info", "the kubelet no longer pins CPUs: kubecpu manages them again")
            self.aside = ""
        doc = plan.to_dict(states=False)
        self.last_errors = doc["errors"]
        pods = {cid: listed.pod_uid for cid, (listed, _info) in self.view.known.items()}
        self.retry = {pods[e["container_id"]] for e in doc["errors"]
                      if e.get("kind") in ("allocation", "resize") and e.get("container_id") in pods}
        self.metrics.record(doc, self.clock() - started, self.manager.topology, plan.after,
                            self.manager.policy.reserved)
        if doc["actions"] or doc["errors"] or plan.followers:
            followed = {"shared_pool": str(plan.after.default), "containers": len(plan.followers)}
            self._say("info", why, actions=doc["actions"], errors=doc["errors"],
                      **({"followers": followed} if plan.followers else {}))
        self.metrics_due = True  # written once the reply is sent (serve_connection): off the runtime's wait
        return dict(self.view.pending)

    def _updates(self, updates: Dict[str, Fields]) -> List[Any]:
        """The updates as NRI ContainerUpdates, each encoded as it is; fields shared by many containers (the shared
        pool's followers share one entry) are encoded once."""
        groups: Dict[int, Tuple[Fields, List[str]]] = {}  # the entries live through the call: an id names one
        for cid, fields in sorted(updates.items()):
            groups.setdefault(id(fields), (fields, []))[1].append(cid)
        out: List[Any] = []
        for fields, ids in groups.values():
            linux = Encoded(self.pb.LinuxContainerUpdate(resources=resources(self.pb, fields)).SerializeToString())
            out.extend(self.pb.ContainerUpdate.encoded_each("container_id", ids, linux=linux))
        return out
