"""A scripted HTTP/2 server for the gRPC client's tests: it sends the server preface and then whatever a test's
``behave(link)`` makes it send, hostile frames included, on each connection it accepts."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.wire import grpc_h2, hpack

OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
TRAILERS = [("grpc-status", "0")]
SETTINGS_ACK = grpc_h2.frame(grpc_h2.SETTINGS, grpc_h2.ACK, 0)


def headers(stream, fields, flags=grpc_h2.END_HEADERS):
    return grpc_h2.frame(grpc_h2.HEADERS, flags, stream, hpack.encode(fields))


def message(payload):
    return struct.pack(">BI", 0, len(payload)) + payload


class Server:
    """Accepts connections one after another; ``behave(link)`` speaks for the server on each, after the server's
    SETTINGS preface, the client's, and the ``handshake`` frames (the ACK of the client's SETTINGS)."""

    def __init__(self, path, behave, settings=b"", handshake=(SETTINGS_ACK,)):
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(4)
        self.behave, self.settings, self.handshake = behave, settings, handshake
        self.links = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _address = self.listener.accept()
            except OSError:
                return
            link = Link(conn)
            self.links.append(link)
            with conn:
                try:
                    conn.sendall(grpc_h2.frame(grpc_h2.SETTINGS, 0, 0, self.settings))
                    assert link.read(len(grpc_h2.PREFACE)) == grpc_h2.PREFACE
                    link.until(grpc_h2.SETTINGS)  # the client's
                    link.send(*self.handshake)  # by default its ACK, and nothing before it
                    self.behave(link)
                except (EOFError, OSError):
                    pass

    def close(self):
        for sock in [self.listener] + [link.conn for link in self.links]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept() or recv()
        self.listener.close()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


class Link:
    def __init__(self, conn):
        self.conn, self.frames, self.sent = conn, [], 0

    def read(self, size):
        data = b""
        while len(data) < size:
            chunk = self.conn.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def frame(self):
        head = self.read(9)
        kind, flags, sid = head[3], head[4], struct.unpack(">I", head[5:9])[0]
        self.frames.append((kind, flags, sid, self.read(int.from_bytes(head[:3], "big"))))
        return self.frames[-1]

    def until(self, kind, flags=0):
        """Frames up to one of ``kind`` with ``flags`` set; returns it."""
        while True:
            got = self.frame()
            if got[0] == kind and got[1] & flags == flags:
                return got

    def send(self, *frames):
        data = b"".join(frames)
        self.conn.sendall(data)
        self.sent += len(data)

    def flood(self, make):
        """Frames from ``make()`` until the client closes the connection."""
        while True:
            self.send(make())


def answer(link, stream, *messages):
    link.send(headers(stream, OK_HEADERS), *[grpc_h2.frame(grpc_h2.DATA, 0, stream, message(m)) for m in messages],
              headers(stream, TRAILERS, grpc_h2.END_HEADERS | grpc_h2.END_STREAM))
