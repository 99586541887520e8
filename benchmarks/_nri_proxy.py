"""A timing proxy on an NRI socket, between the runtime and one plugin at a time (benchmarks/peers.py).

    python benchmarks/_nri_proxy.py LISTEN UPSTREAM RECORDS

A plugin told ``LISTEN`` as its NRI socket connects here; each connection is joined to a new connection to the
runtime's socket ``UPSTREAM`` and every byte is passed on unchanged, both ways, as soon as it is read. Beside that the
proxy reads NRI's multiplexed frames (a big-endian uint32 connection ID, a uint32 length, the payload) and, on
connection 1 (the plugin's service: the runtime asks, the plugin answers), the ttrpc messages in them (a 10-byte
header: uint32 length, uint32 stream, a type byte 1 request / 2 response, a flags byte). For each request it keeps
the monotonic time its last byte came from the runtime and the method named in its envelope; when the response with
the same stream ID has come whole from the plugin, one JSON line goes to ``RECORDS``:
{"conn", "method", "start", "end", "request_bytes", "reply_bytes"} (times: CLOCK_MONOTONIC seconds, the clock of
every process on the machine).

What the interval holds: the request's way from the proxy to the plugin, the plugin's work, the reply's way back,
two Unix socket hops and this process's wake-ups, the same for every plugin. It does not hold the runtime's own
work before and after. Each direction is its own thread (a blocking read, then a blocking write of what was read),
so a plugin writing while the runtime writes never waits on the proxy.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time

FRAME = struct.Struct(">II")
HEADER = struct.Struct(">IIBB")
PLUGIN_CONN, REQUEST, RESPONSE = 1, 1, 2
CHUNK = 1 << 16


def _varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def method_of(envelope):
    """The method (field 2) of a ttrpc Request envelope; "" when it is not there."""
    at = 0
    try:
        while at < len(envelope):
            key, at = _varint(envelope, at)
            if key & 7 == 2:
                size, at = _varint(envelope, at)
                if key >> 3 == 2:
                    return envelope[at:at + size].decode("utf-8", "replace")
                at += size
            elif key & 7 == 0:
                _value, at = _varint(envelope, at)
            else:
                return ""
    except IndexError:
        return ""
    return ""


class Reader:
    """The ttrpc messages of connection 1 in one direction's byte stream (frames re-assembled)."""

    def __init__(self):
        self.frames = bytearray()
        self.stream = bytearray()

    def feed(self, data):
        """The complete connection-1 messages in ``data`` and what came before: [(stream, kind, envelope)]."""
        self.frames += data
        out = []
        while len(self.frames) >= FRAME.size:
            conn, length = FRAME.unpack_from(self.frames)
            if len(self.frames) < FRAME.size + length:
                break
            payload = bytes(self.frames[FRAME.size:FRAME.size + length])
            del self.frames[:FRAME.size + length]
            if conn != PLUGIN_CONN:
                continue
            self.stream += payload
            while len(self.stream) >= HEADER.size:
                size, stream, kind, _flags = HEADER.unpack_from(self.stream)
                if len(self.stream) < HEADER.size + size:
                    break
                out.append((stream, kind, bytes(self.stream[HEADER.size:HEADER.size + size])))
                del self.stream[:HEADER.size + size]
        return out


class Pair:
    """One plugin connection and its runtime connection."""

    def __init__(self, number, plugin, runtime, records, lock):
        self.number, self.plugin, self.runtime = number, plugin, runtime
        self.records, self.lock = records, lock
        self.pending = {}  # stream -> (method, start, bytes)

    def _pump(self, source, sink, from_runtime):
        reader = Reader()
        try:
            while True:
                data = source.recv(CHUNK)
                now = time.monotonic()
                if not data:
                    break
                done = []
                for stream, kind, envelope in reader.feed(data):  # before the bytes go on: a reply to a request
                    if from_runtime and kind == REQUEST:  # passed on comes back while this thread may be waiting
                        self.pending[stream] = (method_of(envelope), now, len(envelope))
                    elif not from_runtime and kind == RESPONSE and stream in self.pending:
                        method, start, size = self.pending.pop(stream)
                        done.append(json.dumps({"conn": self.number, "method": method, "start": start, "end": now,
                                                "request_bytes": size, "reply_bytes": len(envelope)}))
                sink.sendall(data)
                if done:
                    with self.lock:
                        self.records.write("".join(line + "\n" for line in done))
                        self.records.flush()
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self):
        threads = [threading.Thread(target=self._pump, args=(self.runtime, self.plugin, True), daemon=True),
                   threading.Thread(target=self._pump, args=(self.plugin, self.runtime, False), daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.plugin.close()
        self.runtime.close()


def main(argv):
    listen, upstream, path = argv
    if os.path.exists(listen):
        os.unlink(listen)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen)
    server.listen(4)
    lock = threading.Lock()
    number = 0
    with open(path, "a", encoding="utf-8") as records:
        while True:
            plugin, _addr = server.accept()
            runtime = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                runtime.connect(upstream)
            except OSError:
                plugin.close()
                runtime.close()
                continue
            number += 1
            threading.Thread(target=Pair(number, plugin, runtime, records, lock).run, daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
