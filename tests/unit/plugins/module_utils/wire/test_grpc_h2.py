"""gRPC over HTTP/2 with the standard library: against grpcio's own server (the C core, an independent
implementation) for calls, streams, statuses, deadlines, flow control and reconnection; against a scripted HTTP/2
peer for the frames a server may send that grpcio's does not on demand (GOAWAY, RST_STREAM, PING, padding,
CONTINUATION, an HTTP error, a missing trailer). The real containerd is the integration tests'."""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent import futures

import grpc
import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import RpcStatus
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import grpc_h2, hpack
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import h2_peer

SERVICE = "test.Echo"


def _handlers(sleep):
    def echo(request, context):
        if request.startswith(b"fail:"):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, request[5:].decode())
        if request == b"sleep":
            time.sleep(sleep)
        if request.startswith(b"big:"):
            return b"x" * int(request[4:])
        return b"echo " + request

    def many(request, context):
        for n in range(int(request)):
            yield b"%d" % n

    methods = {"Echo": grpc.unary_unary_rpc_method_handler(echo),
               "Many": grpc.unary_stream_rpc_method_handler(many)}
    return grpc.method_handlers_generic_handler(SERVICE, methods)


class Server:
    def __init__(self, path, sleep=1.0):
        self.path = path
        self.sleep = sleep
        self.running = None

    def start(self):
        self.running = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[_handlers(self.sleep)])
        self.running.add_insecure_port("unix://" + self.path)
        self.running.start()

    def stop(self):
        self.running.stop(0).wait()


@pytest.fixture
def server(tmp_path):
    running = Server(str(tmp_path / "grpc.sock"))
    running.start()
    yield running
    running.stop()


@pytest.fixture
def connection(server):
    conn = grpc_h2.Connection("unix://" + server.path)
    yield conn
    conn.close()


def test_unary_calls_share_one_connection(connection):
    assert connection.unary("/test.Echo/Echo", b"one", 2.0) == b"echo one"
    first = connection.sock
    assert connection.unary("/test.Echo/Echo", b"", 2.0) == b"echo "
    assert connection.sock is first and connection.next_stream == 5


def test_a_stream_yields_every_message_in_order(connection):
    assert list(connection.stream("/test.Echo/Many", b"50")) == [b"%d" % n for n in range(50)]
    assert list(connection.stream("/test.Echo/Many", b"0")) == []


def test_statuses_keep_their_name_and_their_decoded_message(connection):
    with pytest.raises(RpcStatus) as raised:
        connection.unary("/test.Echo/Echo", "fail:100% wrong: ünïcode\nline".encode(), 2.0)
    assert (raised.value.code, raised.value.details) == ("FAILED_PRECONDITION", "100% wrong: ünïcode\nline")
    with pytest.raises(RpcStatus) as raised:
        connection.unary("/test.Echo/Nope", b"", 2.0)
    assert raised.value.code == "UNIMPLEMENTED"
    assert connection.unary("/test.Echo/Echo", b"after", 2.0) == b"echo after"  # the connection stays


def test_answers_larger_than_the_window_flow(connection, monkeypatch):
    monkeypatch.setattr(grpc_h2, "WINDOW", 70000)  # replenished every 35,000 bytes, per stream and connection
    connection.close()
    assert len(connection.unary("/test.Echo/Echo", b"big:1000000", 10.0)) == 1000000
    assert len(connection.unary("/test.Echo/Echo", b"big:300000", 10.0)) == 300000


def test_a_deadline_is_deadline_exceeded_and_the_next_call_reconnects(connection):
    started = time.monotonic()
    with pytest.raises(RpcStatus) as raised:
        connection.unary("/test.Echo/Echo", b"sleep", 0.2)
    assert raised.value.code == "DEADLINE_EXCEEDED" and time.monotonic() - started < 0.9
    # the client's own deadline drops the connection; the server's (grpc-timeout) may answer first and keep it
    assert connection.unary("/test.Echo/Echo", b"again", 2.0) == b"echo again"


def test_a_restarted_server_is_reached_again_by_the_next_call(server, connection):
    assert connection.unary("/test.Echo/Echo", b"before", 2.0) == b"echo before"
    server.stop()
    server.start()
    assert connection.unary("/test.Echo/Echo", b"after", 2.0, idempotent=True) == b"echo after"


def test_no_server_is_unavailable_and_names_the_socket(tmp_path):
    conn = grpc_h2.Connection("unix://" + str(tmp_path / "none.sock"))
    with pytest.raises(RpcStatus) as raised:
        conn.unary("/test.Echo/Echo", b"", 0.5)
    assert raised.value.code == "UNAVAILABLE"
    assert raised.value.details == "connection error: unix://%s: no such file or directory" % (tmp_path / "none.sock")


def test_closing_wakes_a_reader_in_another_thread(connection, server):
    server.sleep = 5.0
    seen = []

    def read():
        try:
            connection.unary("/test.Echo/Echo", b"sleep", None)
        except RpcStatus as exc:
            seen.append(exc.code)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)
    connection.close()
    reader.join(timeout=2)
    assert not reader.is_alive() and seen == ["UNAVAILABLE"]


@pytest.mark.parametrize("endpoint, want", [
    ("unix:///run/containerd/containerd.sock", (socket.AF_UNIX, "/run/containerd/containerd.sock")),
    ("/run/crio/crio.sock", (socket.AF_UNIX, "/run/crio/crio.sock")),
    ("unix:relative.sock", (socket.AF_UNIX, "relative.sock")),
    ("127.0.0.1:10010", (socket.AF_INET, ("127.0.0.1", 10010))),
    ("dns:///localhost:10010", (socket.AF_INET, ("localhost", 10010))),
    ("tcp://[::1]:10010", (socket.AF_INET6, ("::1", 10010))),
])
def test_endpoints(endpoint, want):
    assert grpc_h2.address(endpoint) == want


@pytest.mark.parametrize("endpoint", ["localhost", "http://x", "host:port"])
def test_endpoints_that_are_neither_are_unavailable(endpoint):
    with pytest.raises(RpcStatus, match="neither unix:///path nor host:port"):
        grpc_h2.address(endpoint)


# A scripted HTTP/2 peer: after the prefaces it reads one call, then sends the frames it is given (none: it closes).
def _scripted(script):
    def behave(link):
        link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
        link.send(*script)
        if script:
            link.until(255)  # reads on until the client goes

    return behave


@pytest.fixture
def peer(tmp_path):
    made = []

    def start(*script):
        path = str(tmp_path / ("peer%d.sock" % len(made)))
        made.append((h2_peer.Server(path, _scripted(script)), grpc_h2.Connection(path)))
        return made[-1][1], made[-1][0]

    yield start
    for running, conn in made:
        conn.close()
        running.close()


def test_settings_and_pings_are_acknowledged_and_padding_and_continuations_read(peer):
    block = hpack.encode(h2_peer.OK_HEADERS)
    padded = bytes([3]) + h2_peer.message(b"hello") + b"\0\0\0"
    conn, server = peer(
        grpc_h2.frame(grpc_h2.SETTINGS, 0, 0, struct.pack(">HI", grpc_h2.SETTINGS_MAX_FRAME_SIZE, 32768)),
        grpc_h2.frame(grpc_h2.PING, 0, 0, b"12345678"),
        grpc_h2.frame(grpc_h2.HEADERS, 0, 1, block[:5]),
        grpc_h2.frame(grpc_h2.CONTINUATION, grpc_h2.END_HEADERS, 1, block[5:]),
        grpc_h2.frame(grpc_h2.DATA, grpc_h2.PADDED, 1, padded),
        h2_peer.headers(1, h2_peer.TRAILERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM))
    assert conn.unary("/x/Y", b"", 2.0) == b"hello"
    assert conn.max_frame == 32768
    conn.close()

    def acks():
        return [(kind, payload) for kind, flags, _sid, payload in list(server.links[0].frames)
                if flags & grpc_h2.ACK and kind != grpc_h2.DATA]

    deadline = time.monotonic() + 5
    while len(acks()) < 3 and time.monotonic() < deadline:  # the server reads what the client sent to the end
        time.sleep(0.01)
    assert acks() == [(grpc_h2.SETTINGS, b""), (grpc_h2.SETTINGS, b""), (grpc_h2.PING, b"12345678")]  # preface's too


@pytest.mark.parametrize("script, code, details", [
    ([grpc_h2.frame(grpc_h2.GOAWAY, 0, 0, struct.pack(">II", 0, 0))], "UNAVAILABLE", "going away"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x7))], "UNAVAILABLE", "HTTP/2 error 7"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x8))], "CANCELLED", "HTTP/2 error 8"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x2))], "INTERNAL", "HTTP/2 error 2"),
    ([h2_peer.headers(1, [(":status", "503")], grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "UNAVAILABLE",
     "unexpected HTTP status code 503"),
    ([h2_peer.headers(1, h2_peer.OK_HEADERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "INTERNAL", "no grpc-status"),
    ([h2_peer.headers(1, h2_peer.OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, grpc_h2.END_STREAM, 1, h2_peer.message(b"x"))], "INTERNAL",
     "without trailers"),
    ([h2_peer.headers(1, h2_peer.OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, 0, 1, b"\x01" + h2_peer.message(b"x")[1:])], "INTERNAL",
     "compressed"),
    ([h2_peer.headers(1, h2_peer.OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, 0, 1, h2_peer.message(b"xyz")[:6]),
      h2_peer.headers(1, h2_peer.TRAILERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "INTERNAL", "inside a message"),
    ([h2_peer.headers(1, h2_peer.OK_HEADERS),
      h2_peer.headers(1, [("grpc-status", "99"), ("grpc-message", "odd%20one")], grpc_h2.END_HEADERS | grpc_h2.END_STREAM)],
     "UNKNOWN", "odd one"),
    ([grpc_h2.frame(grpc_h2.PUSH_PROMISE, 0, 1, b"\0\0\0\2")], "INTERNAL", "unexpected frame type 5"),
    ([], "UNAVAILABLE", "closed the connection"),
])
def test_what_a_server_may_send_becomes_grpcs_status(peer, script, code, details):
    conn, _server = peer(*script)
    with pytest.raises(RpcStatus) as raised:
        list(conn.stream("/x/Y", b"", 2.0))
    assert raised.value.code == code and details in raised.value.details


# --- a hostile server (issue 23): each case failed before the limits and checks it now meets ---------------------
@pytest.fixture
def hostile(tmp_path):
    made = []

    def start(behave, settings=b"", **handshake):
        path = str(tmp_path / ("hostile%d.sock" % len(made)))
        made.append((h2_peer.Server(path, behave, settings, **handshake), grpc_h2.Connection(path)))
        return made[-1][1], made[-1][0]

    yield start
    for server, conn in made:
        conn.close()
        server.close()


@pytest.mark.parametrize("timeout", [2.0, None])  # a call and the event stream (no deadline)
def test_a_length_prefix_over_the_maximum_is_refused_before_its_bytes(hostile, timeout):
    def behave(link):
        _sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
        link.send(h2_peer.headers(1, h2_peer.OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, 0, 1, struct.pack(">BI", 0, 0xFFFFFFFF)))
        link.flood(lambda: grpc_h2.frame(grpc_h2.DATA, 0, 1, bytes(16384)))  # the 4 GiB it announced

    conn, server = hostile(behave)
    started = time.monotonic()
    with pytest.raises(RpcStatus) as raised:
        list(conn.stream("/x/Y", b"", timeout))
    assert raised.value.code == "RESOURCE_EXHAUSTED" and "larger than max (4294967295 vs. %d)" % grpc_h2.MAX_MESSAGE \
        in raised.value.details
    assert time.monotonic() - started < 1.0 and conn.sock is None  # at once, and the connection dropped
    server.close()
    assert server.links[0].sent < 8 << 20  # the flood stopped at the socket buffers: nothing read or kept


def test_a_continuation_flood_ends_at_the_header_block_limit(hostile):
    def behave(link):
        link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
        link.send(grpc_h2.frame(grpc_h2.HEADERS, 0, 1, hpack.encode(h2_peer.OK_HEADERS)))
        link.flood(lambda: grpc_h2.frame(grpc_h2.CONTINUATION, 0, 1, b"\x00\x01a\x01b" * 3000))

    conn, server = hostile(behave)
    started = time.monotonic()
    with pytest.raises(RpcStatus) as raised:
        conn.unary("/x/Y", b"", 10.0)
    assert raised.value.code == "INTERNAL" and "a header block over 65536 bytes" in raised.value.details
    assert time.monotonic() - started < 1.0
    server.close()
    assert server.links[0].sent < 8 << 20


@pytest.mark.parametrize("status", ["²", "１", "-1", "1e3", "", "0x1", "99999999999999999999"])
def test_a_grpc_status_that_is_not_a_number_is_unknown(hostile, status):
    def behave(link):
        link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
        trailers = [("grpc-status", status), ("grpc-message", "%zz%ff")]
        link.send(h2_peer.headers(1, h2_peer.OK_HEADERS),
                  h2_peer.headers(1, trailers, grpc_h2.END_HEADERS | grpc_h2.END_STREAM))
        link.until(255)  # read until the client goes

    conn, _server = hostile(behave)
    with pytest.raises(RpcStatus) as raised:
        conn.unary("/x/Y", b"", 2.0)
    assert raised.value.code == "UNKNOWN" and raised.value.details == "%zz\ufffd"


def _credit_server(step, lowered=None, initial=0):
    """A server that grants flow control ``step`` bytes at a time and records whether the client ever sent more than
    it was granted (RFC 9113 6.9): a new stream's window is ``initial``. With ``lowered``, it lowers
    SETTINGS_INITIAL_WINDOW_SIZE to that after the first call. Each call is answered with the request echoed."""
    violations = []

    def behave(link):
        window = {"conn": grpc_h2.DEFAULT_WINDOW}
        nonlocal initial
        for call in (1, 3):
            kind, _flags, sid, _payload = link.until(grpc_h2.HEADERS)
            window[sid], body = initial, b""
            while True:
                if window[sid] <= 0:
                    link.send(grpc_h2.frame(grpc_h2.WINDOW_UPDATE, 0, sid, struct.pack(">I", step)))
                    window[sid] += step
                kind, flags, got_sid, payload = link.frame()
                if kind != grpc_h2.DATA:
                    continue
                window[sid] -= len(payload)
                window["conn"] -= len(payload)
                if window[sid] < 0 or window["conn"] < 0:
                    violations.append((sid, window[sid], window["conn"]))
                body += payload
                if flags & grpc_h2.END_STREAM:
                    break
            link.send(grpc_h2.frame(grpc_h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", len(body))))
            window["conn"] += len(body)
            h2_peer.answer(link, sid, body[5:])
            if call == 1 and lowered is not None:
                link.send(grpc_h2.frame(grpc_h2.SETTINGS, 0, 0, struct.pack(">HI", grpc_h2.SETTINGS_INITIAL_WINDOW_SIZE,
                                                                            lowered)))
                initial = lowered
        link.until(255)

    return behave, violations


@pytest.mark.parametrize("lowered", [None, 7])
def test_the_client_sends_only_what_the_server_grants(hostile, lowered):
    behave, violations = _credit_server(10, lowered)
    settings = struct.pack(">HI", grpc_h2.SETTINGS_INITIAL_WINDOW_SIZE, 0)  # no window at all until a WINDOW_UPDATE
    conn, _server = hostile(behave, settings)
    assert conn.unary("/x/Y", b"a" * 95, 5.0) == b"a" * 95
    assert conn.unary("/x/Y", b"b" * 40, 5.0) == b"b" * 40
    assert violations == []


def _lowered_window(h2, when):
    """An h2 server's window lowered to 100 bytes: in its preface, in a second SETTINGS right after it, or only once
    the client's preface has come in (then what is returned does it)."""
    h2_settings = pytest.importorskip("h2.settings")
    lowered = {h2_settings.SettingCodes.INITIAL_WINDOW_SIZE: 100}
    if when == "in its preface":
        h2.local_settings = h2_settings.Settings(client=False, initial_values=lowered)
    if when != "after the client's preface":
        h2.initiate_connection()
    if when == "in a second SETTINGS":
        h2.update_settings(lowered)
    if when == "after the client's preface":
        return lambda: (h2.initiate_connection(), h2.update_settings(lowered))
    return None


@pytest.mark.parametrize("when", ["in its preface", "in a second SETTINGS", "after the client's preface"])
def test_against_an_h2_server_with_a_small_window_and_a_request_larger_than_it(tmp_path, when):
    """The h2 package (an independent HTTP/2 implementation, strict on flow control) as the server: its window is
    100 bytes and it gives credit back as it reads; a 200,000-byte request and its echo go through, and so do
    1,000-byte first calls on new connections. Before the client read every SETTINGS the server sent ahead of its
    ACK, a window lowered by a second SETTINGS was overrun by every first call (h2 closed the connection)."""
    h2_connection = pytest.importorskip("h2.connection")
    h2_config, h2_events = pytest.importorskip("h2.config"), pytest.importorskip("h2.events")
    path = str(tmp_path / "h2.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(4)
    errors = []

    def serve_one(conn):
        h2 = h2_connection.H2Connection(config=h2_config.H2Configuration(client_side=False))
        late = _lowered_window(h2, when)
        conn.sendall(h2.data_to_send())
        bodies = {}
        while True:
            data = conn.recv(65536)
            if not data:
                return
            if late is not None:
                late, _sent = None, late()
            for event in h2.receive_data(data):
                if isinstance(event, h2_events.DataReceived):
                    bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                    h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2_events.StreamEnded):
                    body = bodies.pop(event.stream_id)
                    h2.send_headers(event.stream_id, h2_peer.OK_HEADERS)
                    for at in range(0, len(body), h2.max_outbound_frame_size):  # our window is 16 MiB
                        h2.send_data(event.stream_id, body[at:at + h2.max_outbound_frame_size])
                    h2.send_headers(event.stream_id, h2_peer.TRAILERS, end_stream=True)
            conn.sendall(h2.data_to_send())

    def serve():
        while True:
            try:
                conn, _address = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    serve_one(conn)
                except Exception as exc:  # a flow-control violation, say: the test reads it
                    errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _first_call in range(3):
            client = grpc_h2.Connection(path)
            try:
                assert client.unary("/x/Y", b"q" * 1000, 10.0) == b"q" * 1000
            finally:
                client.close()
        client = grpc_h2.Connection(path)
        try:
            assert client.unary("/x/Y", b"z" * 200000, 10.0) == b"z" * 200000
            assert client.unary("/x/Y", b"small", 10.0) == b"small"
        finally:
            client.close()
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
    assert errors == []


@pytest.mark.parametrize("handshake, code, details", [
    ([grpc_h2.frame(grpc_h2.GOAWAY, 0, 0, struct.pack(">II", 0, 0))], "UNAVAILABLE", "GOAWAY"),
    ([grpc_h2.frame(grpc_h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", 0))], "INTERNAL", "WINDOW_UPDATE of 0"),
    ([grpc_h2.frame(grpc_h2.PUSH_PROMISE, 0, 0, b"\0\0\0\2")], "INTERNAL", "unexpected frame type 5"),
])
def test_a_handshake_that_goes_wrong_ends_the_first_call(hostile, handshake, code, details):
    conn, _server = hostile(lambda link: link.until(255), handshake=handshake)
    with pytest.raises(RpcStatus) as raised:
        conn.unary("/x/Y", b"a", 1.0)
    assert raised.value.code == code and details in raised.value.details


def test_a_server_that_acknowledges_our_settings_only_after_a_request_is_served(hostile):
    """CRI-O's gRPC socket: a connection matcher (cmux) answers the client's preface with an empty SETTINGS and hands
    the connection to the gRPC server only once a request's HEADERS came; the server's own SETTINGS and its ACK of
    ours come after that. Waiting for the ACK before the first request never ended."""
    def behave(link):
        sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
        link.send(grpc_h2.frame(grpc_h2.SETTINGS, 0, 0), grpc_h2.frame(grpc_h2.SETTINGS, grpc_h2.ACK, 0))
        h2_peer.answer(link, sid, b"served")
        link.until(255)

    conn, _server = hostile(behave, handshake=())
    assert conn.unary("/x/Y", b"a", 2.0) == b"served"


def test_what_the_server_sends_before_its_ack_is_applied_to_the_first_request(hostile):
    """A second SETTINGS (the window lowered to 7), a connection WINDOW_UPDATE and a PING before the ACK: the first
    request keeps to the 7 bytes, and the PING is answered."""
    behave, violations = _credit_server(10, initial=7)
    conn, server = hostile(behave, struct.pack(">HI", grpc_h2.SETTINGS_INITIAL_WINDOW_SIZE, 0), handshake=(
        grpc_h2.frame(grpc_h2.SETTINGS, 0, 0, struct.pack(">HI", grpc_h2.SETTINGS_INITIAL_WINDOW_SIZE, 7)),
        grpc_h2.frame(grpc_h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", 1000)),
        grpc_h2.frame(grpc_h2.PING, 0, 0, b"abcdefgh"),
        grpc_h2.frame(grpc_h2.SETTINGS, grpc_h2.ACK, 0)))
    assert conn.unary("/x/Y", b"a" * 95, 5.0) == b"a" * 95
    assert conn.send_window == grpc_h2.DEFAULT_WINDOW + 1000  # the server gave back all it read
    assert violations == []
    assert (grpc_h2.PING, grpc_h2.ACK, 0, b"abcdefgh") in server.links[0].frames


def _goaway_server(last):
    """Answers the first call; on the second, a GOAWAY saying ``last`` was the last stream it processes, then it
    closes. A later connection answers every call."""
    connections = []

    def behave(link):
        connections.append(link)
        sid = link.until(grpc_h2.DATA, grpc_h2.END_STREAM)[2]
        if len(connections) == 1:
            h2_peer.answer(link, sid, b"first")
            link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
            link.send(grpc_h2.frame(grpc_h2.GOAWAY, 0, 0, struct.pack(">II", last, 0)))
            return
        h2_peer.answer(link, sid, b"again")
        link.until(255)

    return behave


@pytest.mark.parametrize("last, idempotent, sent_again", [
    (3, False, False),  # the GOAWAY covers the call: it may have run; sent once
    (3, True, True),  # ... unless the caller says a second one does no harm
    (1, False, True),  # the GOAWAY is below it: never processed, always safe to send again
])
def test_after_a_goaway_a_call_is_sent_again_only_when_that_cannot_do_it_twice(hostile, last, idempotent,
                                                                               sent_again):
    conn, server = hostile(_goaway_server(last))
    assert conn.unary("/x/Y", b"", 2.0) == b"first"
    if sent_again:
        assert conn.unary("/x/Y", b"", 2.0, idempotent=idempotent) == b"again"
    else:
        with pytest.raises(RpcStatus) as raised:
            conn.unary("/x/Y", b"", 2.0, idempotent=idempotent)
        assert raised.value.code == "UNAVAILABLE"
    server.close()
    assert len(server.links) == (2 if sent_again else 1)


def test_a_silent_server_ends_a_stream_without_deadline_at_the_keepalive(hostile, monkeypatch):
    monkeypatch.setattr(grpc_h2, "KEEPALIVE", 0.2)
    monkeypatch.setattr(grpc_h2, "KEEPALIVE_TIMEOUT", 0.3)
    pings = []

    def silent(link):
        link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
        link.send(h2_peer.headers(1, h2_peer.OK_HEADERS))
        pings.append(link.until(grpc_h2.PING))  # and never an ACK
        link.until(255)

    conn, _server = hostile(silent)
    started = time.monotonic()
    with pytest.raises(RpcStatus) as raised:
        list(conn.stream("/x/Y", b""))
    assert raised.value.code == "UNAVAILABLE" and "keepalive PING" in raised.value.details
    assert 0.4 < time.monotonic() - started < 2.0 and len(pings) == 1


def test_a_server_that_answers_the_keepalive_keeps_the_stream(hostile, monkeypatch):
    monkeypatch.setattr(grpc_h2, "KEEPALIVE", 0.1)
    monkeypatch.setattr(grpc_h2, "KEEPALIVE_TIMEOUT", 0.5)

    def alive(link):
        link.until(grpc_h2.DATA, grpc_h2.END_STREAM)
        link.send(h2_peer.headers(1, h2_peer.OK_HEADERS))
        for _n in range(3):
            ping = link.until(grpc_h2.PING)
            link.send(grpc_h2.frame(grpc_h2.PING, grpc_h2.ACK, 0, ping[3]))
        h2_peer.answer(link, 1, b"late event")
        link.until(255)

    conn, _server = hostile(alive)
    assert list(conn.stream("/x/Y", b"")) == [b"late event"]
