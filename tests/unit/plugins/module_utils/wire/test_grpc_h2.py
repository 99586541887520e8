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
    assert connection.unary("/test.Echo/Echo", b"after", 2.0) == b"echo after"


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


# A scripted HTTP/2 peer: it reads the client's preface, SETTINGS and one call, then sends the frames it is given.
def _headers(stream, fields, flags=grpc_h2.END_HEADERS):
    return grpc_h2.frame(grpc_h2.HEADERS, flags, stream, hpack.encode(fields))


def _message(payload):
    return struct.pack(">BI", 0, len(payload)) + payload


OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
TRAILERS = [("grpc-status", "0")]


class Peer:
    def __init__(self, path, script):
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(1)
        self.script = script
        self.received = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read(self, conn, size):
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _frame(self, conn):
        head = self._read(conn, 9)
        payload = self._read(conn, int.from_bytes(head[:3], "big"))
        self.received.append((head[3], head[4], payload))
        return head[3], head[4]

    def _serve(self):
        conn, _address = self.listener.accept()
        with conn:
            assert self._read(conn, len(grpc_h2.PREFACE)) == grpc_h2.PREFACE
            while self._frame(conn) != (grpc_h2.DATA, grpc_h2.END_STREAM):
                pass
            conn.sendall(b"".join(self.script))
            if not self.script:
                return  # no answer at all: the connection closes
            try:
                while True:
                    self._frame(conn)
            except (EOFError, OSError):
                pass

    def close(self):
        self.listener.close()
        self.thread.join(timeout=2)


@pytest.fixture
def peer(tmp_path):
    made = []

    def start(*script):
        path = str(tmp_path / ("peer%d.sock" % len(made)))
        made.append((Peer(path, script), grpc_h2.Connection(path)))
        return made[-1][1], made[-1][0]

    yield start
    for running, conn in made:
        conn.close()
        running.close()


def test_settings_and_pings_are_acknowledged_and_padding_and_continuations_read(peer):
    block = hpack.encode(OK_HEADERS)
    padded = bytes([3]) + _message(b"hello") + b"\0\0\0"
    conn, server = peer(
        grpc_h2.frame(grpc_h2.SETTINGS, 0, 0, struct.pack(">HI", grpc_h2.SETTINGS_MAX_FRAME_SIZE, 32768)),
        grpc_h2.frame(grpc_h2.PING, 0, 0, b"12345678"),
        grpc_h2.frame(grpc_h2.HEADERS, 0, 1, block[:5]),
        grpc_h2.frame(grpc_h2.CONTINUATION, grpc_h2.END_HEADERS, 1, block[5:]),
        grpc_h2.frame(grpc_h2.DATA, grpc_h2.PADDED, 1, padded),
        _headers(1, TRAILERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM))
    assert conn.unary("/x/Y", b"", 2.0) == b"hello"
    assert conn.max_frame == 32768
    conn.close()
    server.thread.join(timeout=2)
    acks = [(kind, payload) for kind, flags, payload in server.received if flags & grpc_h2.ACK and kind != grpc_h2.DATA]
    assert acks == [(grpc_h2.SETTINGS, b""), (grpc_h2.PING, b"12345678")]


@pytest.mark.parametrize("script, code, details", [
    ([grpc_h2.frame(grpc_h2.GOAWAY, 0, 0, struct.pack(">II", 0, 0))], "UNAVAILABLE", "going away"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x7))], "UNAVAILABLE", "HTTP/2 error 7"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x8))], "CANCELLED", "HTTP/2 error 8"),
    ([grpc_h2.frame(grpc_h2.RST_STREAM, 0, 1, struct.pack(">I", 0x2))], "INTERNAL", "HTTP/2 error 2"),
    ([_headers(1, [(":status", "503")], grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "UNAVAILABLE",
     "unexpected HTTP status code 503"),
    ([_headers(1, OK_HEADERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "INTERNAL", "no grpc-status"),
    ([_headers(1, OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, grpc_h2.END_STREAM, 1, _message(b"x"))], "INTERNAL",
     "without trailers"),
    ([_headers(1, OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, 0, 1, b"\x01" + _message(b"x")[1:])], "INTERNAL",
     "compressed"),
    ([_headers(1, OK_HEADERS), grpc_h2.frame(grpc_h2.DATA, 0, 1, _message(b"xyz")[:6]),
      _headers(1, TRAILERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "INTERNAL", "inside a message"),
    ([_headers(1, OK_HEADERS), _headers(1, [("grpc-status", "99"), ("grpc-message", "odd%20one")],
                                        grpc_h2.END_HEADERS | grpc_h2.END_STREAM)], "UNKNOWN", "odd one"),
    ([grpc_h2.frame(grpc_h2.PUSH_PROMISE, 0, 1, b"\0\0\0\2")], "INTERNAL", "unexpected frame type 5"),
    ([], "UNAVAILABLE", "closed the connection"),
])
def test_what_a_server_may_send_becomes_grpcs_status(peer, script, code, details):
    conn, _server = peer(*script)
    with pytest.raises(RpcStatus) as raised:
        list(conn.stream("/x/Y", b"", 2.0))
    assert raised.value.code == code and details in raised.value.details
