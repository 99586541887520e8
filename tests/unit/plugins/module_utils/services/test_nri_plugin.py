"""The NRI plugin's decisions, request by request, on NRI's own messages: the new container's CPUs in its creation
adjustment and the shared containers' updates in the same reply, synchronize adopting what runs, stop and removal,
an in-place update decided with the new resources, and what it does not handle.

Machine: 2 sockets x 2 cores x 2 threads (NUMA 0 = CPUs 0,1,4,5; NUMA 1 = 2,3,6,7); CPU 0 reserved.
"""

from __future__ import annotations

import io
import json
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.kubelet_policy import kubelet_pins
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import (PLUGIN_SERVICE,
                                                                                          REMOVE_CONTAINER, event_mask,
                                                                                          schema)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.nri_plugin import (
    EVENTS, UPDATE_CONTAINERS_TIMEOUT, NRIPlugin, NRIView)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq

PB = schema()
TOPO = Topology(generated_cpus(2, 2, 2))
PARENTS = {"Guaranteed": "/kubepods/pod%s", "Burstable": "/kubepods/burstable/pod%s"}


def pod(uid, qos="Guaranteed"):
    message = PB.PodSandbox(id="sb-" + uid, name="p-" + uid, uid=uid, namespace="ns")
    message.linux.cgroup_parent = PARENTS[qos] % uid
    return message


def container(uid, name, milli, qos="Guaranteed", state=3):
    message = PB.Container(id="%s-%s" % (uid, name), pod_sandbox_id="sb-" + uid, name=name, state=state,
                           labels={"io.kubernetes.container.name": name})
    message.linux.cgroups_path = (PARENTS[qos] % uid) + "/%s-%s" % (uid, name)
    message.linux.resources.cpu.shares.value = milli * 1024 // 1000
    message.linux.resources.cpu.period.value = 100000
    if qos == "Guaranteed":
        message.linux.resources.cpu.quota.value = milli * 100
    return message


@pytest.fixture
def plugin(tmp_path):
    view = NRIView()
    manager = NodeManager(TOPO, new_policy("static", TOPO, 1), StateStore(str(tmp_path / "state")), view,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")))
    return NRIPlugin(manager, view, io.StringIO())


def ask(plugin, method, message, reply):
    code, text, payload = plugin.handle(PLUGIN_SERVICE, method, message.SerializeToString(), 0)
    assert code == 0, text
    return getattr(PB, reply).FromString(payload)


def create(plugin, uid, name, milli, qos="Guaranteed"):
    return ask(plugin, "CreateContainer", PB.CreateContainerRequest(pod=pod(uid, qos), container=container(
        uid, name, milli, qos)), "CreateContainerResponse")


def updates(reply):
    return {u.container_id: u.linux.resources.cpu.cpus for u in reply.update}


def test_configure_subscribes_to_the_container_events_and_takes_the_timeout(plugin):
    reply = ask(plugin, "Configure", PB.ConfigureRequest(runtime_name="containerd", request_timeout=1500),
                "ConfigureResponse")
    assert reply.events == EVENTS == event_mask(4, 8, 10, 11) == 0b11010001000
    assert plugin.request_timeout == 1.5 and plugin.manager.store.lock_timeout == 0.75
    assert plugin.manager.store.hard_timeout  # the runtime waits for the answer: no longer in all


def test_create_pins_in_the_adjustment_and_shrinks_the_shared_in_the_same_reply(plugin):
    shared = create(plugin, "b", "app", 250, "Burstable")
    assert shared.adjust.linux.resources.cpu.cpus == "0-7" and updates(shared) == {}
    pinned = create(plugin, "g", "app", 2000)
    assert pinned.adjust.linux.resources.cpu.cpus == "1,5"  # a whole core, as the kubelet packs
    assert updates(pinned) == {"b-app": "0,2-4,6-7"}
    assert plugin.manager.read_state().entries == {"g": {"app": plugin.manager.read_state().get("g", "app")}}


def test_a_reply_the_runtime_dropped_is_made_good_at_the_retry(plugin):
    """The plugin saved g's entry, but its reply came after the runtime's request timeout: the runtime created
    nothing and updated nobody, so b still runs on every CPU. The kubelet's retry (a new container of the same name)
    gets g's CPUs again, and b's update comes with it."""
    create(plugin, "b", "app", 250, "Burstable")
    request = PB.CreateContainerRequest(pod=pod("g"), container=container("g", "app", 2000))
    assert plugin.handle(PLUGIN_SERVICE, "CreateContainer", request.SerializeToString(), time.monotonic() - 1) is None
    assert plugin.manager.read_state().get("g", "app") == CPUSet.parse("1,5")  # saved, its reply not sent
    plugin.view.known.pop("g-app")  # the runtime removed the half-made container
    retry = container("g", "app", 2000)
    retry.id = "g-app-retry"
    reply = ask(plugin, "CreateContainer", PB.CreateContainerRequest(pod=pod("g"), container=retry),
                "CreateContainerResponse")
    assert reply.adjust.linux.resources.cpu.cpus == "1,5"
    assert updates(reply) == {"b-app": "0,2-4,6-7"}


def test_while_the_kubelet_pins_cpus_the_plugin_adjusts_nothing_and_refuses_nothing(plugin, tmp_path):
    """A kubelet switched to the static policy under the running plugin: every container is created as the kubelet
    asked (no adjustment, no update, no refusal, nothing saved), and the log says why once; switched back, kubecpu
    decides again."""
    kubelet = tmp_path / "kubelet_state"
    plugin.manager.steps_aside = lambda: kubelet_pins(str(kubelet))
    create(plugin, "b", "app", 250, "Burstable")
    kubelet.write_bytes(checkpoint_file("0-1,3-5,7", {"k": {"db": "2,6"}}))
    before = plugin.manager.read_state()
    for uid in ("g", "h"):
        reply = create(plugin, uid, "app", 2000)
        assert reply.adjust.linux.resources.cpu.cpus == "" and updates(reply) == {}
    assert plugin.manager.read_state() == before
    said = [json.loads(line) for line in plugin.log.getvalue().splitlines()]
    assert [e["level"] for e in said if "kubelet pins CPUs" in e["msg"]] == ["warning"]
    kubelet.write_bytes(checkpoint_file("", {}, policy="none"))
    assert create(plugin, "i", "app", 2000).adjust.linux.resources.cpu.cpus == "1,5"
    assert "the kubelet no longer pins CPUs" in plugin.log.getvalue()


def test_synchronize_adopts_what_runs_in_one_or_several_parts(plugin):
    first = ask(plugin, "Synchronize", PB.SynchronizeRequest(pods=[pod("g")], containers=[container("g", "app", 1000)],
                                                             more=True), "SynchronizeResponse")
    assert first.more and list(first.update) == []
    last = ask(plugin, "Synchronize", PB.SynchronizeRequest(pods=[pod("b", "Burstable")], containers=[
        container("b", "app", 500, "Burstable")]), "SynchronizeResponse")
    assert updates(last) == {"g-app": "4", "b-app": "0-3,5-7"}  # 4: the free half of the reserved core


def test_removal_releases_and_queues_the_pool_for_the_rest(plugin):
    create(plugin, "b", "app", 250, "Burstable")
    create(plugin, "g", "app", 1000)
    ask(plugin, "StateChange", PB.StateChangeEvent(event=REMOVE_CONTAINER, pod=pod("g"),
                                                   container=container("g", "app", 1000)), "Empty")
    assert plugin.manager.read_state().entries == {}
    assert {cid: str(fields["cpus"]) for cid, fields in plugin.unsolicited.items()} == {"b-app": "0-7"}


def test_an_init_container_stops_and_its_cpus_go_to_the_app_container(plugin):
    init = create(plugin, "g", "init", 1000)
    ask(plugin, "StopContainer", PB.StopContainerRequest(pod=pod("g"), container=container("g", "init", 1000, state=4)),
        "StopContainerResponse")
    app = create(plugin, "g", "app", 1000)
    assert app.adjust.linux.resources.cpu.cpus == init.adjust.linux.resources.cpu.cpus == "4"


def test_unknown_methods_and_services_are_unimplemented(plugin):
    assert plugin.handle(PLUGIN_SERVICE, "PostStartContainer", b"", 0)[0] == 12
    assert plugin.handle("other.Service", "Configure", b"", 0)[0] == 12


def test_an_answer_past_the_deadline_is_not_sent_and_the_log_says_why(plugin):
    request = PB.CreateContainerRequest(pod=pod("g"), container=container("g", "app", 1000))
    assert plugin.handle(PLUGIN_SERVICE, "CreateContainer", request.SerializeToString(), 1e-9) is None
    said = [json.loads(line)["msg"] for line in plugin.log.getvalue().splitlines()]
    assert any("answered after the runtime's request timeout" in m for m in said)


def resize(plugin, uid, name, milli):
    resources = PB.LinuxResources()
    cpu = resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value = milli * 1024 // 1000, milli * 100, 100000
    request = PB.UpdateContainerRequest(pod=pod(uid), container=container(uid, name, 1000),
                                        linux_resources=resources)
    return plugin.handle(PLUGIN_SERVICE, "UpdateContainer", request.SerializeToString(), 0)


def test_an_in_place_resize_up_down_and_below_the_baseline(plugin):
    create(plugin, "b", "app", 250, "Burstable")
    assert create(plugin, "g", "app", 2000).adjust.linux.resources.cpu.cpus == "1,5"
    code, _text, payload = resize(plugin, "g", "app", 3000)
    assert code == 0 and updates(PB.UpdateContainerResponse.FromString(payload)) == {
        "b-app": "0,2-3,6-7", "g-app": "1,4-5"}
    code, _text, payload = resize(plugin, "g", "app", 2000)
    assert code == 0 and updates(PB.UpdateContainerResponse.FromString(payload)) == {
        "b-app": "0,2-4,6-7", "g-app": "1,5"}
    code, text, _payload = resize(plugin, "g", "app", 1000)
    assert code == 2 and text.startswith("resize refused: container ns/p-g/app asks for 1 CPUs and keeps 1,5")
    assert str(plugin.manager.read_state().get("g", "app")) == "1,5"


# --- the plugin process against a hostile runtime (issue 23): every case ended the process or hung it before -------
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import ttrpc  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import nri_peer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))))


@pytest.fixture
def process(tmp_path):
    """``bin/kubecpu nri`` connected to a scripted runtime, registered, configured and synchronized."""
    runtime = nri_peer.Runtime(str(tmp_path / "nri.sock"))
    topology = tmp_path / "topology.json"
    topology.write_text(TOPO.to_json())
    metrics = tmp_path / "metrics.prom"
    log = open(tmp_path / "plugin.log", "w")
    proc = subprocess.Popen([os.path.join(ROOT, "bin", "kubecpu"), "nri", "--socket", runtime.path, "--topology",
                             str(topology), "--state", str(tmp_path / "state"), "--num-reserved", "1",
                             "--cgroup-root", str(tmp_path / "cgroup"), "--kubelet-state", str(tmp_path / "none"),
                             "--metrics-path", str(metrics)],
                            env=dict(os.environ, KUBECPU_PYTHON=sys.executable), stdout=subprocess.DEVNULL, stderr=log)
    try:
        runtime.accept(timeout=30)  # a deadline: the plugin starts in well under a second unless the host is loaded
        runtime.metrics, runtime.log_path = metrics, tmp_path / "plugin.log"
        yield proc, runtime
    finally:  # a plugin that never connected is stopped too, not left running
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        log.close()
        runtime.close()


def alive_and_answering(proc, runtime, uid="after"):
    """The process runs, and a valid CreateContainer on the current connection gets its exclusive CPU."""
    assert proc.poll() is None
    reply = runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod(uid), container=container(uid, "c", 1000)))
    assert reply.status.code == 0, reply.status.message
    assert PB.CreateContainerResponse.FromString(reply.payload).adjust.linux.resources.cpu.cpus not in ("", "0")


def peer_errors(runtime, kind):
    text = runtime.metrics.read_text() if runtime.metrics.exists() else ""
    line = 'kubecpu_peer_errors_total{kind="%s",peer="nri"} ' % kind
    return sum(int(row[len(line):]) for row in text.splitlines() if row.startswith(line))


@pytest.mark.parametrize("cut", ["payload", "non-utf8"])
def test_a_bad_payload_is_that_requests_invalid_argument(process, cut):
    proc, runtime = process
    good = PB.CreateContainerRequest(pod=pod("p1"), container=container("p1", "c", 1000)).SerializeToString()
    raw = good[:len(good) // 2] if cut == "payload" else \
        good.replace(b"p-p1", b"p-\xff\xfe")  # the pod's name: a string field holding non-UTF-8 bytes
    reply = runtime.ask("CreateContainer", None, raw=raw)
    assert reply.status.code == ttrpc.INVALID_ARGUMENT and "cannot read this CreateContainer request" in \
        reply.status.message
    assert peer_errors(runtime, "payload") == 1
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1  # the same connection serves on


@pytest.mark.parametrize("bad", ["truncated envelope", "4 GiB frame", "4 GiB message"])
def test_a_broken_frame_or_envelope_ends_the_connection_not_the_plugin(process, bad):
    proc, runtime = process
    envelope = nri_peer.request("CreateContainer", b"")
    if bad == "truncated envelope":  # a whole ttrpc message whose envelope is cut: the payload runs past its end
        runtime.send(1, nri_peer.message(99, ttrpc.REQUEST, envelope[:len(envelope) - 3]))
    elif bad == "4 GiB frame":
        runtime.conn.sendall(struct.pack(">II", 1, 0xFFFFFFFF) + b"\0" * 64)
    else:
        runtime.send(1, struct.pack(">IIBB", 0xFFFFFFF0, 99, ttrpc.REQUEST, 0))
    before = nri_peer.rss_kib(proc.pid)
    runtime.accept()  # the plugin dropped that connection and came back
    assert nri_peer.rss_kib(proc.pid) - before < 20000  # nothing of the announced size was allocated
    alive_and_answering(proc, runtime)
    assert runtime.connections == 2


def test_half_a_frame_header_then_silence_ends_that_connection_and_sigterm_ends_the_plugin_at_once(process):
    proc, runtime = process
    runtime.conn.sendall(struct.pack(">II", 1, 100)[:5])  # five of the eight bytes, then nothing
    time.sleep(0.5)  # the plugin is now inside the frame, waiting for the rest
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0 and time.monotonic() - started < 1.0


def test_half_a_frame_then_silence_is_given_up_after_the_frame_timeout(process):
    proc, runtime = process
    runtime.conn.sendall(struct.pack(">II", 1, 100) + b"x" * 10)  # 10 of the 100 bytes it announced
    started = time.monotonic()
    runtime.accept(timeout=ttrpc.FRAME_TIMEOUT + 5)
    assert ttrpc.FRAME_TIMEOUT - 0.5 < time.monotonic() - started < ttrpc.FRAME_TIMEOUT + 3
    alive_and_answering(proc, runtime)


def test_messages_for_nobody_are_dropped_and_do_not_slow_the_next_requests(process):
    """Responses to calls the plugin never made, requests on the runtime's connection, frames on a connection the
    plugin does not use: dropped as they come. Before, each stayed in an inbox scanned on every serve."""
    proc, runtime = process
    stray = nri_peer.message(7, ttrpc.RESPONSE, ttrpc.schema().Response(payload=b"x" * 100).SerializeToString())
    junk = (nri_peer.frame(1, stray) + nri_peer.frame(2, stray)
            + nri_peer.frame(2, nri_peer.message(9, ttrpc.REQUEST, nri_peer.request("Nobody", b"")))
            + nri_peer.frame(5, b"z" * 50))
    timings = []
    for round_ in range(4):
        runtime.conn.sendall(junk * 5000)
        started = time.monotonic()
        alive_and_answering(proc, runtime, uid="r%d" % round_)
        timings.append(time.monotonic() - started)
    assert max(timings[1:]) < 3 * timings[0] + 0.5, timings  # flat, not growing with the junk behind it


def test_a_slow_answer_to_update_containers_keeps_the_connection_and_the_requests_are_served_meanwhile(process):
    """A removal gives the shared containers their CPUs back in one UpdateContainers, which the runtime answers after
    applying every update: at 250 containers that took longer than the request timeout the runtime configured (2 s
    here), and the plugin gave up on the connection and reconnected. The call has its own timeout
    (UPDATE_CONTAINERS_TIMEOUT): while it waits the plugin answers the runtime's requests, and the late answer is
    taken on the same connection."""
    proc, runtime = process
    for uid, milli, qos in (("b", 250, "Burstable"), ("g", 1000, "Guaranteed")):
        runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod(uid, qos), container=container(
            uid, "app", milli, qos)))
    removed = runtime.ask("StateChange", PB.StateChangeEvent(
        event=REMOVE_CONTAINER, pod=pod("g"), container=container("g", "app", 1000)))
    assert removed.status.code == 0, removed.status.message
    stream, _kind, envelope = runtime.read_message(2)  # the plugin's call on the runtime's connection
    call = ttrpc.schema().Request.FromString(envelope)
    assert call.method == "UpdateContainers" and call.timeout_nano == int(UPDATE_CONTAINERS_TIMEOUT * 1e9)
    assert updates(PB.UpdateContainersRequest.FromString(call.payload)) == {"b-app": "0-7"}
    started, served = time.monotonic(), 0
    while time.monotonic() - started < 2.5:  # past the configured request timeout, serving requests all along
        uid = "meanwhile%d" % served
        reply = runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod(uid, "Burstable"), container=container(
            uid, "app", 100, "Burstable")))
        assert reply.status.code == 0, reply.status.message
        served += 1
    runtime.send(2, nri_peer.message(stream, ttrpc.RESPONSE, ttrpc.schema().Response(
        payload=PB.UpdateContainersResponse().SerializeToString()).SerializeToString()))
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1 and served > 0
    assert "no answer within" not in runtime.log_path.read_text()


def test_interrupts_move_after_the_reply_not_before_it(tmp_path):
    """With irq isolation the CreateContainer reply does not wait for /proc/irq: the plugin moves the interrupts once
    its replies are sent, under the state lock, and counts them in its metrics."""
    irq = proc_irq(tmp_path / "machine" / "proc" / "irq", {24: "0-7"})
    view = NRIView()
    manager = NodeManager(TOPO, new_policy("static", TOPO, 1), StateStore(str(tmp_path / "state")), view,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), options=ManagerOptions(irq_isolation="exclusive"),
                          sysfs_root=str(tmp_path / "machine"))
    served = NRIPlugin(manager, view, io.StringIO())
    reply = create(served, "u1", "app", 2000)
    held = reply.adjust.linux.resources.cpu.cpus
    assert held and affinity(irq, 24) == "0-7" and manager.irq.pending is not None  # not yet
    served._after_replies()
    assert CPUSet.parse(affinity(irq, 24)) == CPUSet.parse("0-7").difference(CPUSet.parse(held))
    assert manager.irq.pending is None
    assert served.metrics.counters[("kubecpu_irq_affinity_updates_total", ())] == 2  # the interrupt and the default


def outstanding_update_containers(runtime):
    """b shares the pool, g's exclusive CPU is given back at its removal: the plugin's UpdateContainers (b to every
    CPU), not yet answered; its stream and its updates."""
    for uid, milli, qos in (("b", 250, "Burstable"), ("g", 1000, "Guaranteed")):
        runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod(uid, qos), container=container(
            uid, "app", milli, qos)))
    runtime.ask("StateChange", PB.StateChangeEvent(event=REMOVE_CONTAINER, pod=pod("g"),
                                                   container=container("g", "app", 1000)))
    stream, _kind, envelope = runtime.read_message(2)
    call = ttrpc.schema().Request.FromString(envelope)
    assert call.method == "UpdateContainers"
    return stream, updates(PB.UpdateContainersRequest.FromString(call.payload))


def answer(runtime, stream, payload=b"", code=0):
    response = ttrpc.schema().Response(payload=payload)
    if code:
        response.status.code, response.status.message = code, "scripted failure"
    runtime.send(2, nri_peer.message(stream, ttrpc.RESPONSE, response.SerializeToString()))


def test_a_cpuset_given_while_update_containers_waits_is_sent_again_after_it(process):
    """containerd applies a plugin's UpdateContainers under the lock its CreateContainer holds while it waits for the
    plugin's reply (containerd/nri pkg/adaptation, updateContainers): a creation that shrinks the pool meanwhile has
    its reply's update of b applied first, and the older UpdateContainers (b to every CPU, the new exclusive CPUs
    too) last. The plugin sends b's newer cpuset again once the call is answered, so b does not keep CPUs given
    exclusively."""
    proc, runtime = process
    stream, sent = outstanding_update_containers(runtime)
    assert sent == {"b-app": "0-7"}
    reply = runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod("h"), container=container(
        "h", "app", 2000)))
    created = PB.CreateContainerResponse.FromString(reply.payload)
    assert created.adjust.linux.resources.cpu.cpus == "1,5" and updates(created) == {"b-app": "0,2-4,6-7"}
    answer(runtime, stream, PB.UpdateContainersResponse().SerializeToString())  # applied after the reply's update
    runtime.conn.settimeout(5)
    _stream, _kind, envelope = runtime.read_message(2)
    again = ttrpc.schema().Request.FromString(envelope)
    assert again.method == "UpdateContainers"
    assert updates(PB.UpdateContainersRequest.FromString(again.payload)) == {"b-app": "0,2-4,6-7"}
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1


@pytest.mark.parametrize("fault", ["error status", "unreadable payload"])
def test_a_failed_or_unreadable_answer_to_update_containers_is_that_calls_failure_not_the_connections(process, fault):
    """The runtime answers UpdateContainers with an error status, or with a payload that is not an
    UpdateContainersResponse: the updates are taken as not applied (the next pass reads those cgroups again) and the
    plugin serves on the same connection; it does not register again."""
    proc, runtime = process
    stream, sent = outstanding_update_containers(runtime)
    assert sent == {"b-app": "0-7"}
    if fault == "error status":
        answer(runtime, stream, code=ttrpc.INTERNAL)
    else:
        answer(runtime, stream, b"\x0a\x05ab")  # field 1 (failed) announcing 5 bytes, 2 there
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1
    assert "the updates of 1 container(s) are checked again" in runtime.log_path.read_text()


def test_a_late_duplicate_or_unknown_answer_to_update_containers_is_dropped(process):
    """Answers for streams the plugin does not wait on (the call's own answer twice, a stream it never used) and an
    answer whose failed entries name containers the plugin never asked about: dropped or ignored, the connection
    and the next requests served as before."""
    proc, runtime = process
    stream, _sent = outstanding_update_containers(runtime)
    failed = PB.UpdateContainersResponse(failed=[PB.ContainerUpdate(container_id="nobody")]).SerializeToString()
    answer(runtime, stream, failed)
    answer(runtime, stream, failed)  # the same stream again: nobody waits on it now
    answer(runtime, stream + 1000, failed)
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1 and proc.poll() is None
    assert "could not update container nobody" in runtime.log_path.read_text()


def test_an_update_queued_while_update_containers_waits_goes_with_the_cpuset_a_later_reply_gave(process):
    """While the first UpdateContainers waits, g2's removal queues the next one (b and c to every CPU) and h's
    creation then shrinks the pool in its reply. containerd applies the reply first (its lock), so the queued update
    must not carry the older pool: b and c are sent the pool h's reply gave them."""
    proc, runtime = process
    runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod("g2"), container=container("g2", "app", 1000)))
    stream, sent = outstanding_update_containers(runtime)
    assert sent == {"b-app": "0-3,5-7"}  # g2 keeps CPU 4
    runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod("c", "Burstable"), container=container(
        "c", "app", 100, "Burstable")))
    runtime.ask("StateChange", PB.StateChangeEvent(event=REMOVE_CONTAINER, pod=pod("g2"),
                                                   container=container("g2", "app", 1000)))
    reply = runtime.ask("CreateContainer", PB.CreateContainerRequest(pod=pod("h"), container=container(
        "h", "app", 2000)))
    assert updates(PB.CreateContainerResponse.FromString(reply.payload)) == {"b-app": "0,2-4,6-7",
                                                                             "c-app": "0,2-4,6-7"}
    answer(runtime, stream, PB.UpdateContainersResponse().SerializeToString())
    runtime.conn.settimeout(5)
    _stream, _kind, envelope = runtime.read_message(2)
    again = ttrpc.schema().Request.FromString(envelope)
    assert updates(PB.UpdateContainersRequest.FromString(again.payload)) == {"b-app": "0,2-4,6-7",
                                                                             "c-app": "0,2-4,6-7"}
    alive_and_answering(proc, runtime)
    assert runtime.connections == 1


def test_a_runtime_that_stops_reading_the_replies_loses_the_connection_after_the_frame_timeout(process):
    """The runtime sends requests and never reads what the plugin answers: once the socket's buffer is full a reply
    cannot go. The plugin gives that connection up after FRAME_TIMEOUT (before, it retried the send in a busy loop,
    a whole CPU, for as long as the runtime kept the socket open) and comes back."""
    proc, runtime = process
    junk = nri_peer.frame(1, nri_peer.message(1, ttrpc.REQUEST, nri_peer.request("Nobody", b"x" * 200)))
    runtime.conn.settimeout(1)
    try:
        for _reply in range(20000):  # far more replies than a Unix socket buffers
            runtime.conn.sendall(junk)
    except socket.timeout:  # the plugin stopped reading too: it is stuck on a reply
        pass
    started = time.monotonic()
    runtime.accept(timeout=ttrpc.FRAME_TIMEOUT + 5)
    assert time.monotonic() - started < ttrpc.FRAME_TIMEOUT + 3
    alive_and_answering(proc, runtime)
    assert runtime.connections == 2
