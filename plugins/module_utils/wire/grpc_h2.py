# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""gRPC over cleartext HTTP/2 on a Unix (or TCP) socket, in the standard library alone: the unary and
server-streaming calls the CRI backend makes, and nothing else.

What it does of HTTP/2 (RFC 9113) and gRPC's mapping onto it (the "gRPC over HTTP2" protocol document):
- one connection, opened on the first call with the client preface and our SETTINGS (no server push, a 16 MiB
  receive window per stream and for the connection, replenished as data is read, the header list size we accept);
  the server's own SETTINGS, every one already here once its preface has come, apply to the first request. A
  broken or timed-out connection is dropped and the next call opens a new one;
- each call is a new client stream: HEADERS (``:path``, ``content-type: application/grpc``, ``te: trailers``,
  ``grpc-timeout``) and the length-prefixed message in DATA frames no larger than the server's frame size and its
  flow-control windows allow (RFC 9113 section 6.9: the sender waits for WINDOW_UPDATE), the last with END_STREAM;
- the answer: length-prefixed messages across DATA frames, then the trailers' ``grpc-status`` and
  ``grpc-message`` (or a trailers-only answer); RST_STREAM, GOAWAY, an HTTP status other than 200 and a closed
  socket become the statuses gRPC gives them; SETTINGS and PING are acknowledged.
Every failure is an ``RpcStatus`` named as gRPC names it (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ...).

The server is a peer: every length it sends is checked against a limit below before anything is read or kept, every
read has a deadline (a call's, or for a stream without one the keepalive's), and whatever it sends ends one call,
never the process.

Why not grpcio: importing it costs about 100 ms (asyncio included), more than the rest of a module's run on the
node, and it is one package less to install on every node."""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Dict, Iterator, List, Optional, Tuple, Union
from urllib.parse import unquote

from ..errors import ProtocolError, RpcStatus
from . import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x1, 0x2, 0x4
SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 0x5, 0x6
CANCEL, REFUSED_STREAM = 0x8, 0x7
DEFAULT_WINDOW, DEFAULT_FRAME = 65535, 16384
MAX_WINDOW = (1 << 31) - 1  # RFC 9113 6.9.1: a window above this is a FLOW_CONTROL_ERROR
WINDOW = 1 << 24  # what we let the server send before it waits for our WINDOW_UPDATE

# The limits on what a server may send, each checked before the bytes are read or kept.
# One gRPC message; a larger length prefix is RESOURCE_EXHAUSTED. The kubelet's (remote_runtime.go maxMsgSize) and
# containerd's send limit, not gRPC's default 4 MiB: a tenant's containers carry their spec's JSON into ListContainers
# (the kubelet's preStopHandler and ports annotations), and what the kubelet reads kubecpu must read too.
MAX_MESSAGE = 16 << 20
MAX_HEADER_BLOCK = 64 << 10  # one header block, HEADERS with its CONTINUATIONs (the 2024 "CONTINUATION flood")
MAX_HEADER_LIST = hpack.MAX_HEADER_LIST  # its decoded fields, RFC 7541 4.1 sizes; announced in our SETTINGS
CONNECT_TIMEOUT = 10.0  # opening a connection (and reading the server's SETTINGS) when the call has no deadline
KEEPALIVE = 30.0  # a call without a deadline (the event stream): a PING after this long with nothing read...
KEEPALIVE_TIMEOUT = 10.0  # ...and the connection is dead when its ACK (or anything) does not come in this long

# gRPC status codes by number, and what an HTTP status or a stream reset means when no gRPC status came.
CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
         "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
         "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
HTTP_CODES = {"400": "INTERNAL", "401": "UNAUTHENTICATED", "403": "PERMISSION_DENIED", "404": "UNIMPLEMENTED",
              "429": "UNAVAILABLE", "502": "UNAVAILABLE", "503": "UNAVAILABLE", "504": "UNAVAILABLE"}
RESET_CODES = {0x7: "UNAVAILABLE", 0x8: "CANCELLED", 0xB: "RESOURCE_EXHAUSTED", 0xC: "PERMISSION_DENIED"}
Address = Tuple[int, Union[str, Tuple[str, int]]]


def address(endpoint: str) -> Address:
    """``unix:///path``, ``unix:path`` or a bare ``/path`` is a Unix socket; ``host:port`` (optionally after
    ``dns:///`` or ``tcp://``) is TCP."""
    for prefix in ("unix://", "unix:"):
        if endpoint.startswith(prefix):
            return socket.AF_UNIX, endpoint[len(prefix):]
    if endpoint.startswith("/"):
        return socket.AF_UNIX, endpoint
    for prefix in ("dns:///", "tcp://"):
        if endpoint.startswith(prefix):
            endpoint = endpoint[len(prefix):]
    host, _colon, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise RpcStatus("UNAVAILABLE", "endpoint %r is neither unix:///path nor host:port" % endpoint)
    return socket.AF_INET6 if ":" in host else socket.AF_INET, (host.strip("[]"), int(port))


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError("HTTP/2: padding longer than the frame")
    return payload[1:len(payload) - payload[0]]


class _Unprocessed(RpcStatus):
    """The server says it did not process the call (a GOAWAY below its stream, REFUSED_STREAM): always safe to
    send again (RFC 9113 section 8.7)."""


class _Call:
    """One stream's state while its call runs."""

    def __init__(self, stream: int, send_window: int) -> None:
        self.stream = stream
        self.send_window = send_window  # what we may still send on it (may go negative: RFC 9113 6.9.2)
        self.pending = bytearray()  # DATA not yet a whole message
        self.messages: List[bytes] = []  # whole messages not yet handed out
        self.http_status = ""
        self.unacknowledged = 0  # bytes of this stream not yet given back by a WINDOW_UPDATE
        self.done = False


class Connection:
    """One HTTP/2 connection to ``endpoint``, used by one thread at a time; calls run one after another."""

    def __init__(self, endpoint: str, authority: str = "localhost") -> None:
        self.endpoint = endpoint
        self.authority = authority
        self.sock: Optional[socket.socket] = None
        self.buffer = bytearray()
        self.decoder = hpack.Decoder()
        self.next_stream = 1
        self.max_frame = DEFAULT_FRAME  # the largest frame the server takes
        self.initial_window = DEFAULT_WINDOW  # the server's SETTINGS_INITIAL_WINDOW_SIZE, for new streams
        self.send_window = DEFAULT_WINDOW  # the connection's window for what we send
        self.unacknowledged = 0  # received connection-level bytes not yet given back by a WINDOW_UPDATE
        self.going_away = False
        self.ping_sent: Optional[bytes] = None  # the keepalive PING awaiting its ACK

    def unary(self, path: str, message: bytes, timeout: float, *, idempotent: bool = False) -> bytes:
        """One call's one answer. A connection an earlier call opened and the server has since dropped (it restarted,
        or sent GOAWAY) is replaced once, and the call sent again, only when that cannot do it twice: the server said
        it did not process the call, or the caller marks the call ``idempotent`` (the same effect however often it is
        made)."""
        reused = self.sock is not None
        try:
            replies = list(self.stream(path, message, timeout))
        except _Unprocessed:
            replies = list(self.stream(path, message, timeout))
        except RpcStatus as exc:
            if not (idempotent and reused and exc.code == "UNAVAILABLE" and (self.sock is None or self.going_away)):
                raise
            replies = list(self.stream(path, message, timeout))
        if len(replies) != 1:
            raise RpcStatus("INTERNAL", "unary call %s answered with %d messages" % (path, len(replies)))
        return replies[0]

    def stream(self, path: str, message: bytes, timeout: Optional[float] = None) -> Iterator[bytes]:
        """The messages of one call as they arrive; ``timeout`` bounds the whole call (None: no bound, and the
        connection is kept alive by PINGs: a server that stops answering them ends the call as UNAVAILABLE)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            yield from self._call(path, message, deadline, timeout)
        except socket.timeout:
            self.close()
            raise RpcStatus("DEADLINE_EXCEEDED", "context deadline exceeded") from None
        except ProtocolError as exc:
            self.close()
            raise RpcStatus("INTERNAL", str(exc)) from None
        except OSError as exc:
            self.close()
            raise RpcStatus("UNAVAILABLE", "connection error: %s: %s" % (
                self.endpoint, (exc.strerror or str(exc)).lower())) from None
        except GeneratorExit:  # the caller stopped reading: the stream's state is unknown
            self.close()
            raise

    def close(self) -> None:
        """Drops the connection (a reader blocked in another thread wakes up and sees it closed)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    # --- the connection ---------------------------------------------------------------------------------------
    def _open(self, deadline: Optional[float]) -> socket.socket:
        family, where = address(self.endpoint)
        self.sock, self.buffer, self.decoder = socket.socket(family, socket.SOCK_STREAM), bytearray(), hpack.Decoder()
        self.next_stream, self.max_frame, self.unacknowledged, self.going_away = 1, DEFAULT_FRAME, 0, False
        self.initial_window, self.send_window, self.ping_sent = DEFAULT_WINDOW, DEFAULT_WINDOW, None
        sock, connect_by = self.sock, deadline if deadline is not None else time.monotonic() + CONNECT_TIMEOUT
        try:
            sock.settimeout(self._remaining(connect_by))
            sock.connect(where)
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            settings = struct.pack(">HIHIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, WINDOW,
                                   SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST)
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings)
                         + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - DEFAULT_WINDOW)))
            self._handshake(sock, connect_by)
        except BaseException:
            self.close()
            raise
        return sock

    def _handshake(self, sock: socket.socket, deadline: float) -> None:
        """The server's preface (RFC 9113 3.4), and every frame already here after it: a SETTINGS that lowers the
        window applies to our first request. Its ACK of ours is not waited for (CRI-O's connection matcher sends it
        only after a request's HEADERS)."""
        kind, flags, _sid, payload = self._frame(deadline)
        if kind != SETTINGS or flags & ACK:
            raise ProtocolError("HTTP/2: the server's first frame is type %d, not SETTINGS" % kind)
        self._settings(payload, None)
        self._send(frame(SETTINGS, ACK, 0), deadline)
        idle = _Call(-1, 0)  # no stream is open: only the connection's frames count
        while self.buffer or select.select([sock], [], [], 0)[0]:
            self._next(idle, deadline)

    @staticmethod
    def _remaining(deadline: Optional[float]) -> Optional[float]:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline passed")
        return left

    def _call(self, path: str, message: bytes, deadline: Optional[float], timeout: Optional[float]) -> Iterator[bytes]:
        if self.going_away or self.next_stream > 0x7FFFFFFF:  # no new streams on this connection
            self.close()
        sock = self.sock or self._open(deadline)
        if self.going_away:  # a GOAWAY came with the server's preface
            self.close()
            raise _Unprocessed("UNAVAILABLE", "the server is going away (GOAWAY) before this call")
        call = _Call(self.next_stream, self.initial_window)
        self.next_stream += 2
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.authority),
                   ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "kubecpu")]
        if timeout is not None:
            headers.append(("grpc-timeout", "%dm" % min(max(int(timeout * 1000), 1), 99999999)))
        sock.settimeout(self._remaining(deadline))
        try:
            sock.sendall(frame(HEADERS, END_HEADERS, call.stream, hpack.encode(headers)))
        except (BrokenPipeError, ConnectionResetError):  # the server had closed it: nothing of this call got there
            self.close()
            raise _Unprocessed("UNAVAILABLE", "connection error: %s: closed by the server" % self.endpoint) from None
        self._send_body(call, struct.pack(">BI", 0, len(message)) + message, deadline)
        while True:
            while call.messages:
                yield call.messages.pop(0)
            if call.done:
                return
            self._next(call, deadline)

    def _send_body(self, call: _Call, body: bytes, deadline: Optional[float]) -> None:
        """The request's DATA frames, each within the server's frame size and both flow-control windows; while a
        window is closed, the server's frames are read (its WINDOW_UPDATE, or an early answer) until it opens."""
        at = 0
        while at < len(body) and not call.done:
            size = min(len(body) - at, self.max_frame, self.send_window, call.send_window)
            if size <= 0:
                self._next(call, deadline)
                continue
            last = at + size == len(body)
            self._send(frame(DATA, END_STREAM if last else 0, call.stream, body[at:at + size]), deadline)
            self.send_window -= size
            call.send_window -= size
            at += size
        if not body:
            self._send(frame(DATA, END_STREAM, call.stream), deadline)

    # --- the server's frames ------------------------------------------------------------------------------------
    def _next(self, call: _Call, deadline: Optional[float]) -> None:
        """Reads one frame and applies it to the connection and to ``call``."""
        kind, flags, sid, payload = self._frame(deadline)
        if kind == DATA:
            self._data(call, flags, sid, payload, deadline)
        elif kind == HEADERS:
            fields = dict(self.decoder.decode(self._header_block(flags, sid, payload, deadline)))
            if sid != call.stream:
                return
            call.http_status = call.http_status or fields.get(":status", "")
            if flags & END_STREAM:
                _finish(fields, call.http_status, call.pending)
                call.done = True
        elif kind == RST_STREAM and sid == call.stream:
            code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else 0
            error = _Unprocessed if code == REFUSED_STREAM else RpcStatus
            raise error(RESET_CODES.get(code, "INTERNAL"), "stream reset by the server (HTTP/2 error %d)" % code)
        elif kind == SETTINGS and not flags & ACK:
            self._settings(payload, call)
            self._send(frame(SETTINGS, ACK, 0), deadline)
        elif kind == PING:
            if flags & ACK:
                if payload == self.ping_sent:
                    self.ping_sent = None
            else:
                self._send(frame(PING, ACK, 0, payload), deadline)
        elif kind == WINDOW_UPDATE:
            self._window_update(call, sid, payload)
        elif kind == GOAWAY:
            self.going_away = True
            last = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
            if call.stream > last:  # RFC 9113 6.8: streams above the last one were not processed
                raise _Unprocessed("UNAVAILABLE", "the server is going away (GOAWAY) before this call")
        elif kind in (PUSH_PROMISE, CONTINUATION):
            raise ProtocolError("HTTP/2: unexpected frame type %d" % kind)
        # PRIORITY, RST_STREAM of another stream, and frame types HTTP/2 does not define: ignored (RFC 9113 4.1, 5.5)

    def _data(self, call: _Call, flags: int, sid: int, payload: bytes, deadline: Optional[float]) -> None:
        self._give_back(len(payload), deadline)
        if sid != call.stream:
            return
        call.unacknowledged += len(payload)
        if call.unacknowledged >= WINDOW // 2:
            self._send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", call.unacknowledged)), deadline)
            call.unacknowledged = 0
        call.pending += _unpad(flags, payload)
        while len(call.pending) >= 5:
            compressed, size = struct.unpack(">BI", call.pending[:5])
            if compressed:
                raise ProtocolError("gRPC: a compressed message, and no compression was asked for")
            if size > MAX_MESSAGE:  # refused from its length prefix, before its bytes are read
                raise self._broken("RESOURCE_EXHAUSTED", "grpc: received message larger than max (%d vs. %d)"
                                   % (size, MAX_MESSAGE))
            if len(call.pending) < 5 + size:
                break
            call.messages.append(bytes(call.pending[5:5 + size]))
            del call.pending[:5 + size]
        if flags & END_STREAM:
            raise RpcStatus(HTTP_CODES.get(call.http_status, "INTERNAL"),
                            "the server closed the stream without trailers (HTTP status %s)" % call.http_status)

    def _settings(self, payload: bytes, call: Optional[_Call]) -> None:
        if len(payload) % 6:
            raise ProtocolError("HTTP/2: a SETTINGS frame of %d bytes (FRAME_SIZE_ERROR)" % len(payload))
        for at in range(0, len(payload), 6):
            key, value = struct.unpack(">HI", payload[at:at + 6])
            if key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_FRAME <= value <= (1 << 24) - 1:
                    raise ProtocolError("HTTP/2: SETTINGS_MAX_FRAME_SIZE %d out of range" % value)
                self.max_frame = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError("HTTP/2: SETTINGS_INITIAL_WINDOW_SIZE %d (FLOW_CONTROL_ERROR)" % value)
                if call is not None:  # RFC 9113 6.9.2: open streams' windows move by the difference, maybe below 0
                    call.send_window += value - self.initial_window
                self.initial_window = value

    def _window_update(self, call: _Call, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError("HTTP/2: a WINDOW_UPDATE frame of %d bytes (FRAME_SIZE_ERROR)" % len(payload))
        increment = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
        if sid == 0:
            if not increment or self.send_window + increment > MAX_WINDOW:
                raise ProtocolError("HTTP/2: connection WINDOW_UPDATE of %d (RFC 9113 6.9)" % increment)
            self.send_window += increment
        elif sid == call.stream:
            if not increment or call.send_window + increment > MAX_WINDOW:
                raise self._broken("INTERNAL", "stream WINDOW_UPDATE of %d (RFC 9113 6.9)" % increment)
            call.send_window += increment

    def _frame(self, deadline: Optional[float]) -> Tuple[int, int, int, bytes]:
        head = self._read(9, deadline)
        length = int.from_bytes(head[:3], "big")
        if length > DEFAULT_FRAME:  # our SETTINGS_MAX_FRAME_SIZE: the length is refused before it is read
            raise ProtocolError("HTTP/2: a frame of %d bytes over our maximum %d" % (length, DEFAULT_FRAME))
        return head[3], head[4], struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF, self._read(length, deadline)

    def _read(self, size: int, deadline: Optional[float]) -> bytes:
        sock = self.sock
        if sock is None:
            raise ConnectionError("connection closed")
        while len(self.buffer) < size:
            sock.settimeout(self._remaining(deadline) if deadline is not None else
                            KEEPALIVE_TIMEOUT if self.ping_sent is not None else KEEPALIVE)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                if deadline is not None:
                    raise
                self._keepalive()
                continue
            if not chunk:
                raise ConnectionError("the runtime closed the connection")
            self.buffer += chunk
            self.ping_sent = None  # anything read shows the connection is alive
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _keepalive(self) -> None:
        """A call with no deadline read nothing for KEEPALIVE seconds: a PING, and the connection is dead when
        nothing at all comes back within KEEPALIVE_TIMEOUT more."""
        if self.ping_sent is not None:
            raise self._broken("UNAVAILABLE", "the runtime answered no keepalive PING within %.0fs (%s)"
                               % (KEEPALIVE_TIMEOUT, self.endpoint))
        self.ping_sent = os.urandom(8)
        self._send(frame(PING, 0, 0, self.ping_sent), None)

    def _broken(self, code: str, details: str) -> RpcStatus:
        """The call's end when the connection cannot serve another one (bytes left unread, a dead peer)."""
        self.close()
        return RpcStatus(code, details)

    def _send(self, data: bytes, deadline: Optional[float]) -> None:
        if self.sock is None:
            raise ConnectionError("connection closed")
        self.sock.settimeout(self._remaining(deadline) if deadline is not None else KEEPALIVE_TIMEOUT)
        self.sock.sendall(data)

    def _header_block(self, flags: int, sid: int, payload: bytes, deadline: Optional[float]) -> bytes:
        """A whole header block, HEADERS and its CONTINUATIONs, at most MAX_HEADER_BLOCK bytes."""
        block = _unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            block = block[5:]
        parts: List[bytes] = [block]
        size = len(block)
        while not flags & END_HEADERS:
            kind, flags, more_sid, more = self._frame(deadline)
            if kind != CONTINUATION or more_sid != sid:
                raise ProtocolError("HTTP/2: a header block interrupted by frame type %d" % kind)
            size += len(more)
            if size > MAX_HEADER_BLOCK:
                raise ProtocolError("HTTP/2: a header block over %d bytes" % MAX_HEADER_BLOCK)
            parts.append(more)
        return b"".join(parts)

    def _give_back(self, size: int, deadline: Optional[float]) -> None:
        """The connection's WINDOW_UPDATE once half its window has been read (the stream's is the call's), so the
        server never waits on our flow control."""
        self.unacknowledged += size
        if self.unacknowledged >= WINDOW // 2:
            self._send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)), deadline)
            self.unacknowledged = 0


def _finish(fields: Dict[str, str], http_status: str, pending: bytearray) -> None:
    """The call's end: OK, or its status as an ``RpcStatus``."""
    code = fields.get("grpc-status")
    if code is None:
        if http_status != "200":
            raise RpcStatus(HTTP_CODES.get(http_status, "UNKNOWN"), "unexpected HTTP status code %s" % http_status)
        raise RpcStatus("INTERNAL", "the server sent no grpc-status")
    # ASCII digits only: "²".isdigit() is true and int() of it fails
    number = int(code) if code.isascii() and code.isdigit() and len(code) <= 3 else len(CODES)
    name = CODES[number] if number < len(CODES) else "UNKNOWN"
    if name != "OK":
        raise RpcStatus(name, unquote(fields.get("grpc-message", ""), errors="replace"))
    if pending:
        raise RpcStatus("INTERNAL", "the stream ended inside a message (%d bytes left)" % len(pending))
