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
"""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import RuntimeTimeoutError, RuntimeUnavailableError
from .proto_schema import cached

PLUGIN_CONN, RUNTIME_CONN = 1, 2
REQUEST, RESPONSE = 1, 2
FRAME = struct.Struct(">II")
HEADER = struct.Struct(">IIBB")
MAX_MESSAGE = 4 << 20
MESSAGES = {
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "Request": [("service", 1, "string"), ("method", 2, "string"), ("payload", 3, "bytes"),
                ("timeout_nano", 4, "int64"), ("metadata", 5, "[]KeyValue")],
    "Status": [("code", 1, "int32"), ("message", 2, "string")],
    "Response": [("status", 1, "Status"), ("payload", 2, "bytes")],
}
# gRPC status codes ttrpc uses (google.rpc.Code).
OK, UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED = 0, 2, 4, 12

Handler = Callable[[str, str, bytes, float], Optional[Tuple[int, str, bytes]]]


def schema() -> Any:
    return cached("kubecpu/ttrpc.proto", "ttrpc", MESSAGES, {})


class Channel:
    """One NRI socket: frames in and out, a byte stream per logical connection, ttrpc messages on each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pb = schema()
        self.streams: Dict[int, bytearray] = {PLUGIN_CONN: bytearray(), RUNTIME_CONN: bytearray()}
        self.inbox: List[Tuple[int, int, int, bytes]] = []  # (conn, stream, type, payload) read but not yet used
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
        sock.settimeout(None)
        return cls(sock)

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    # --- frames and messages ------------------------------------------------------------------------------
    def send(self, conn: int, stream: int, kind: int, payload: bytes) -> None:
        message = HEADER.pack(len(payload), stream, kind, 0) + payload
        self.sock.sendall(FRAME.pack(conn, len(message)) + message)

    def _read_frame(self, timeout: Optional[float]) -> bool:
        """Read one frame into its connection's stream; False when nothing came within ``timeout``."""
        if timeout is not None:
            ready, _w, _x = select.select([self.sock], [], [], max(timeout, 0.0))
            if not ready:
                return False
        header = self._read_exactly(FRAME.size)
        conn, length = FRAME.unpack(header)
        payload = self._read_exactly(length)
        if conn in self.streams:
            self.streams[conn] += payload
            self._split(conn)
        return True

    def _read_exactly(self, count: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self.sock.recv(count - len(chunks))
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
                raise RuntimeUnavailableError("ttrpc message of %d bytes is over the limit" % length, "read")
            if len(buffer) < HEADER.size + length:
                return
            self.inbox.append((conn, stream, kind, bytes(buffer[HEADER.size:HEADER.size + length])))
            del buffer[:HEADER.size + length]

    # --- serving and calling ------------------------------------------------------------------------------
    def serve_pending(self, handler: Handler) -> None:
        """Answer every request that has arrived on the plugin connection."""
        for item in [m for m in self.inbox if m[0] == PLUGIN_CONN and m[2] == REQUEST]:
            self.inbox.remove(item)
            _conn, stream, _kind, payload = item
            request = self.pb.Request.FromString(payload)
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
        """Wait up to ``timeout`` (None: forever) for a request and answer it; False when none came."""
        if not any(m[0] == PLUGIN_CONN and m[2] == REQUEST for m in self.inbox) and not self._read_frame(timeout):
            return False
        self.serve_pending(handler)
        return True

    def call(self, service: str, method: str, payload: bytes, timeout: float, handler: Handler) -> bytes:
        """A request to the runtime; requests that arrive before its response are served with ``handler``."""
        stream = self.next_stream
        self.next_stream += 2
        request = self.pb.Request(service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9))
        self.send(RUNTIME_CONN, stream, REQUEST, request.SerializeToString())
        deadline = time.monotonic() + timeout
        while True:
            for item in self.inbox:
                if item[0] == RUNTIME_CONN and item[1] == stream and item[2] == RESPONSE:
                    self.inbox.remove(item)
                    response = self.pb.Response.FromString(item[3])
                    if response.status.code != OK:
                        raise RuntimeUnavailableError("%s.%s: %s (code %d)" % (
                            service, method, response.status.message, response.status.code), method)
                    return bytes(response.payload)
            self.serve_pending(handler)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeTimeoutError("%s.%s: no answer within %.1fs" % (service, method, timeout), method)
            self._read_frame(left)
