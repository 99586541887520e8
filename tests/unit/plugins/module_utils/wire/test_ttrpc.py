"""ttrpc over NRI's multiplexed socket, byte for byte: frames (connection ID, length), ttrpc headers (length, stream,
type, flags), requests served on connection 1, calls made on connection 2 and matched by stream ID, messages split
over frames, and a late answer not sent at all."""

from __future__ import annotations

import errno
import socket
import threading
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (RuntimeRefusedError,
                                                                                 RuntimeTimeoutError,
                                                                                 RuntimeUnavailableError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import ttrpc

PB = ttrpc.schema()


@pytest.fixture
def pair():
    plugin_side, runtime_side = socket.socketpair()
    channel = ttrpc.Channel(plugin_side)
    yield channel, runtime_side
    channel.close()
    runtime_side.close()


def frame(conn, stream, kind, payload):
    message = struct.pack(">IIBB", len(payload), stream, kind, 0) + payload
    return struct.pack(">II", conn, len(message)) + message


def read_frame(sock):
    conn, length = struct.unpack(">II", sock.recv(8, socket.MSG_WAITALL))
    body = sock.recv(length, socket.MSG_WAITALL)
    size, stream, kind, flags = struct.unpack(">IIBB", body[:10])
    assert size == len(body) - 10 and flags == 0
    return conn, stream, kind, body[10:]


def request(method, payload=b"", timeout=2.0):
    return PB.Request(service="nri.pkg.api.v1alpha1.Plugin", method=method, payload=payload,
                      timeout_nano=int(timeout * 1e9)).SerializeToString()


def test_a_request_on_connection_one_is_answered_on_its_stream(pair):
    channel, runtime = pair
    runtime.sendall(frame(1, 7, 1, request("Configure", b"\x0a\x01x")))
    seen = []
    assert channel.serve(lambda service, method, payload, deadline: seen.append((service, method, payload)) or (
        0, "", b"\x10\x08"), timeout=2)
    assert seen == [("nri.pkg.api.v1alpha1.Plugin", "Configure", b"\x0a\x01x")]
    conn, stream, kind, body = read_frame(runtime)
    response = PB.Response.FromString(body)
    assert (conn, stream, kind, response.payload, response.status.code) == (1, 7, 2, b"\x10\x08", 0)


def test_a_message_split_over_frames_and_two_in_one(pair):
    channel, runtime = pair
    whole = frame(1, 1, 1, request("A"))[8:] + frame(1, 3, 1, request("B"))[8:]
    runtime.sendall(struct.pack(">II", 1, 5) + whole[:5] + struct.pack(">II", 1, len(whole) - 5) + whole[5:])
    methods = []
    while len(methods) < 2:
        channel.serve(lambda s, method, p, d: methods.append(method) or (0, "", b""), timeout=2)
    assert methods == ["A", "B"]


def test_an_error_is_a_status_and_a_late_answer_is_not_sent(pair):
    channel, runtime = pair
    runtime.sendall(frame(1, 1, 1, request("Nope")) + frame(1, 3, 1, request("Slow", timeout=0.001)))
    time.sleep(0.01)

    def handler(service, method, payload, deadline):
        if method == "Nope":
            return ttrpc.UNIMPLEMENTED, "not handled", b""
        return None  # past the deadline: nothing goes back

    channel.serve(handler, timeout=2)
    channel.serve_pending(handler)
    conn, stream, kind, body = read_frame(runtime)
    status = PB.Response.FromString(body).status
    assert (stream, status.code, status.message) == (1, 12, "not handled")
    runtime.settimeout(0.2)
    with pytest.raises(socket.timeout):
        runtime.recv(1)


def test_a_call_on_connection_two_serves_requests_until_its_response(pair):
    channel, runtime = pair
    served = []
    runtime.sendall(frame(1, 1, 1, request("Configure")))  # the runtime asks first
    response = PB.Response(payload=b"ok").SerializeToString()

    def handler(service, method, payload, deadline):
        served.append(method)
        runtime.sendall(frame(2, 1, 2, response))  # then answers the plugin's call
        return 0, "", b""

    assert channel.call("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x0a\x01k", 2.0, handler) == b"ok"
    assert served == ["Configure"]
    conn, stream, kind, body = read_frame(runtime)  # the call went out first, on connection 2, stream 1
    sent = PB.Request.FromString(body)
    assert (conn, stream, kind, sent.method, sent.payload) == (2, 1, 1, "RegisterPlugin", b"\x0a\x01k")
    assert channel.next_stream == 3


def test_a_call_without_an_answer_times_out_and_a_refusal_is_an_error(pair):
    channel, runtime = pair
    with pytest.raises(RuntimeTimeoutError, match=r"RegisterPlugin: no answer within 0\.1s"):
        channel.call("svc", "RegisterPlugin", b"", 0.1, lambda *a: None)
    refusal = PB.Response()
    refusal.status.code, refusal.status.message = 9, "already registered"
    runtime.sendall(frame(2, 3, 2, refusal.SerializeToString()))
    with pytest.raises(RuntimeRefusedError, match="already registered"):  # that call's failure, not the link's
        channel.call("svc", "RegisterPlugin", b"", 2.0, lambda *a: None)


def test_the_runtime_going_away_is_unavailable(pair, tmp_path):
    channel, runtime = pair
    runtime.close()
    with pytest.raises(RuntimeUnavailableError, match="closed the NRI connection"):
        channel.serve(lambda *a: None, timeout=1)
    with pytest.raises(RuntimeUnavailableError, match="cannot connect to the NRI socket"):
        ttrpc.Channel.connect(str(tmp_path / "none.sock"), 1.0)


# --- a hostile runtime (issue 23) --------------------------------------------------------------------------------
def test_a_frame_over_the_limit_breaks_the_connection_before_it_is_read(pair):
    channel, runtime = pair
    runtime.sendall(struct.pack(">II", 1, 0xFFFFFFFF) + b"\0" * 1024)
    started = time.monotonic()
    with pytest.raises(ttrpc.ConnectionBroken, match="NRI frame of 4294967295 bytes over the limit of 4194314"):
        channel.serve(lambda *a: None, timeout=1)
    assert time.monotonic() - started < 0.5


def test_a_frame_that_stops_half_way_breaks_the_connection_after_the_frame_timeout(pair, monkeypatch):
    monkeypatch.setattr(ttrpc, "FRAME_TIMEOUT", 0.3)
    channel, runtime = pair
    runtime.sendall(struct.pack(">II", 1, 100)[:5])
    started = time.monotonic()
    with pytest.raises(ttrpc.ConnectionBroken, match=r"sent 5 of the 8 bytes and nothing more for 0\.3s"):
        channel.serve(lambda *a: None, timeout=1)
    assert 0.25 < time.monotonic() - started < 1.0


def test_closing_from_a_signal_handler_ends_any_wait_within_the_poll(pair):
    channel, _runtime = pair
    threading.Timer(0.1, lambda: setattr(channel, "closed", True)).start()  # what the plugin's SIGTERM handler does
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailableError, match="closed"):
        channel.serve(lambda *a: None, timeout=None)  # would wait for ever
    assert time.monotonic() - started < 0.1 + ttrpc.POLL + 0.1


def test_a_request_envelope_that_is_not_one_breaks_the_connection(pair):
    channel, runtime = pair
    runtime.sendall(frame(1, 1, 1, request("Configure", b"\x0a\x05abc")[:-4]))
    with pytest.raises(ttrpc.ConnectionBroken, match="envelope that is not one"):
        channel.serve(lambda *a: (0, "", b""), timeout=1)


def test_messages_nobody_waits_for_are_dropped_as_they_come(pair):
    channel, runtime = pair
    stray = frame(1, 5, 2, b"") + frame(2, 7, 2, b"") + frame(2, 9, 1, request("X")) + struct.pack(">II", 9, 3) + b"abc"
    runtime.sendall(stray * 1000 + frame(1, 11, 1, request("Real")))
    served = []
    while not served:
        channel.serve(lambda s, method, p, d: served.append(method) or (0, "", b""), timeout=2)
    assert served == ["Real"] and channel.dropped == 4000
    assert not channel.requests and channel.responses == {} and channel.waiting == set()


# --- what the runtime's Go side reads (peers benchmark, issue 65) -----------------------------------------------
class GoReader:
    """A message as containerd and CRI-O read it: NRI's multiplexer hands each frame whole to one Read of the logical
    connection and fails it with ENOMEM when the caller's buffer is smaller (containerd/nri pkg/net/multiplex,
    conn.Read); ttrpc reads a message's 10-byte header through a 4 KiB bufio.Reader and its body with io.ReadFull
    into a buffer of the body's size (bufio reads straight into a buffer at least as large as its own)."""

    BUFIO = 4096

    def __init__(self, frames):
        self.frames, self.buffered = list(frames), b""

    def _conn_read(self, room):
        got = self.frames.pop(0)
        if len(got) > room:
            raise OSError(errno.ENOMEM, "a frame of %d bytes read into %d" % (len(got), room))
        return got

    def _read(self, want):  # bufio.Reader.Read(p), len(p) == cap(p) == want
        if not self.buffered:
            if want >= self.BUFIO:
                return self._conn_read(want)
            self.buffered = self._conn_read(self.BUFIO)
        got, self.buffered = self.buffered[:want], self.buffered[want:]
        return got

    def read_full(self, count):
        out = b""
        while len(out) < count:
            out += self._read(count - len(out))
        return out

    def message(self):
        size, stream, kind, _flags = struct.unpack(">IIBB", self.read_full(10))
        return stream, kind, self.read_full(size)


def answered_frames(channel, runtime, reply):
    """The frames (connection 1's payloads) of the channel's answer ``reply`` to one request, as the runtime gets
    them (read beside the answer: a large one does not fit the socket's buffer)."""
    runtime.sendall(frame(1, 3, 1, request("CreateContainer")))
    answering = threading.Thread(target=channel.serve, args=(lambda *a: (0, "", reply),), kwargs={"timeout": 5})
    answering.start()
    whole = len(PB.Response(payload=reply).SerializeToString()) + 10
    frames, got = [], 0
    while got < whole:
        conn, length = struct.unpack(">II", runtime.recv(8, socket.MSG_WAITALL))
        frames.append(runtime.recv(length, socket.MSG_WAITALL))
        assert conn == 1
        got += length
    answering.join()
    return frames


@pytest.mark.parametrize("size", [0, 4000, 4076, 4077, 4078, 19265, 1 << 20])
def test_a_reply_over_4_kib_is_read_whole_by_the_runtime_that_dropped_the_plugin_at_19_kb(pair, size):
    """containerd 2.4.2 closed kubecpu's NRI connection at a 19,265-byte CreateContainer reply (a Guaranteed container
    beside 250 shared ones, each updated in the reply) and created the container unpinned: the whole message went as
    one frame, over the 4 KiB its ttrpc reads a header with. The answer now comes as Go's ttrpc writes it, a first
    frame of at most 4,096 bytes and the rest in one: the runtime's reader takes every size whole."""
    channel, runtime = pair
    reply = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    frames = answered_frames(channel, runtime, reply)
    assert len(frames[0]) <= 4096 and len(frames) <= 2
    stream, kind, body = GoReader(frames).message()
    assert (stream, kind, PB.Response.FromString(body).payload) == (3, 2, reply)


def test_the_runtimes_reader_refuses_a_first_frame_over_4_kib_as_containerd_did():
    """The model above is the runtime's: one frame holding a whole 19 KB message fails it (what kubecpu sent before)."""
    message = struct.pack(">IIBB", 19265, 3, 2, 0) + b"x" * 19265
    with pytest.raises(OSError, match="a frame of 19275 bytes read into 4096"):
        GoReader([message]).message()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40000), min_size=1, max_size=4))
def test_any_messages_the_channel_sends_are_read_whole_by_the_runtime(sizes):
    """Property: whatever the sizes of the messages sent one after another, the runtime's reader gets each whole."""
    plugin_side, runtime_side = socket.socketpair()
    channel = ttrpc.Channel(plugin_side)
    try:
        frames = []
        for size in sizes:
            frames += answered_frames(channel, runtime_side, b"y" * size)
        reader = GoReader(frames)
        for size in sizes:
            _stream, kind, body = reader.message()
            assert kind == 2 and PB.Response.FromString(body).payload == b"y" * size
        assert not reader.frames and not reader.buffered
    finally:
        channel.close()
        runtime_side.close()
