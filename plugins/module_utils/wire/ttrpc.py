# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""ttrpc over NRI's multiplexed socket, the transport of an NRI plugin (no Python library for it exists).

Two layers, each a few facts of the published protocols:

* the NRI multiplexer (containerd/nri pkg/net/multiplex): one Unix socket carries logical connections, each frame a
  big-endian ``uint32`` connection ID, a ``uint32`` payload length and the payload. Connection 1 carries the plugin's
  service (the runtime calls the plugin), connection 2 the runtime's service (the plugin calls the runtime);
* ttrpc (containerd/ttrpc): on each connection a byte stream of messages, each a 10-byte header (``uint32``
  length, ``uint32`` stream ID, a type byte: 1 request, 2 response; a flags byte) and a protobuf ``ttrpc.Request``
  {service 1, method 2, payload 3, timeout_nano 4, metadata 5} or ``ttrpc.Response`` {status 1 (google.rpc.Status:
  code 1, message 2), payload 2}. A client's stream IDs are odd and grow.

``Channel`` does both over one socket, single-threaded: ``serve`` answers the requests of connection 1 with a
handler and ``call`` makes a request on connection 2 and waits for its response (requests arriving meanwhile are
served first).

The runtime is a peer: a frame or message over its limit, a frame that stops half-way, or an envelope that is not a
ttrpc message breaks the connection (``ConnectionBroken``: the plugin connects again); a payload the handler cannot
read is that one request's INVALID_ARGUMENT. Every wait is a ``select`` of at most ``POLL`` seconds, so ``closed``
(set by a signal handler) ends any of them within that; what is read is never more than a frame's announced length,
and a message nobody waits for (a response to no call of ours, a request on the runtime's connection) is dropped.
"""

from __future__ import annotations

import collections
import select
import socket
import struct
import time
from typing import Any, Callable, Deque, Dict, Optional, Set, Tuple

from ..errors import (ConnectionBroken, MessageError, RuntimeRefusedError, RuntimeTimeoutError,
                      RuntimeUnavailableError)
from .proto_schema import cached

PLUGIN_CONN, RUNTIME_CONN = 1, 2
REQUEST, RESPONSE = 1, 2
FRAME = struct.Struct(">II")
HEADER = struct.Struct(">IIBB")
MAX_MESSAGE = 4 << 20  # ttrpc's own limit on one message
MAX_FRAME = HEADER.size + MAX_MESSAGE  # the multiplexer's limit on one frame (a header and a whole message at most)
# The largest first frame of a message the runtime takes. Its multiplexer hands each frame whole to one Read of the
# logical connection and fails it (ENOMEM) when the caller's buffer is smaller (containerd/nri pkg/net/multiplex,
# conn.Read); ttrpc reads a message's header through a 4 KiB bufio.Reader, so a first frame over 4 KiB drops the
# plugin (containerd 2.4.2 closed kubecpu's connection at a 19 KB CreateContainer reply: 250 shared containers
# updated). The body's rest is read straight into a buffer of its size, so it may come in one frame, as Go's ttrpc
# writes it through its 4 KiB bufio.Writer.
FIRST_FRAME = 4096
FRAME_TIMEOUT = 5.0  # seconds a frame may take from its first byte to its last: a half-written frame breaks the link
POLL = 0.2  # the longest a wait goes without looking at ``closed`` (SIGTERM ends the plugin within it)
CHUNK = 1 << 16  # bytes asked of recv at once
MESSAGES = {
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "Request": [("service", 1, "string"), ("method", 2, "string"), ("payload", 3, "bytes"),
                ("timeout_nano", 4, "int64"), ("metadata", 5, "[]KeyValue")],
    "Status": [("code", 1, "int32"), ("message", 2, "string")],
    "Response": [("status", 1, "Status"), ("payload", 2, "bytes")],
}
# gRPC status codes ttrpc uses (google.rpc.Code).
OK, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL = 0, 2, 3, 4, 12, 13

Handler = Callable[[str, str, bytes, float], Optional[Tuple[int, str, bytes]]]


def schema() -> Any:
    return cached("kubecpu/ttrpc.proto", "ttrpc", MESSAGES, {})


class Channel:
    """One NRI socket: frames in and out, a byte stream per logical connection, ttrpc messages on each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.pb = schema()
        self.streams: Dict[int, bytearray] = {PLUGIN_CONN: bytearray(), RUNTIME_CONN: bytearray()}
        self.requests: Deque[Tuple[int, bytes]] = collections.deque()  # (stream, envelope) on connection 1
        self.responses: Dict[int, bytes] = {}  # envelopes of our calls' responses, by stream
        self.waiting: Set[int] = set()  # the streams of our calls still waiting for their response
        self.dropped = 0  # messages nobody waited for
        self.next_stream = 1
        self.closed = False

    @classmethod
    def connect(cls, path: str, timeout: float) -> Channel:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise RuntimeUnavailableError("cannot connect to the NRI socket %s: %s" % (path, exc.strerror or exc),
                                          "connect", path) from None
        return cls(sock)

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    # --- frames and messages ------------------------------------------------------------------------------
    def send(self, conn: int, stream: int, kind: int, payload: bytes) -> None:
        """One message in the frames Go's ttrpc writes through its 4 KiB ``bufio.Writer``: the first at most
        FIRST_FRAME bytes, the rest of the message in a second (the runtime reads a frame into the buffer it reads
        with, and drops the connection on one that does not fit: see FIRST_FRAME)."""
        message = HEADER.pack(len(payload), stream, kind, 0) + payload
        first, rest = message[:FIRST_FRAME], message[FIRST_FRAME:]
        data = memoryview(FRAME.pack(conn, len(first)) + first + (FRAME.pack(conn, len(rest)) + rest if rest else b""))
        deadline, total = time.monotonic() + FRAME_TIMEOUT, len(data)
        while data:
            if not self._wait(deadline, write=True):  # a runtime that stopped reading: no busy retry of the send
                raise ConnectionBroken("the runtime took %d of the %d bytes sent and nothing more for %.1fs" % (
                    total - len(data), total, FRAME_TIMEOUT), "write")
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                continue
            data = data[sent:]

    def _wait(self, deadline: float, write: bool = False) -> bool:
        """Waits up to ``deadline`` for the socket, in steps of at most POLL; False at the deadline. Ends the wait
        with the connection's end when ``closed`` is set meanwhile (a signal handler asking the plugin to stop)."""
        while True:
            if self.closed:
                raise RuntimeUnavailableError("the NRI connection was closed", "read")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable, writable, _x = select.select([] if write else [self.sock], [self.sock] if write else [], [],
                                                   min(left, POLL))
            if readable or writable:
                return True

    def _read_frame(self, timeout: Optional[float]) -> bool:
        """Read one frame into its connection's stream; False when nothing came within ``timeout`` (None: until
        ``closed``)."""
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        if not self._wait(deadline):
            return False
        conn, length = FRAME.unpack(self._read_exactly(FRAME.size))
        if length > MAX_FRAME:  # refused from its length: nothing of it is read
            raise ConnectionBroken("NRI frame of %d bytes over the limit of %d" % (length, MAX_FRAME), "read")
        payload = self._read_exactly(length)
        if conn in self.streams:
            self.streams[conn] += payload
            self._split(conn)
        else:
            self.dropped += 1  # a connection the plugin does not use
        return True

    def _read_exactly(self, count: int) -> bytes:
        """``count`` bytes, all within FRAME_TIMEOUT of the first: a peer that stops mid-frame breaks the link."""
        chunks = bytearray()
        deadline = time.monotonic() + FRAME_TIMEOUT
        while len(chunks) < count:
            if not self._wait(deadline):
                raise ConnectionBroken("the runtime sent %d of the %d bytes and nothing more for %.1fs" % (
                    len(chunks), count, FRAME_TIMEOUT), "read")
            try:
                chunk = self.sock.recv(min(count - len(chunks), CHUNK))
            except (BlockingIOError, InterruptedError):
                continue
            if not chunk:
                self.closed = True
                raise RuntimeUnavailableError("the runtime closed the NRI connection", "read")
            chunks += chunk
        return bytes(chunks)

    def _split(self, conn: int) -> None:
        buffer = self.streams[conn]
        while len(buffer) >= HEADER.size:
            length, stream, kind, _flags = HEADER.unpack_from(buffer)
            if length > MAX_MESSAGE:
                raise ConnectionBroken("ttrpc message of %d bytes over the limit of %d" % (length, MAX_MESSAGE),
                                       "read")
            if len(buffer) < HEADER.size + length:
                return
            envelope = bytes(buffer[HEADER.size:HEADER.size + length])
            del buffer[:HEADER.size + length]
            if conn == PLUGIN_CONN and kind == REQUEST:
                self.requests.append((stream, envelope))
            elif conn == RUNTIME_CONN and kind == RESPONSE and stream in self.waiting:
                self.responses[stream] = envelope
            else:
                self.dropped += 1  # nobody waits for it: kept, it would slow every later look (and never go)

    # --- serving and calling ------------------------------------------------------------------------------
    def serve_pending(self, handler: Handler) -> None:
        """Answer every request that has arrived on the plugin connection."""
        while self.requests:
            stream, envelope = self.requests.popleft()
            try:
                request = self.pb.Request.FromString(envelope)
            except MessageError as exc:
                raise ConnectionBroken("a ttrpc request envelope that is not one: %s" % exc, "read") from None
            deadline = time.monotonic() + request.timeout_nano / 1e9 if request.timeout_nano > 0 else 0.0
            answer = handler(request.service, request.method, request.payload, deadline)
            if answer is None:
                continue  # too late: the runtime has given up on it
            code, message, reply = answer
            response = self.pb.Response(payload=reply)
            if code != OK:
                response.status.code, response.status.message = code, message
            self.send(PLUGIN_CONN, stream, RESPONSE, response.SerializeToString())

    def serve(self, handler: Handler, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` (None: until ``closed``) for a request and answer it; False when none came."""
        if not self.requests and not self._read_frame(timeout):
            return False
        self.serve_pending(handler)
        return True

    def call(self, service: str, method: str, payload: bytes, timeout: float, handler: Handler) -> bytes:
        """A request to the runtime; requests that arrive before its response are served with ``handler``."""
        stream = self.next_stream
        self.next_stream += 2
        request = self.pb.Request(service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9))
        self.waiting.add(stream)
        try:
            self.send(RUNTIME_CONN, stream, REQUEST, request.SerializeToString())
            deadline = time.monotonic() + timeout
            while stream not in self.responses:
                self.serve_pending(handler)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeTimeoutError("%s.%s: no answer within %.1fs" % (service, method, timeout), method)
                self._read_frame(left)
            envelope = self.responses.pop(stream)
        finally:
            self.waiting.discard(stream)
            self.responses.pop(stream, None)
        try:
            response = self.pb.Response.FromString(envelope)
        except MessageError as exc:
            raise ConnectionBroken("%s.%s: a ttrpc response envelope that is not one: %s" % (service, method, exc),
                                   method) from None
        if response.status.code != OK:
            raise RuntimeRefusedError("%s.%s: %s (code %d)" % (
                service, method, response.status.message, response.status.code), method)
        return bytes(response.payload)
