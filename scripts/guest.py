# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A real server for the test suite: a QEMU guest with 2 sockets x 2 cores x 2 threads, 2 NUMA nodes (memory split
over them), cgroup v2, systemd as PID 1, writable IRQ affinity, containerd 1.6 (Debian 12) installed and 1.7.24 (the
extracted binaries of scripts/runtimes.sh: containerd 1.7.24 and 2.1.9) shared in, as ENVIRONMENT.md found by trying.

    python3 scripts/guest.py build              # the image, once per recipe (cached in ~/.cache/kubecpu/guest)
    python3 scripts/guest.py costs              # what the guest stage is made of: a boot, an interpreter's start, a
                                                # module run, a containerd's start, each timed
    python3 scripts/guest.py run [--timeout S] -- COMMAND...
                                                # a fresh copy-on-write guest, COMMAND run in /src (the checkout,
                                                # read-only), its output printed and its exit code returned

``Guest`` (a context manager) is the same for the tests: a booted guest reached over SSH on a loopback-forwarded port
(``ssh``, ``run``, ``put``), with the checkout at /src and a writable share at /share. Every exit path kills QEMU's
process group and removes its temporary directory: nothing is mounted on the host (the shares are QEMU's 9p), nothing
is left running.

TCG (``-accel tcg,thread=single``): /dev/kvm here is PVM, under which stock kernels hang. A guest vCPU is 25-30x
slower than the host's: functional tests run there, timings stay on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Callable, Dict, List, Optional, Sequence, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout in the guest (read-only): below ansible_collections/kubecpu/cpu_manager, as ansible-test wants it;
# /src links to it.
GUEST_ROOT = "/srv/ansible_collections/kubecpu/cpu_manager"
# Outside the clone (a clone starts empty; the image is the same for every clone of one recipe): $KUBECPU_CACHE, else
# $XDG_CACHE_HOME/kubecpu or ~/.cache/kubecpu, as pip's and Go's caches live in ~/.cache.
CACHE = os.path.join(os.environ.get("KUBECPU_CACHE")
                     or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kubecpu"),
                     "guest")
SUITE = "bookworm"
# What the image holds beyond debootstrap's minbase (each a Debian 12 package).
PACKAGES = ("linux-image-amd64", "initramfs-tools", "zstd", "udev", "dbus", "kmod", "procps", "util-linux",
            "iproute2", "python3", "python3-yaml", "python3-pytest", "busybox-static", "containerd", "runc",
            "numactl", "irqbalance", "openssh-server", "systemd-timesyncd", "conmon", "podman")
INITRD_MODULES = ("virtio_pci", "virtio_blk", "ext4")
IMAGE_SIZE = "3G"
SMP = "8,sockets=2,cores=2,threads=2"
# An Intel vendor for CPUID leaf 0xB: the guest sees SMT siblings. Nehalem, not "max": with max the guest's glibc and
# Python take their AVX2 paths, which TCG emulates slowly. Measured with "guest.py costs" on an idle host (max ->
# Nehalem): an ansible module run 4.4-7.1 -> 3.4-4.6 s, compileall of the core 11.5 -> 9.4 s, bin/kubecpu topology
# 4.4 -> 3.4 s, the boot 69 -> 57 s.
CPU = "Nehalem,vendor=GenuineIntel,xlevel=0x80000008"
NODE_MEMORY = "768M"  # per NUMA node
# The checkout is read-only in the guest: Python keeps its bytecode beside it instead, compiled once per boot (a guest
# vCPU compiles the core about 25x slower than the host).
PYCACHE = "PYTHONPYCACHEPREFIX=/var/tmp/pycache"
# One processor for each Go program (the kubelets, containerd and its shims, CRI-O, podman): TCG emulates the 8 vCPUs
# on one host thread, and a Go runtime with 8 Ps spins for work and locks on vCPUs that only take turns. A CPU
# profile of kubelet 1.37.2 beside the hook test (its /debug/pprof) spent 30 % of its time in the scheduler
# (findRunnable, procyield, futex); on an idle host the roles group's tests in the guest took 574 s instead of 764 s,
# the kubelet's CPU time 34 s instead of 144 s, containerd's 116 s instead of 261 s. Every command over SSH has it,
# and so has every unit systemd starts (set at boot: the kubelet's unit, the agent's). What the tests check does not
# depend on it: the kubelet and kubecpu read the CPUs from sysfs.
GO_PROCS = "GOMAXPROCS=1"
GUEST_ENV = "%s %s " % (PYCACHE, GO_PROCS)  # before each command run over SSH
# No speculation mitigations: under TCG page-table isolation (an Intel vendor makes the kernel think it needs it)
# makes every system call flush the emulated TLB; without them the guest forks and imports about 2x faster.
KERNEL_ARGS = "mitigations=off"
# The guests' emulation ahead of the host's own stages when both want the CPU: scripts/test.sh runs them side by side
# and the guest groups are its long pole. A non-root user's nice refuses a negative value, says so, and runs QEMU as
# it is.
NICE = -5
# seconds a guest may leave the shared SSH connection unanswered before it is dropped: 45 s (ssh's default of three
# 15 s keep-alives) dropped it on 2026-12-02 in a cold run (the guest's kernel saw a soft lockup of 26 s under the
# host's builds), and with it the in-guest pytest that wrote its report over it (a broken pipe)
SERVER_ALIVE_MAX = 600
SERVER_ALIVE_INTERVAL = 15  # seconds between ssh's keep-alives on it
SSH_CONNECT_TIMEOUT = 60  # seconds for a new connection's TCP and banner: a starved guest's sshd answers slowly
SSH_CONNECT_ATTEMPTS = 3  # a command whose connection never opened (the command never ran) is tried again
# what ssh says when a connection never opened (its other exit-255 cases, a connection lost mid-command, are final)
NEVER_CONNECTED = ("ssh: connect to host", "banner exchange", "kex_exchange_identification",
                   "Connection closed by 127.0.0.1", "Connection reset by 127.0.0.1", "mux_client_request_session")
PROBE_TIMEOUT = 20.0  # seconds for one "is it up yet" probe of a booting guest, then another, until BOOT_TIMEOUT
BOOT_TIMEOUT = 480.0  # seconds from QEMU's start to SSH and "running": 60-100 s idle, 180-210 s beside the suite
APART_POLL = 1.0  # seconds between looks at the share for a command run apart from the SSH session (Guest.run_apart)
with open(os.path.join(ROOT, "scripts", "guest_zipcache.py"), encoding="utf-8") as _source:
    _ZIPCACHE = _source.read()
FILES = {  # written into the image: path -> content
    "/etc/fstab": "/dev/vda / ext4 rw,errors=remount-ro 0 1\n"
                  "src %s 9p trans=virtio,version=9p2000.L,ro,msize=262144,nofail 0 0\n" % GUEST_ROOT +
                  "share /share 9p trans=virtio,version=9p2000.L,rw,msize=262144,nofail 0 0\n",
    "/etc/hostname": "kubecpu-guest\n",
    "/etc/hosts": "127.0.0.1 localhost kubecpu-guest\n",
    # QEMU's user network has fixed addresses: set them at once (systemd-networkd and DHCP take half a minute
    # under emulation)
    "/etc/systemd/system/kubecpu-net.service":
        "[Unit]\nDescription=eth0 with QEMU's user network addresses\nBindsTo=sys-subsystem-net-devices-eth0.device\n"
        "After=sys-subsystem-net-devices-eth0.device\nBefore=network.target ssh.service\nWants=network.target\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/sbin/ip link set lo up\n"
        "ExecStart=/sbin/ip link set eth0 up\nExecStart=/sbin/ip address add 10.0.2.15/24 dev eth0\n"
        "ExecStart=/sbin/ip route add default via 10.0.2.2\n\n[Install]\n"
        "WantedBy=sys-subsystem-net-devices-eth0.device multi-user.target\n",
    "/etc/modules-load.d/kubecpu.conf": "9p\n9pnet_virtio\n",
    "/etc/ssh/sshd_config.d/kubecpu.conf": "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                                           "UseDNS no\nMaxStartups 50\n",
    "/etc/initramfs-tools/conf.d/kubecpu": "MODULES=list\nCOMPRESS=zstd\n",
    "/etc/initramfs-tools/modules": "".join(m + "\n" for m in INITRD_MODULES),
    # Ansible's module payloads compiled once per guest, not on every task (scripts/guest_zipcache.py says how much)
    "/usr/local/lib/python3.11/dist-packages/kubecpu_zipcache.py": _ZIPCACHE,
    "/usr/local/lib/python3.11/dist-packages/kubecpu_zipcache.pth": "import kubecpu_zipcache\n",
}
ENABLE = ("kubecpu-net.service", "ssh.service")
DISABLE = ("containerd.service", "irqbalance.service", "systemd-timesyncd.service", "systemd-networkd.service",
           "systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer",
           "e2scrub_reap.service", "fstrim.timer")
MASK = ("modprobe@drm.service",)  # no display: the module load costs ten seconds of boot under emulation


class GuestError(Exception):
    pass


def _run(argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    return subprocess.run(list(argv), check=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def inputs_digest() -> str:
    """What the image is made of: this file's recipe. A change rebuilds it."""
    recipe = json.dumps([SUITE, PACKAGES, INITRD_MODULES, IMAGE_SIZE, FILES, ENABLE, DISABLE, MASK], sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def image_dir() -> str:
    return os.path.join(CACHE, inputs_digest())


def build(force: bool = False, log=sys.stderr) -> str:  # type: ignore[no-untyped-def]
    """The image (root filesystem, kernel, initrd, SSH key) for the current recipe; built when missing, by one
    process at a time (two clones' suites share the cache). Root only."""
    target = image_dir()
    if not force and os.path.exists(os.path.join(target, "ready")):
        return target
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and os.path.exists(os.path.join(target, "ready")):  # another process built it meanwhile
            return target
        return _build(target, log)


def _build(target: str, log: IO[str]) -> str:
    missing = [tool for tool in ("debootstrap", "mkfs.ext4", "qemu-system-x86_64") if shutil.which(tool) is None]
    if missing:
        raise GuestError("cannot build the guest image: %s missing (apt-get install --no-install-recommends "
                         "debootstrap e2fsprogs qemu-system-x86)" % ", ".join(missing))
    shutil.rmtree(target, ignore_errors=True)
    work = tempfile.mkdtemp(prefix="build-", dir=CACHE)
    rootfs = os.path.join(work, "rootfs")
    started = time.monotonic()
    try:
        print("guest: debootstrap %s (minbase)" % SUITE, file=log, flush=True)
        _quiet(["debootstrap", "--variant=minbase", "--include=systemd-sysv", SUITE, rootfs,
                "http://deb.debian.org/debian"], os.path.join(work, "debootstrap.log"))
        print("guest: packages: %s" % " ".join(PACKAGES), file=log, flush=True)
        chroot_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C.UTF-8")
        with _chroot_mounts(rootfs):
            for path, content in FILES.items():  # the initramfs settings before the kernel's package builds it
                _write(rootfs, path, content)
            _quiet(["chroot", rootfs, "apt-get", "install", "-y", "--no-install-recommends", *PACKAGES],
                   os.path.join(work, "apt.log"), env=chroot_env)
            _quiet(["chroot", rootfs, "apt-get", "clean"], os.path.join(work, "apt.log"), env=chroot_env)
            _quiet(["chroot", rootfs, "systemctl", "enable", *ENABLE], os.path.join(work, "systemctl.log"))
            _quiet(["chroot", rootfs, "systemctl", "disable", *DISABLE], os.path.join(work, "systemctl.log"))
            _quiet(["chroot", rootfs, "systemctl", "mask", *MASK], os.path.join(work, "systemctl.log"))
        os.makedirs(rootfs + GUEST_ROOT, exist_ok=True)
        os.makedirs(os.path.join(rootfs, "share"), exist_ok=True)
        os.symlink(GUEST_ROOT, os.path.join(rootfs, "src"))
        key = os.path.join(work, "id_ed25519")
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kubecpu-guest", "-f", key])
        os.makedirs(os.path.join(rootfs, "root", ".ssh"), mode=0o700, exist_ok=True)
        shutil.copy(key + ".pub", os.path.join(rootfs, "root", ".ssh", "authorized_keys"))
        boot = os.path.join(rootfs, "boot")
        kernel = sorted(f for f in os.listdir(boot) if f.startswith("vmlinuz-"))[-1]
        shutil.copy(os.path.join(boot, kernel), os.path.join(work, "vmlinuz"))
        shutil.copy(os.path.join(boot, kernel.replace("vmlinuz-", "initrd.img-")), os.path.join(work, "initrd.img"))
        print("guest: mkfs.ext4 -d (%s, sparse)" % IMAGE_SIZE, file=log, flush=True)
        _quiet(["mkfs.ext4", "-q", "-F", "-L", "root", "-d", rootfs, os.path.join(work, "root.img"), IMAGE_SIZE],
               os.path.join(work, "mkfs.log"))
        shutil.rmtree(rootfs)
        os.rename(work, target)
        with open(os.path.join(target, "ready"), "w", encoding="utf-8") as handle:
            handle.write("%s built in %.0f s\n" % (inputs_digest(), time.monotonic() - started))
    except BaseException:
        with contextlib.suppress(Exception):
            _umount_below(rootfs)
        shutil.rmtree(work, ignore_errors=True)
        raise
    for old in os.listdir(CACHE):  # images of earlier recipes
        if old != os.path.basename(target) and not old.startswith((".", "build-")):
            shutil.rmtree(os.path.join(CACHE, old), ignore_errors=True)
    print("guest: image %s ready in %.0f s" % (target, time.monotonic() - started), file=log, flush=True)
    return target


def _quiet(argv: Sequence[str], log_path: str, env: Optional[Dict[str, str]] = None) -> None:
    with open(log_path, "ab") as log:
        result = subprocess.run(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if result.returncode != 0:
        with open(log_path, "rb") as log:
            tail = log.read()[-3000:].decode("utf-8", "replace")
        raise GuestError("%s failed (%d):\n%s" % (" ".join(argv[:3]), result.returncode, tail))


def _write(rootfs: str, path: str, content: str) -> None:
    full = os.path.join(rootfs, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(content)


@contextlib.contextmanager
def _chroot_mounts(rootfs: str):  # type: ignore[no-untyped-def]
    """/proc, /sys and /dev for apt-get and the kernel's hooks in the chroot, unmounted whatever happens."""
    mounted = []
    try:
        for fstype, where in (("proc", "proc"), ("sysfs", "sys"), ("devtmpfs", "dev")):
            point = os.path.join(rootfs, where)
            _run(["mount", "-t", fstype, fstype, point])
            mounted.append(point)
        yield
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "-l", point], check=False)


def _umount_below(rootfs: str) -> None:
    with open("/proc/mounts", encoding="utf-8") as handle:
        points = [line.split()[1] for line in handle if line.split()[1].startswith(rootfs + "/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_LIVE: Set[Guest] = set()  # guests started and not stopped: what a termination stops
_HOST_TESTS: Set[subprocess.Popen[bytes]] = set()  # host-side test runs (process group leaders)


_STOPPING = threading.Event()  # set by a termination: no group starts anything more


def _terminate(_signum: int, _frame: object) -> None:
    """SIGTERM/SIGINT: every guest's QEMU and every host-side test run killed (their own process groups), then exit
    at once (the groups' threads are not waited for)."""
    _STOPPING.set()
    for guest in list(_LIVE):
        guest.stop()
    for proc in list(_HOST_TESTS):  # after the guests: a group whose guest went may have started one meanwhile
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    os._exit(143)


class Guest:
    """One booted guest; ``with Guest() as guest: guest.run(["lscpu"])``."""

    def __init__(self, name: str = "guest", share: Optional[str] = None, timeout: float = BOOT_TIMEOUT) -> None:
        self.name = name
        self.image = build()
        self.work = tempfile.mkdtemp(prefix="kubecpu-guest-%s-" % name)
        self.share = share or os.path.join(self.work, "share")
        os.makedirs(self.share, exist_ok=True)
        self.port = _free_port()
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]
        self.key = os.path.join(self.work, "id_ed25519")
        shutil.copy(os.path.join(self.image, "id_ed25519"), self.key)
        os.chmod(self.key, 0o600)

    @classmethod
    def attach(cls, info: Dict[str, object]) -> Guest:
        """A guest another process booted (``info()``), to reach over SSH; this object never stops it."""
        guest = cls.__new__(cls)
        guest.name, guest.port, guest.key = str(info["name"]), int(info["port"]), str(info["key"])  # type: ignore
        guest.work, guest.share, guest.proc, guest.timeout = "", "", None, BOOT_TIMEOUT
        return guest

    def info(self) -> Dict[str, object]:
        return {"name": self.name, "port": self.port, "key": self.key}

    def inventory(self, group: Optional[str] = None) -> str:
        """An Ansible inventory (INI) naming this guest kubecpu-guest, reached over its forwarded SSH port."""
        return "%skubecpu-guest ansible_host=127.0.0.1 ansible_port=%d ansible_user=root " \
               "ansible_ssh_private_key_file=%s ansible_python_interpreter=/usr/bin/python3 " \
               "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'\n" % (
                   "[%s]\n" % group if group else "", self.port, self.key)

    # --- life ---------------------------------------------------------------------------------------------------
    def argv(self) -> List[str]:
        nodes = []
        for node in (0, 1):
            nodes += ["-object", "memory-backend-ram,id=mem%d,size=%s" % (node, NODE_MEMORY),
                      "-numa", "node,nodeid=%d,memdev=mem%d" % (node, node),
                      "-numa", "cpu,node-id=%d,socket-id=%d" % (node, node)]
        return ["nice", "-n", str(NICE), "qemu-system-x86_64", "-name", "kubecpu-%s" % self.name,
                "-accel", "tcg,thread=single", "-machine", "q35", "-cpu", os.environ.get("KUBECPU_GUEST_CPU", CPU),
                "-smp", SMP,
                "-m", "%dM" % (2 * int(NODE_MEMORY.rstrip("M"))), *nodes,
                "-numa", "dist,src=0,dst=1,val=21",
                "-kernel", os.path.join(self.image, "vmlinuz"), "-initrd", os.path.join(self.image, "initrd.img"),
                "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1 quiet " + KERNEL_ARGS,
                "-drive", "file=%s,if=virtio,format=raw,snapshot=on,cache=unsafe" % os.path.join(self.image,
                                                                                                 "root.img"),
                "-virtfs", "local,path=%s,mount_tag=src,security_model=none,readonly=on,id=src" % ROOT,
                "-virtfs", "local,path=%s,mount_tag=share,security_model=none,id=share" % self.share,
                "-netdev", "user,id=net0,hostfwd=tcp:127.0.0.1:%d-:22" % self.port,
                "-device", "virtio-net-pci,netdev=net0",
                "-display", "none", "-serial", "file:%s" % os.path.join(self.work, "console.log"),
                "-monitor", "none", "-no-reboot"]

    def start(self) -> None:
        env = dict(os.environ, TMPDIR=self.work)  # the snapshot's overlay lives and dies with the guest
        _LIVE.add(self)
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.work, "qemu.log"), "wb"),  # pylint: disable=consider-using-with
                                     start_new_session=True, env=env)
        deadline = time.monotonic() + self.timeout
        while True:
            if self.proc.poll() is not None:
                raise GuestError("QEMU exited (%s) before the guest was up:\n%s" % (self.proc.returncode, self.log()))
            if time.monotonic() > deadline:
                raise GuestError("the guest was not up within %.0f s:\n%s" % (self.timeout, self.log()))
            if self._up(min(PROBE_TIMEOUT, max(1.0, deadline - time.monotonic()))):
                break
            time.sleep(1)
        if self.ssh(["mountpoint", "-q", GUEST_ROOT], check=False).returncode != 0:
            raise GuestError("the checkout is not shared in at /src:\n%s" % self.log())
        self.ssh(["systemctl", "set-environment", GO_PROCS])  # for every unit started from now on

    def _up(self, timeout: float) -> bool:
        """Whether the booting guest answers SSH and systemd has finished starting. A probe that does not end within
        ``timeout`` is a guest still booting, never an error: slirp accepts the connection before the guest's sshd
        listens, so ssh waits for a banner that comes only with the boot (on 2026-12-07 a loaded CI machine's two
        guests both took longer than one 60 s probe, and that probe's timeout ended the stage)."""
        try:
            probe = self.ssh(["systemctl", "is-system-running", "--wait"], timeout=timeout, check=False, attempts=1)
        except GuestError:
            return False
        return probe.returncode == 0 or probe.stdout.strip() in ("running", "degraded")

    def stop(self) -> None:
        _LIVE.discard(self)
        proc, self.proc = self.proc, None
        if proc is not None and os.path.exists(self.control_path()):  # the shared connection ends with the guest
            subprocess.run(self.ssh_argv()[:-1] + ["-O", "exit", "root@127.0.0.1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30, check=False)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)

    def cpu_seconds(self) -> float:
        """The host CPU time QEMU (the whole emulated machine) has used so far; 0 once it is gone."""
        if self.proc is None:
            return 0.0
        try:
            with open("/proc/%d/stat" % self.proc.pid, encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def __enter__(self) -> Guest:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def log(self, lines: int = 40) -> str:
        try:
            with open(os.path.join(self.work, "console.log"), encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return "(no console log)"

    # --- inside -------------------------------------------------------------------------------------------------
    def ssh_argv(self) -> List[str]:
        """One SSH connection per guest, shared by every command (the stage's and its host tests': the same path for
        the same port): a key exchange costs the guest's sshd 1-2 s under emulation, a command over the open
        connection a few milliseconds. A guest that does not answer for a while is starved, not gone: the connection
        waits for it SERVER_ALIVE_MAX seconds (each command has its own timeout, and QEMU's exit closes the socket).
        The connection lasts as long as the guest (``stop`` ends it): with ``ControlPersist=300`` it ended during a
        386 s playbook of the kubelet role's (Ansible has connections of its own), and the next command's new one
        failed (exit 255) on a starved guest on 2026-12-02."""
        return ["ssh", "-i", self.key, "-p", str(self.port), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=%d" % SSH_CONNECT_TIMEOUT,
                "-o", "ServerAliveInterval=%d" % SERVER_ALIVE_INTERVAL,
                "-o", "ServerAliveCountMax=%d" % (SERVER_ALIVE_MAX // SERVER_ALIVE_INTERVAL),
                "-o", "LogLevel=ERROR", "-o", "ControlMaster=auto",
                "-o", "ControlPath=%s" % self.control_path(), "-o", "ControlPersist=yes", "root@127.0.0.1"]

    def control_path(self) -> str:
        return os.path.join(tempfile.gettempdir(), "kubecpu-ssh-%d" % self.port)

    def ssh(self, argv: Sequence[str], timeout: float = 600, check: bool = True, stdin: Optional[str] = None,
            attempts: int = SSH_CONNECT_ATTEMPTS) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        """``argv`` run in the guest (quoted for its shell); the completed process, output as text. A connection that
        never opened is tried ``attempts`` times (a booting guest's probe: once)."""
        command = GUEST_ENV + " ".join(_quote(part) for part in argv)
        deadline = time.monotonic() + timeout
        for attempt in range(1, attempts + 1):
            try:
                result = subprocess.run(self.ssh_argv() + ["--", command], capture_output=True, text=True,
                                        timeout=max(1.0, deadline - time.monotonic()), check=False, input=stdin)
            except subprocess.TimeoutExpired as exc:
                raise GuestError("in the guest, %s: no end within %.0f s" % (command, timeout)) from exc
            if result.returncode != 255 or not _never_connected(result.stderr):
                break
            print("guest %s: no SSH connection for %s (attempt %d): %s" % (
                self.name, command, attempt, result.stderr.strip()), file=sys.stderr)
        if check and result.returncode != 0:
            raise GuestError("in the guest, %s: exit %d\n%s%s%s" % (
                command, result.returncode, result.stdout, result.stderr,
                "\nthe console's end:\n" + self.log() if result.returncode == 255 else ""))
        return result

    def run(self, argv: Sequence[str], timeout: float = 600, output: Optional[IO[bytes]] = None) -> int:
        """``argv`` in the checkout, its output streamed to ``output`` (default: this process's); its exit code."""
        command = "cd %s && %s%s" % (GUEST_ROOT, GUEST_ENV, " ".join(_quote(part) for part in argv))
        try:
            return subprocess.run(self.ssh_argv() + ["--", command], timeout=timeout, check=False, stdout=output,
                                  stderr=subprocess.STDOUT if output is not None else None).returncode
        except subprocess.TimeoutExpired as exc:
            raise GuestError("in the guest, %s: no end within %.0f s" % (command, timeout)) from exc

    def run_apart(self, argv: Sequence[str], name: str, timeout: float, output: IO[bytes]) -> int:
        """``argv`` in the checkout like ``run``, but in a session of its own in the guest, its output and then its exit
        code written to the share (``<name>.out``, ``<name>.rc``): a dropped SSH connection loses neither (on
        2026-12-02 one took the in-guest pytest's report with it). The output is copied to ``output`` as it grows;
        its exit code once the share has it, a GuestError when QEMU exits or ``timeout`` passes first."""
        out, code = os.path.join(self.share, name + ".out"), os.path.join(self.share, name + ".rc")
        for path in (out, code):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        inside = "cd {root} && {env}{command} </dev/null >/share/{name}.out 2>&1; echo $? >/share/{name}.rc.tmp && " \
                 "mv /share/{name}.rc.tmp /share/{name}.rc".format(
                     root=GUEST_ROOT, env=GUEST_ENV, command=" ".join(_quote(part) for part in argv), name=_quote(name))
        self.ssh(["sh", "-c", "setsid -f sh -c %s </dev/null >/dev/null 2>&1" % _quote(inside)], timeout=60)
        deadline = time.monotonic() + timeout
        copied = 0
        while True:
            done = os.path.exists(code)  # before the last copy: everything it wrote is in the file by then
            with contextlib.suppress(FileNotFoundError), open(out, "rb") as handle:
                handle.seek(copied)
                chunk = handle.read()
                output.write(chunk)
                output.flush()
                copied += len(chunk)
            if done:
                with open(code, encoding="ascii") as handle:
                    return int(handle.read().strip())
            if self.proc is not None and self.proc.poll() is not None:
                raise GuestError("QEMU exited (%s) while %s ran:\n%s" % (self.proc.returncode, name, self.log()))
            if time.monotonic() > deadline:
                raise GuestError("in the guest, %s: no end within %.0f s" % (" ".join(argv), timeout))
            time.sleep(APART_POLL)


# The guest stage of scripts/test.sh: groups of tests, a fresh guest each, side by side (each guest emulates on one
# host core). "guest": pytest inside the guest; "host": pytest here against that guest (KUBECPU_GUEST names it).
# The two groups are balanced by their measured minutes (scripts/test.sh's table shows each part): the node group
# pins (discovery, pinning), runs the real kubelets (beside kubecpu's predictions through an upgrade and under the
# planned options, a pod they reject, a corrupt checkpoint and its rebuild, the configurations they refuse, the
# judge's three cases, the options and Topology Manager policies) and then the kubelet role's rollouts beside the real
# kubelet; the roles group resizes and rebuilds (operations), keeps interrupts and daemons off exclusive CPUs
# (housekeeping), per-pod power, runs both cgroup drivers on every runtime, live defragmentation, exclusive Burstable
# containers and the system partition, the NRI plugins' choices beside kubecpu's, CRI-O, the fail-closed hook beside a
# real kubelet of policy none, and then the agent role's runs.
# (2026-12-07, CI's machine: in the guest, node 2,765 s and roles 2,742 s; from the host, the agent role's 580 s and
# the kubelet role's rollouts still running when the node group's 3,600 s ran out. The options' 1.36 cases went (1.36
# allocates as 1.35 does) and the operations moved to the roles group, which has the same two containerds running.)
GROUPS: Dict[str, Dict[str, List[str]]] = {
    "node": {"guest": ["tests/guest/test_discovery.py", "tests/guest/test_pinning.py", "tests/guest/test_kubelet.py",
                       "tests/guest/test_kubelet_refusals.py", "tests/guest/test_kubelet_judge.py",
                       "tests/guest/test_kubelet_options.py"],
             "host": ["tests/guest_host/test_kubelet_role.py"]},
    "roles": {"guest": ["tests/guest/test_operations.py", "tests/guest/test_housekeeping.py",
                        "tests/guest/test_power.py", "tests/guest/test_drivers.py", "tests/guest/test_defrag.py",
                        "tests/guest/test_workload_asks.py", "tests/guest/test_peer_choices.py",
                        "tests/guest/test_crio.py", "tests/guest/test_kubelet_hook.py"],
              "host": ["tests/guest_host/test_agent_role.py"]},
}


def stage(output: str, timeout: float, groups: Sequence[str], ready: Optional[str] = None) -> int:
    """Every group in ``groups`` on a guest of its own, at once; their logs and JUnit files in ``output``. 0 when
    every group passed. With ``ready``, the guests boot at once and the host-side tests wait for that file (see
    _host_setup): scripts/test.sh starts the stage before the virtual environment and the built collection exist."""
    started = time.monotonic()
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "timings.tsv"), "w", encoding="utf-8"):
        pass  # this run's parts only
    # The builds first, beside the image's: with every cache cold they are the stage's critical path (a run on
    # 2026-12-01 waited 1,732 s in the node group and 1,296 s in the roles group for the kubelets, built one after
    # another from 223 s on); warm, each finds its cache at once.
    builds = {build: threading.Thread(target=_share, args=(output, build), name=build)
              for build, (_steps, tests) in SHARED_BUILDS.items()
              if any(test in GROUPS[name]["guest"] + GROUPS[name].get("host", []) for name in groups for test in tests)}
    for build_thread in builds.values():
        build_thread.start()
    build()
    _timing(output, time.monotonic() - started, "the image (built when its recipe is new, else found in %s)" % CACHE)
    for runtime in ("containerd-1.7", "containerd-2.1"):  # extracted into the checkout, which the guest shares
        got = subprocess.run(["bash", os.path.join(ROOT, "scripts", "runtimes.sh"), runtime], capture_output=True,
                             text=True, check=False)
        if got.returncode != 0:
            print("guest: %s could not be had for the guest:\n%s" % (runtime, got.stderr[-2000:]), file=sys.stderr)
            return 3
    results: Dict[str, Tuple[int, float]] = {}
    threads = [threading.Thread(target=_group, args=(name, output, timeout, results), kwargs={"ready": ready},
                                name=name) for name in groups]
    for thread in threads:
        thread.start()
    for thread in [*threads, *builds.values()]:
        thread.join()
    for name in groups:
        code, took = results.get(name, (3, 0.0))
        print("\n--- guest group %s: exit %d after %.0f s" % (name, code, took))
        with open(os.path.join(output, "guest-%s.log" % name), encoding="utf-8", errors="replace") as handle:
            sys.stdout.write(handle.read())
    passed = {name: results.get(name, (3, 0.0))[0] == 0 for name in groups}
    summary = ", ".join("%s %s" % (name, "passed" if ok else "FAILED") for name, ok in passed.items())
    _timing(output, time.monotonic() - started, "the guest stage")
    print("guest stage: %s in %.0f s" % (summary, time.monotonic() - started))
    return 0 if all(passed.values()) else 1


_TIMINGS_LOCK = threading.Lock()
KUBELETS = ("1.35", "1.36", "1.37")
# What guest tests run that the host builds (once per machine, outside the clone): name -> (its builds, one after
# another, each the command that prints where its binaries are and {binary: its path in the checkout's .cache}, where
# the guest sees it; the test files that wait for them). Built in the background while the guests boot and run; a
# test waits for its files (the share is live), so a cold build delays only the tests that need it.
_CONTAINERD_24 = {name: "containerd-2.4/" + name for name in ("containerd", "containerd-shim-runc-v2", "ctr")}
SHARED_BUILDS: Dict[str, Tuple[List[Tuple[List[str], Dict[str, str]]], Tuple[str, ...]]] = {
    "cri-o": ([(["runtimes.sh", "cri-o"], {"crio": "cri-o/crio", "pinns": "cri-o/pinns"})],
              ("tests/guest/test_crio.py", "tests/guest/test_drivers.py", "tests/guest/test_defrag.py",
               "tests/guest/test_workload_asks.py")),
    "containerd-2.4": ([(["runtimes.sh", "containerd-2.4"], _CONTAINERD_24)],
                       ("tests/guest/test_drivers.py", "tests/guest/test_defrag.py",
                        "tests/guest/test_workload_asks.py", "tests/guest/test_peer_choices.py")),
    "peers": ([(["peers.sh", "bin-dir"], {"topology-aware": "peers/topology-aware", "balloons": "peers/balloons"})],
              ("tests/guest/test_peer_choices.py",)),
    "kubelets": ([(["kubelet.sh", minor], {"kubelet": "kubelet/kubelet-%s" % minor}) for minor in KUBELETS],
                 ("tests/guest/test_kubelet.py", "tests/guest/test_kubelet_refusals.py",
                  "tests/guest/test_kubelet_judge.py", "tests/guest/test_kubelet_hook.py",
                  "tests/guest/test_kubelet_options.py",
                  "tests/guest_host/test_kubelet_role.py")),
}


def _share(output: str, name: str) -> None:
    """The builds of ``name`` (SHARED_BUILDS) copied into the checkout; for one that fails, ``<file>.failed`` says
    why."""
    for argv, files in SHARED_BUILDS[name][0]:
        started = time.monotonic()
        # at the guests' priority, ahead of the host's own stages: what waits for a cold build is a guest's tests
        got = subprocess.run(["nice", "-n", str(NICE), "bash", os.path.join(ROOT, "scripts", argv[0]), *argv[1:]],
                             capture_output=True, text=True, check=False)
        built = got.stdout.strip().splitlines()[-1] if got.returncode == 0 else ""
        for binary, where in files.items():
            target = os.path.join(ROOT, ".cache", where)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not built:  # the test waiting for the file stops at once with why
                with open(target + ".failed", "w", encoding="utf-8") as handle:
                    handle.write("%s failed:\n%s" % (" ".join(argv), got.stderr[-2000:]))
                continue
            shutil.copy2(os.path.join(built, binary), target + ".tmp")
            os.replace(target + ".tmp", target)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target + ".failed")
        _timing(output, time.monotonic() - started, "  for the guest: %s (built, or found in the cache)"
                % " ".join(argv))


def _timing(output: str, seconds: float, what: str) -> None:
    """One line of timings.tsv (scripts/test.sh's table), written when the part ends: a stage stopped half-way still
    shows what it finished."""
    with _TIMINGS_LOCK, open(os.path.join(output, "timings.tsv"), "a", encoding="utf-8") as handle:
        handle.write("%.0f\t%s\n" % (seconds, what))


def _busy_line(name: str, busy: Sequence[Tuple[str, float]], took: float) -> str:
    """What the group's emulation cost the host: a guest group is its long pole when QEMU gets little of a host CPU
    (the host's own stages beside it) or when it waits (for its Ansible controller, a fixed window)."""
    parts, before = [], 0.0
    for part, total in busy:
        parts.append("%s %.0f" % (part, total - before))
        before = total
    return "  group %s: its QEMU's CPU seconds (%s), %.0f%% of one host CPU over the group's %.0f s" % (
        name, ", ".join(parts), 100 * before / max(took, 1.0), took)


def _group(name: str, output: str, timeout: float, results: Dict[str, Tuple[int, float]], *,
           ready: Optional[str] = None) -> None:
    spec = GROUPS[name]
    started = time.monotonic()
    code = 3
    with open(os.path.join(output, "guest-%s.log" % name), "wb") as log:
        try:
            with Guest(name) as guest:
                booted = time.monotonic() - started
                busy = [("boot", guest.cpu_seconds())]  # QEMU's CPU time at the end of each part
                _timing(output, booted, "  group %s: boot to SSH and systemd running" % name)
                log.write(b"guest %s: up in %.0f s\n" % (name.encode(), booted))
                log.flush()
                code = 0
                if spec.get("guest"):
                    began = time.monotonic()
                    code = guest.run_apart(["python3", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEP",
                                            "--durations=20", "--junitxml=/share/junit.xml", *spec["guest"]],
                                           "pytest", max(60.0, started + timeout - time.monotonic()), log)
                    _timing(output, time.monotonic() - began,
                            "  group %s: pytest in the guest: %s" % (name, " ".join(spec["guest"])))
                    busy.append(("in the guest", guest.cpu_seconds()))
                    if os.path.exists(os.path.join(guest.share, "junit.xml")):
                        shutil.copy(os.path.join(guest.share, "junit.xml"),
                                    os.path.join(output, "junit-guest-%s.xml" % name))
                if spec.get("host"):
                    python, extra = _host_setup(ready, started + timeout)
                    began = time.monotonic()
                    env = dict(os.environ, KUBECPU_GUEST=json.dumps(guest.info()), **extra)
                    host = _host_tests(spec["host"], os.path.join(output, "junit-guest-%s-host.xml" % name), env,
                                       log, max(60.0, started + timeout - time.monotonic()), python=python)
                    _timing(output, time.monotonic() - began,
                            "  group %s: pytest on the host: %s" % (name, " ".join(spec["host"])))
                    code = code or host
                    busy.append(("from the host", guest.cpu_seconds()))
                _timing(output, busy[-1][1], _busy_line(name, busy, time.monotonic() - started))
                if code:  # the guest's kernel messages, for a guest that went away or misbehaved
                    with contextlib.suppress(OSError):
                        shutil.copy(os.path.join(guest.work, "console.log"),
                                    os.path.join(output, "guest-%s-console.log" % name))
        except (GuestError, subprocess.TimeoutExpired) as exc:
            log.write(("guest %s: %s\n" % (name, exc)).encode())
            code = 3
    results[name] = (code, time.monotonic() - started)
    _timing(output, results[name][1], "group %s (exit %d)" % (name, code))


READY_POLL = 1.0  # seconds between looks for the ready file
# A group's deadline, its boot and its tests: a guard against a hang, not the suite's budget. CI stops the whole suite
# at 5,400 s and the stage starts in its first minute; on 2026-12-07 CI's node group, every test passing, was still in
# the kubelet role's rollouts when an earlier 3,600 s ran out (CI's machine ran the guests about twice as slowly as this
# one beside the host's stages).
GROUP_TIMEOUT = 4800


def _host_setup(ready: Optional[str], deadline: float) -> Tuple[str, Dict[str, str]]:
    """The interpreter (with pytest and ansible-core) and the environment the host-side tests run with: this one's,
    or, with ``ready``, what that file says once it exists (JSON: {"python": path, "env": {name: value}}), waited
    for until ``deadline`` (time.monotonic())."""
    if not ready:
        return sys.executable, {}
    while not os.path.exists(ready):
        if _STOPPING.is_set() or time.monotonic() > deadline:
            raise GuestError("the host-side tests' set-up (%s) never came" % ready)
        time.sleep(READY_POLL)
    try:
        with open(ready, encoding="utf-8") as handle:
            setup = json.load(handle)
    except (OSError, ValueError) as exc:
        raise GuestError("%s: %s" % (ready, exc)) from None
    env = setup.get("env", {}) if isinstance(setup, dict) else None
    if not isinstance(setup.get("python") if isinstance(setup, dict) else None, str) or not isinstance(
            env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise GuestError("%s: not {\"python\": path, \"env\": {name: value}}" % ready)
    return setup["python"], dict(setup.get("env", {}))


def _host_tests(paths: Sequence[str], junit: str, env: Dict[str, str], log: IO[bytes], timeout: float, *,
                python: str) -> int:
    """pytest on the host against the guest; on a timeout its whole process group (ansible-playbook, ssh) is killed:
    nothing is left behind."""
    if _STOPPING.is_set():
        return 143
    # at the guests' priority: their Ansible controller and SSH are on the group's critical path as much as QEMU is
    proc = subprocess.Popen(["nice", "-n", str(NICE), python, "-m", "pytest", "-q", "-rfEP", "--durations=20",
                             "--junitxml=%s" % junit, *paths], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    _HOST_TESTS.add(proc)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _HOST_TESTS.discard(proc)


# What one step costs in the guest: `guest.py costs` times each (a fresh guest; its median of REPEAT runs), the
# figures behind the guest stage's shape (which proofs need the guest, how many module runs each may spend).
COST_REPEAT = 3
_COST_STEPS = (  # (what, argv in the guest, runs): argv runs in the checkout
    ("an SSH round trip (true)", ["true"], COST_REPEAT),
    ("python3 -c pass (the interpreter's start)", ["python3", "-c", "pass"], COST_REPEAT),
    ("python3 -I -S -c pass (no site)", ["python3", "-I", "-S", "-c", "pass"], COST_REPEAT),
    ("the core compiled (compileall -f plugins/module_utils, no bytecode kept)",
     ["python3", "-c", "import compileall, sys; sys.pycache_prefix = '/tmp/costs-pycache'; "
      "compileall.compile_dir('plugins/module_utils', quiet=1, force=True)"], 1),
    ("bin/kubecpu topology (its bytecode cached)", ["python3", "bin/kubecpu", "topology"], COST_REPEAT),
    ("containerd 1.6 lab started and stopped (lab.py start --systemd --slow; stop)",
     ["sh", "-c", "python3 scripts/lab.py start /run/costs-lab --systemd --slow >/dev/null && "
      "python3 scripts/lab.py stop /run/costs-lab >/dev/null"], 1),
)
_COST_MODULES = (  # (what, module, its arguments): one ad-hoc ansible run each, from the host
    ("ansible ping (a module run: AnsiballZ, Python's start, ansible's module_utils compiled)",
     "ansible.builtin.ping", ""),
    ("ansible command true", "ansible.builtin.command", "true"),
    ("ansible stat", "ansible.builtin.stat", "path=/etc/hostname"),
    ("kubecpu.cpu_manager.cpu_manager_info (the core's modules compiled too)", "kubecpu.cpu_manager.cpu_manager_info",
     ""),
)


def costs() -> int:
    """Boot a guest and time what the guest stage is made of; a table on stdout."""
    started = time.monotonic()

    def row(seconds: float, what: str) -> None:
        print("%7.1f s  %s" % (seconds, what), flush=True)

    with Guest("costs") as guest:
        row(time.monotonic() - started, "boot to SSH and systemd running")
        for what, argv, runs in _COST_STEPS:
            row(_median(runs, lambda argv=argv, what=what: _in_guest(guest, argv, what)), what)
        inventory = os.path.join(guest.work, "inventory.ini")
        with open(inventory, "w", encoding="utf-8") as handle:
            handle.write(guest.inventory())
        env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="False",
                   ANSIBLE_COLLECTIONS_PATH=os.environ.get("KUBECPU_COLLECTIONS_PATH")
                   or os.path.join(ROOT, ".cache", "collections"))
        ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
        quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        row(_median(COST_REPEAT, lambda: _run([ansible, "localhost", "-c", "local", "-m", "ansible.builtin.ping"],
                                              **quiet)),
            "ansible ping on the host itself (the controller's part)")
        for what, module, args in _COST_MODULES:
            argv = [ansible, "-i", inventory, "all", "-m", module, *(["-a", args] if args else [])]
            row(_median(COST_REPEAT, lambda argv=argv: _run(argv, **quiet)), what)
    return 0


def _median(runs: int, step: Callable[[], object]) -> float:
    """The median wall time of ``runs`` calls of ``step``."""
    times = []
    for _repeat in range(runs):
        began = time.monotonic()
        step()
        times.append(time.monotonic() - began)
    return sorted(times)[len(times) // 2]


def _in_guest(guest: Guest, argv: Sequence[str], what: str) -> None:
    code = guest.run(argv, output=subprocess.DEVNULL)  # type: ignore[arg-type]
    if code:
        raise GuestError("%s: exit %d" % (what, code))


def _never_connected(stderr: str) -> bool:
    """Whether ssh's exit 255 came before the command ran (no connection, or none usable): safe to try again."""
    return any(text in stderr for text in NEVER_CONNECTED)


def _quote(text: str) -> str:
    import shlex  # noqa: PLC0415  # only here

    return shlex.quote(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="build the guest image (kept until the recipe changes)")
    make.add_argument("--force", action="store_true")
    test = sub.add_parser("test", help="the guest stage: each group of tests on a fresh guest, side by side")
    test.add_argument("--output", default=os.path.join(ROOT, "tests", "output"), help="logs and JUnit files")
    test.add_argument("--timeout", type=float, default=GROUP_TIMEOUT,
                      help="seconds for each group: its boot and its tests (default %d)" % GROUP_TIMEOUT)
    test.add_argument("--ready", help="a file to wait for before the host-side tests: JSON {\"python\": path, "
                      "\"env\": {name: value}} (the guests boot meanwhile)")
    test.add_argument("groups", nargs="*", default=list(GROUPS), help="default: all (%s)" % ", ".join(GROUPS))
    sub.add_parser("costs", help="boot a guest and time what the guest stage is made of (median of %d runs each)"
                   % COST_REPEAT)
    go = sub.add_parser("run", help="boot a fresh guest, run a command in /src, print its output")
    go.add_argument("--timeout", type=float, default=1800, help="seconds for the command (default 1800)")
    go.add_argument("--name", default="run")
    go.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build(force=args.force))
            return 0
        if args.command == "test":
            return stage(args.output, args.timeout, args.groups, args.ready)
        if args.command == "costs":
            return costs()
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run needs a command after --")
        started = time.monotonic()
        with Guest(args.name) as guest:
            took = time.monotonic() - started
            print("guest: up in %.0f s (2 sockets x 2 cores x 2 threads, 2 NUMA nodes)" % took, flush=True)
            code = guest.run(command, timeout=args.timeout)
        print("guest: %s exited %d after %.0f s" % (" ".join(command), code, time.monotonic() - started), flush=True)
        return code
    except GuestError as exc:
        print("guest: %s" % exc, file=sys.stderr)
        return 3


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)  # nothing is left running on a termination either
    signal.signal(signal.SIGINT, _terminate)
    sys.exit(main())
