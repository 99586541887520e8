"""A /proc/irq shaped directory, and an irqbalance that listens as the real one does: for the housekeeping tests.

The kernel's refusal of a managed interrupt (EIO) cannot happen on a plain file: ``ManagedIrqFS`` says False for the
interrupts named managed, as the real ``IrqFS`` does on EIO (the guest's tests meet the real refusal).
"""

from __future__ import annotations

import os
import socket
import struct
import threading

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irq import IrqFS


def proc_irq(root, affinities, default="ff"):
    """``affinities``: IRQ -> CPU list text."""
    os.makedirs(root, exist_ok=True)
    for irq, cpus in affinities.items():
        os.makedirs(os.path.join(root, str(irq)), exist_ok=True)
        for name in ("smp_affinity_list", "effective_affinity_list"):
            with open(os.path.join(root, str(irq), name), "w", encoding="ascii") as handle:
                handle.write(cpus + "\n")
    with open(os.path.join(root, "default_smp_affinity"), "w", encoding="ascii") as handle:
        handle.write(default + "\n")
    return str(root)


def affinity(root, irq):
    with open(os.path.join(root, str(irq), "smp_affinity_list"), encoding="ascii") as handle:
        return handle.read().strip()


class ManagedIrqFS(IrqFS):
    def __init__(self, root, managed=()):
        super().__init__(root)
        self.managed = set(managed)

    def set_affinity_text(self, irq, text):
        return False if irq in self.managed else super().set_affinity_text(irq, text)


class FakeIrqBalance:
    """A daemon on ``<dir>/irqbalance<pid>.sock`` that takes what root sends (SCM_CREDENTIALS, as irqbalance checks)
    and answers ``setup`` with its banned mask. ``commands`` lists what it was told."""

    def __init__(self, directory, pid=None):
        self.pid = pid or os.getpid()
        self.path = os.path.join(str(directory), "irqbalance%d.sock" % self.pid)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.server.listen(4)
        self.commands = []
        self.senders = []
        self.banned = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _address = self.server.accept()
            except OSError:
                return
            with conn:
                data, ancillary, _flags, _addr = conn.recvmsg(16384, socket.CMSG_SPACE(12))
                uid = next((struct.unpack("iII", blob[:12])[1] for level, kind, blob in ancillary
                            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS), None)
                self.senders.append(uid)
                command = data.decode()
                self.commands.append(command)
                if command.startswith("settings cpus "):
                    value = command[len("settings cpus "):]
                    self.banned = 0 if value == "NULL" else sum(1 << int(c) for c in value.split(","))
                elif command == "setup":
                    conn.sendall(b"SLEEP 10 BANNED %08x" % self.banned)

    def close(self):
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self.server.close()
        os.unlink(self.path)
