# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""gRPC over cleartext HTTP/2 on a Unix (or TCP) socket, in the standard library alone: the unary and
server-streaming calls the CRI backend makes, and nothing else.

What it does of HTTP/2 (RFC 9113) and gRPC's mapping onto it (the "gRPC over HTTP2" protocol document):
- one connection, opened on the first call with the client preface and our SETTINGS (no server push, a 16 MiB
  receive window per stream and for the connection, replenished as data is read); a broken or timed-out
  connection is dropped and the next call opens a new one;
- each call is a new client stream: HEADERS (``:path``, ``content-type: application/grpc``, ``te: trailers``,
  ``grpc-timeout``) and one DATA frame per 16 KiB of the length-prefixed message, the last with END_STREAM;
- the answer: length-prefixed messages across DATA frames, then the trailers' ``grpc-status`` and
  ``grpc-message`` (or a trailers-only answer); RST_STREAM, GOAWAY, an HTTP status other than 200 and a closed
  socket become the statuses gRPC gives them; SETTINGS and PING are acknowledged.
Every failure is an ``RpcStatus`` named as gRPC names it (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ...).

Why not grpcio: importing it costs about 100 ms (asyncio included), more than the rest of a module's run on the
node, and it is one package less to install on every node.
"""

from __future__ import annotations

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
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x2, 0x4, 0x5
DEFAULT_WINDOW, DEFAULT_FRAME = 65535, 16384
WINDOW = 1 << 24

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


class Connection:
    """One HTTP/2 connection to ``endpoint``, used by one thread at a time; calls run one after another."""

    def __init__(self, endpoint: str, authority: str = "localhost") -> None:
        self.endpoint = endpoint
        self.authority = authority
        self.sock: Optional[socket.socket] = None
        self.buffer = bytearray()
        self.decoder = hpack.Decoder()
        self.next_stream = 1
        self.max_frame = DEFAULT_FRAME
        self.unacknowledged = 0  # received connection-level bytes not yet given back by a WINDOW_UPDATE
        self.going_away = False

    def unary(self, path: str, message: bytes, timeout: float) -> bytes:
        """One call's one answer. A connection an earlier call opened and the server has since dropped (it
        restarted, or sent GOAWAY) is replaced once, as grpc's channels do: every CRI call kubecpu makes may be
        repeated."""
        reused = self.sock is not None
        try:
            replies = list(self.stream(path, message, timeout))
        except RpcStatus as exc:
            if not (reused and exc.code == "UNAVAILABLE" and (self.sock is None or self.going_away)):
                raise
            replies = list(self.stream(path, message, timeout))
        if len(replies) != 1:
            raise RpcStatus("INTERNAL", "unary call %s answered with %d messages" % (path, len(replies)))
        return replies[0]

    def stream(self, path: str, message: bytes, timeout: Optional[float] = None) -> Iterator[bytes]:
        """The messages of one call as they arrive; ``timeout`` bounds the whole call (None: no bound)."""
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

    def close(self) -> None:
        """Drops the connection (a reader blocked in another thread wakes up and sees it closed)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _open(self, deadline: Optional[float]) -> socket.socket:
        family, where = address(self.endpoint)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._remaining(deadline))
            sock.connect(where)
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            settings = struct.pack(">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, WINDOW)
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings)
                         + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - DEFAULT_WINDOW)))
        except BaseException:
            sock.close()
            raise
        self.sock, self.buffer, self.decoder = sock, bytearray(), hpack.Decoder()
        self.next_stream, self.max_frame, self.unacknowledged, self.going_away = 1, DEFAULT_FRAME, 0, False
        return sock

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
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.authority),
                   ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "kubecpu")]
        if timeout is not None:
            headers.append(("grpc-timeout", "%dm" % min(max(int(timeout * 1000), 1), 99999999)))
        body = struct.pack(">BI", 0, len(message)) + message
        if len(body) > DEFAULT_WINDOW:
            raise RpcStatus("INTERNAL", "a request of %d bytes is over HTTP/2's initial window" % len(body))
        out = [frame(HEADERS, END_HEADERS, stream, hpack.encode(headers))]
        chunks = [body[at:at + self.max_frame] for at in range(0, len(body), self.max_frame)]
        out += [frame(DATA, END_STREAM if n == len(chunks) - 1 else 0, stream, chunk) for n, chunk in enumerate(chunks)]
        sock.settimeout(self._remaining(deadline))
        sock.sendall(b"".join(out))
        yield from self._answer(stream, deadline)

    def _answer(self, stream: int, deadline: Optional[float]) -> Iterator[bytes]:
        pending = bytearray()
        http_status = ""
        stream_read = 0  # bytes of this stream not yet given back by a WINDOW_UPDATE
        while True:
            kind, flags, sid, payload = self._frame(deadline)
            if kind == DATA:
                self._give_back(len(payload))
                if sid != stream:
                    continue
                stream_read += len(payload)
                if stream_read >= WINDOW // 2:
                    self._send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", stream_read)))
                    stream_read = 0
                pending += _unpad(flags, payload)
                while len(pending) >= 5:
                    compressed, size = struct.unpack(">BI", pending[:5])
                    if len(pending) < 5 + size:
                        break
                    if compressed:
                        raise ProtocolError("gRPC: a compressed message, and no compression was asked for")
                    yield bytes(pending[5:5 + size])
                    del pending[:5 + size]
                if flags & END_STREAM:
                    raise RpcStatus(HTTP_CODES.get(http_status, "INTERNAL"),
                                    "the server closed the stream without trailers (HTTP status %s)" % http_status)
            elif kind == HEADERS:
                fields = dict(self.decoder.decode(self._header_block(flags, sid, payload, deadline)))
                if sid != stream:
                    continue
                http_status = http_status or fields.get(":status", "")
                if flags & END_STREAM:
                    _finish(fields, http_status, pending)
                    return
            elif kind == RST_STREAM and sid == stream:
                code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else 0
                raise RpcStatus(RESET_CODES.get(code, "INTERNAL"),
                                "stream reset by the server (HTTP/2 error %d)" % code)
            elif kind in (SETTINGS, PING) and not flags & ACK:
                if kind == SETTINGS:
                    self._settings(payload)
                self._send(frame(kind, ACK, 0, payload if kind == PING else b""))
            elif kind == GOAWAY:
                self.going_away = True
                last = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
                if stream > last:
                    raise RpcStatus("UNAVAILABLE", "the server is going away (GOAWAY) before this call")
            elif kind in (PUSH_PROMISE, CONTINUATION):
                raise ProtocolError("HTTP/2: unexpected frame type %d" % kind)

    def _frame(self, deadline: Optional[float]) -> Tuple[int, int, int, bytes]:
        head = self._read(9, deadline)
        length = int.from_bytes(head[:3], "big")
        if length > DEFAULT_FRAME:
            raise ProtocolError("HTTP/2: a frame of %d bytes over our maximum %d" % (length, DEFAULT_FRAME))
        return head[3], head[4], struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF, self._read(length, deadline)

    def _read(self, size: int, deadline: Optional[float]) -> bytes:
        sock = self.sock
        if sock is None:
            raise ConnectionError("connection closed")
        while len(self.buffer) < size:
            sock.settimeout(self._remaining(deadline))
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the runtime closed the connection")
            self.buffer += chunk
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _send(self, data: bytes) -> None:
        if self.sock is None:
            raise ConnectionError("connection closed")
        self.sock.sendall(data)

    def _header_block(self, flags: int, sid: int, payload: bytes, deadline: Optional[float]) -> bytes:
        block = _unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            block = block[5:]
        parts: List[bytes] = [block]
        while not flags & END_HEADERS:
            kind, flags, more_sid, more = self._frame(deadline)
            if kind != CONTINUATION or more_sid != sid:
                raise ProtocolError("HTTP/2: a header block interrupted by frame type %d" % kind)
            parts.append(more)
        return b"".join(parts)

    def _settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack(">HI", payload[at:at + 6])
            if key == SETTINGS_MAX_FRAME_SIZE:
                self.max_frame = min(max(value, DEFAULT_FRAME), 1 << 24)

    def _give_back(self, size: int) -> None:
        """The connection's WINDOW_UPDATE once half its window has been read (the stream's is the call's), so the
        server never waits on our flow control."""
        self.unacknowledged += size
        if self.unacknowledged >= WINDOW // 2:
            self._send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)))
            self.unacknowledged = 0


def _finish(fields: Dict[str, str], http_status: str, pending: bytearray) -> None:
    """The call's end: OK, or its status as an ``RpcStatus``."""
    code = fields.get("grpc-status")
    if code is None:
        if http_status != "200":
            raise RpcStatus(HTTP_CODES.get(http_status, "UNKNOWN"), "unexpected HTTP status code %s" % http_status)
        raise RpcStatus("INTERNAL", "the server sent no grpc-status")
    name = CODES[int(code)] if code.isdigit() and int(code) < len(CODES) else "UNKNOWN"
    if name != "OK":
        raise RpcStatus(name, unquote(fields.get("grpc-message", "")))
    if pending:
        raise RpcStatus("INTERNAL", "the stream ended inside a message (%d bytes left)" % len(pending))
