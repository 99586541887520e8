"""A scripted NRI runtime: the socket ``bin/kubecpu nri`` connects to, speaking NRI's multiplexer and ttrpc as
containerd does (it answers RegisterPlugin, asks Configure and Synchronize), and then whatever a test makes it send,
malformed frames included. A test drives it from its own thread: ``accept()`` waits for the plugin, ``ask()`` makes
a request and waits for its response."""

from __future__ import annotations

import os
import socket
import struct
import time

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import PLUGIN_SERVICE, schema
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import ttrpc

PB = schema()
TTRPC = ttrpc.schema()


def frame(conn, payload):
    return struct.pack(">II", conn, len(payload)) + payload


def message(stream, kind, envelope):
    return struct.pack(">IIBB", len(envelope), stream, kind, 0) + envelope


def request(method, payload, timeout=2.0):
    return TTRPC.Request(service=PLUGIN_SERVICE, method=method, payload=payload,
                         timeout_nano=int(timeout * 1e9)).SerializeToString()


class Runtime:
    def __init__(self, path):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(4)
        self.listener.settimeout(10)
        self.conn = None
        self.next_stream = 1
        self.buffers = {1: b"", 2: b""}
        self.connections = 0

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def accept(self, timeout=10.0):
        """The plugin's next connection, registered and configured (the runtime's side of the handshake)."""
        self.listener.settimeout(timeout)
        old, (self.conn, _address) = self.conn, self.listener.accept()
        if old is not None:  # only now: closing it first would be what ends the plugin's connection
            old.close()
        self.conn.settimeout(timeout)
        self.connections += 1
        self.buffers, self.next_stream = {1: b"", 2: b""}, 1
        stream, _kind, envelope = self.read_message(2)
        assert TTRPC.Request.FromString(envelope).method == "RegisterPlugin"
        self.send(2, message(stream, ttrpc.RESPONSE, TTRPC.Response(payload=b"").SerializeToString()))
        self.ask("Configure", PB.ConfigureRequest(runtime_name="scripted", runtime_version="1.7.24",
                                                  request_timeout=2000))
        self.ask("Synchronize", PB.SynchronizeRequest())

    def send(self, conn, payload):
        self.conn.sendall(frame(conn, payload))

    def read_message(self, want_conn):
        """The next ttrpc message the plugin sends on ``want_conn`` (others are kept for later)."""
        while True:
            buffer = self.buffers[want_conn]
            if len(buffer) >= 10:
                length, stream, kind, _flags = struct.unpack(">IIBB", buffer[:10])
                if len(buffer) >= 10 + length:
                    self.buffers[want_conn] = buffer[10 + length:]
                    return stream, kind, buffer[10:10 + length]
            head = self._read(8)
            conn, length = struct.unpack(">II", head)
            self.buffers[conn] = self.buffers.get(conn, b"") + self._read(length)

    def _read(self, size):
        data = b""
        while len(data) < size:
            chunk = self.conn.recv(size - len(data))
            if not chunk:
                raise EOFError("the plugin closed the connection")
            data += chunk
        return data

    def ask(self, method, payload_message, raw=None):
        """A request on connection 1; the response envelope (``ttrpc.Response``)."""
        stream = self.next_stream
        self.next_stream += 2
        payload = raw if raw is not None else payload_message.SerializeToString()
        self.send(1, message(stream, ttrpc.REQUEST, request(method, payload)))
        while True:
            got, kind, envelope = self.read_message(1)
            if got == stream and kind == ttrpc.RESPONSE:
                return TTRPC.Response.FromString(envelope)


def rss_kib(pid):
    with open("/proc/%d/status" % pid, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("not within %.1fs: %s" % (timeout, what))
        time.sleep(0.01)
