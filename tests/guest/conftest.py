"""The real-server tests: run inside the QEMU guest of scripts/guest.py (2 sockets x 2 cores x 2 threads, 2 NUMA
nodes, cgroup v2, systemd), never on the host. Each fixture's containerd is a real one, its binaries shared in with the
checkout: Debian's 2.1.9 (scripts/runtimes.sh containerd-2.1), 1.7.24 with NRI (scripts/containerd-nri.sh) or 2.4.2
(scripts/runtimes.sh containerd-2.4), with the cgroupfs or the systemd cgroup driver; CRI-O 1.36.3 (scripts/runtimes.sh
cri-o), the systemd driver unless a test asks for cgroupfs. (Debian
12's 1.6, the image's, is the agent role's in tests/guest_host.)"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("kubecpu_tests_conftest", os.path.join(ROOT, "tests", "conftest.py"))
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))  # the collection importable from this checkout
sys.path[:0] = [os.path.join(ROOT, "scripts"), os.path.join(ROOT, "tests", "unit", "support")]
lab_module = importlib.import_module("lab")
waits = importlib.import_module("waits")
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.interfaces import cli  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet  # noqa: E402
KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
NRI_BINARIES = os.path.join(ROOT, ".cache", "containerd-nri", "usr", "bin")  # 1.7.24
CONTAINERD_2 = os.path.join(ROOT, ".cache", "containerd-2.1", "usr", "bin")  # 2.1.9
CRIO_BINARIES = os.path.join(ROOT, ".cache", "cri-o")  # CRI-O 1.36.3 (scripts/guest.py shares its build in)
CONTAINERD_24 = os.path.join(ROOT, ".cache", "containerd-2.4")  # 2.4.2 (scripts/guest.py shares its build in)
CRIO_IRQ = "irq-load-balancing.crio.io"
SIBLINGS = {0: 1, 1: 0, 2: 3, 3: 2, 4: 5, 5: 4, 6: 7, 7: 6}
NUMA = {cpu: cpu // 4 for cpu in range(8)}


def pytest_configure(config):
    if not (os.path.exists("/sys/fs/cgroup/cgroup.controllers") and os.cpu_count() == 8
            and os.path.exists("/sys/devices/system/node/node1")):
        raise pytest.UsageError("tests/guest run inside the guest (python3 scripts/guest.py run -- ...): 8 CPUs, "
                                "2 NUMA nodes, cgroup v2")


POLL = 0.25  # seconds between looks: what a guest test waits for takes seconds, and its looks (CRI calls, the state
# file, /proc/irq, irqbalance's socket) run on the same emulated CPUs as what it waits for


def wait_for(condition, timeout, what, step=POLL):
    """Poll ``condition`` every ``step`` seconds until it is true (its value); fail naming ``what`` after ``timeout``
    seconds."""
    return waits.until(condition, what, timeout, step=step)


class Ran:
    """What a ``bin/kubecpu`` command did: its exit code, stdout and stderr."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def kubecpu(*argv, check=True):
    """``bin/kubecpu ARGV`` in this process (its main, as the launcher calls it): a guest vCPU takes seconds to start
    Python and import the core, so the tests pay that once. The JSON it printed, else a ``Ran``."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out, err, io.StringIO())
    if check and code != 0:
        raise AssertionError("kubecpu %s: exit %d\n%s%s" % (" ".join(argv), code, out.getvalue(), err.getvalue()))
    text = out.getvalue()
    return json.loads(text) if text.strip().startswith("{") else Ran(code, text, err.getvalue())


def proc_status(lab, cid, field="Cpus_allowed_list"):
    """What the kernel says of the container's first process (``/proc/<pid>/status``)."""
    return lab.allowed_cpus(cid) if field == "Cpus_allowed_list" else _status_field(lab, cid, field)


def _status_field(lab, cid, field):
    pid = lab.cri.status_info(cid)["pid"]
    with open("/proc/%d/status" % pid, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    return ""


@pytest.fixture(scope="module", params=["cgroupfs", "systemd"])
def driver(request):
    return request.param


# The labs live for the whole pytest run (each test removes the pods it made): a containerd's start, image import and
# stop cost 30-50 s of a guest vCPU, once per run instead of once per test module.
@pytest.fixture(scope="session")
def lab21():
    """containerd 2.1.9 (Debian's; its NRI off here, CRI events), systemd cgroup driver."""
    with make_lab("systemd", CONTAINERD_2) as lab:
        yield lab


@pytest.fixture(scope="session")
def lab21_cgroupfs():
    """containerd 2.1.9, cgroupfs driver: only where a test asks for it (a containerd's start costs 30-50 s here)."""
    with make_lab("cgroupfs", CONTAINERD_2) as lab:
        yield lab


@pytest.fixture(scope="session")
def lab17():
    """containerd 1.7.24 with NRI and CRI events, cgroupfs driver."""
    with make_lab("cgroupfs", NRI_BINARIES, nri=True) as lab:
        yield lab


@pytest.fixture(scope="session")
def lab24():
    """containerd 2.4.2 (built from its module; NRI on by default, its socket in the lab; CRI events), systemd cgroup
    driver."""
    with make_lab("systemd", containerd_24(), nri=True) as lab:
        yield lab


def containerd_24():
    for name in ("containerd", "containerd-shim-runc-v2", "ctr"):
        shared_build(os.path.join(CONTAINERD_24, name))
    return CONTAINERD_24


def crio_lab(systemd):
    """CRI-O 1.36.3's lab (its binaries waited for), NRI on."""
    for name in ("crio", "pinns"):
        shared_build(os.path.join(CRIO_BINARIES, name))
    lab = lab_module.CrioLab(binaries=local_copy(CRIO_BINARIES), nri=True, systemd=systemd, slow=True,
                             allowed_annotations=[CRIO_IRQ])
    lab.driver = "systemd" if systemd else "cgroupfs"
    return lab


@pytest.fixture(scope="session")
def crio():
    """CRI-O 1.36.3 with Debian's conmon, runc and podman (its images), systemd cgroup driver, NRI on, and a
    ``high-performance`` handler beside runc that allows ``irq-load-balancing.crio.io`` (a pod of that RuntimeClass
    with the annotation gets CRI-O's hooks for interrupts)."""
    with crio_lab(systemd=True) as lab:
        yield lab


BUILD_WAIT = 2400  # seconds: the guest stage builds what is not in the host's cache while the guests run (cold)


def shared_build(path):
    """A binary scripts/guest.py's stage builds on the host and copies into the checkout while this runs: waited for
    (the share is live); its ``.failed`` file stops the wait with the build's error."""
    wait_for(lambda: os.path.exists(path) or os.path.exists(path + ".failed"), BUILD_WAIT,
             "%s from the host (scripts/guest.py's stage builds it; `guest.py run` does not)" % path)
    if not os.path.exists(path):
        with open(path + ".failed", encoding="utf-8") as handle:
            pytest.fail(handle.read())
    return path


@pytest.fixture(params=["1.35", "1.36", "1.37"])
def kubelet_binary(request):
    """A real kubelet (scripts/kubelet.sh; scripts/guest.py shares 1.35.4, 1.36.3 and 1.37.2 in): its minor, and its
    path on the guest's disk."""
    shared = shared_build(os.path.join(ROOT, ".cache", "kubelet", "kubelet-%s" % request.param))
    return request.param, local_copy(shared)


@pytest.fixture(scope="session")
def kubelet_binaries():
    """Every real kubelet (as ``kubelet_binary``): minor -> its path on the guest's disk."""
    return {minor: local_copy(shared_build(os.path.join(ROOT, ".cache", "kubelet", "kubelet-%s" % minor)))
            for minor in ("1.35", "1.36", "1.37")}


LOCAL = "/var/tmp/kubecpu-binaries"  # on the guest's own disk


def local_copy(path):
    """``path`` (a binary or a directory of them on the checkout's 9p share) copied once onto the guest's disk. The
    share has no cache: each run of a binary there reads it over 9p again, and containerd runs its shim at every pod.
    Measured on an idle guest (containerd 2.1.9): the lab's start (containerd, two image imports, the first pod) 23 s
    from the share, 10 s from the copy; copying its 77 MB took 2 s."""
    target = os.path.join(LOCAL, path.strip("/").replace("/", "_"))
    if not os.path.exists(target):
        partial = target + ".partial"
        subprocess.run(["rm", "-rf", partial], check=True)
        os.makedirs(LOCAL, exist_ok=True)
        subprocess.run(["cp", "-a", path, partial], check=True)
        os.rename(partial, target)
    return target


def make_lab(driver, binaries, nri=False):
    if not os.path.exists(os.path.join(binaries, "containerd")):
        pytest.fail("%s is not shared in: run scripts/runtimes.sh on the host first" % binaries)
    lab = lab_module.Lab(binaries=local_copy(binaries), nri=nri, systemd=driver == "systemd", slow=True)
    lab.driver = driver  # what a test asks of it: "systemd" or "cgroupfs"
    return lab


ALL = set(range(8))


def cpus(text):
    """A CPU list as a set of CPU numbers."""
    return set(CPUSet.parse(text))


class Pinner:
    """The agent (``reconcile --loop``) or the NRI plugin (``nri``) as a process with its flags."""

    def __init__(self, lab, directory, mode, flags):
        self.lab, self.mode, self.flags = lab, mode, list(flags)
        os.makedirs(directory, exist_ok=True)
        self.state = os.path.join(directory, "state")
        self.metrics = self.state + ".prom"
        self.log = os.path.join(directory, "%s.log" % mode)
        self.offset = 0
        self.proc = None

    def start(self):
        common = ["--state", self.state, "--kubelet-state", self.state + ".kubelet", "--metrics-path", self.metrics,
                  "--runtime-timeout", "30"]  # a guest vCPU is 25-30x slower than the host's
        if self.mode == "agent":
            argv = [KUBECPU, "reconcile", "--loop", "--period", "60s", "--runtime", "cri", "--runtime-endpoint",
                    self.lab.endpoint]
        else:
            argv = [KUBECPU, "nri", "--socket", self.lab.nri_socket]
        with open(self.log, "ab") as log:
            self.offset = log.tell()  # this run's output starts here (the file keeps earlier runs')
            self.proc = subprocess.Popen(argv + common + self.flags, stdout=log, stderr=log)
        # up: it has finished a pass (its metrics file says so), not merely started
        wait_for(lambda: self.passes() >= 1 or self.proc.poll() is not None, 120, "the %s's first pass" % self.mode)
        assert self.proc.poll() is None, self.tail()

    def passes(self):
        return waits.metric(self.metrics, "kubecpu_reconcile_passes_total{")

    def metric(self, name):
        return waits.metric(self.metrics, name)

    def errors(self, kind):
        return waits.metric(self.metrics, "kubecpu_%s_errors_total" % kind)

    def entries(self):
        with open(self.state, encoding="utf-8") as handle:
            return json.load(handle).get("entries", {})

    def tail(self):
        with open(self.log, encoding="utf-8", errors="replace") as handle:
            return handle.read()[-3000:]

    def output(self):
        """All this run has logged (at most 1 MiB)."""
        with open(self.log, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(1 << 20).decode("utf-8", errors="replace")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None


def settle(lab, pod, want, name="app", timeout=120):
    """The container's first process allowed exactly ``want`` (a set), and its cgroup saying the same."""
    cid = pod["containers"][name]
    wait_for(lambda: cpus(proc_status(lab, cid)) == want, timeout,
             "%s/%s on CPUs %s (has %s)" % (pod["name"], name, sorted(want), proc_status(lab, cid)))
    cgroup = lab.cgroup_cpus(pod, cid)
    assert cpus(cgroup) == want
    print("read back: %s/%s Cpus_allowed_list %s (/proc), cpuset.cpus.effective %s (cgroupfs)"
          % (pod["name"], name, proc_status(lab, cid), cgroup))
    return want


def guaranteed(cpu_count, command=None):
    spec = {"name": "app", "cpu": cpu_count * 1000}
    if command:
        spec["command"] = command
    return [spec]


SHARED = [{"name": "app", "cpu": 250}]
TIMEOUT = ["--runtime-timeout", "30"]  # a guest vCPU is 25-30x slower than the host's


@pytest.fixture
def made(lab21):
    pods = []
    yield pods
    for lab, pod in pods:
        lab.remove_pod(pod)


def node_flags(lab, state):
    return ["--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state", state, "--kubelet-state",
            state + ".kubelet", *TIMEOUT]


def entries(state):
    with open(state, encoding="utf-8") as handle:
        return json.load(handle).get("entries", {})


# --- interrupts (/proc/irq) -----------------------------------------------------------------------------
PROC_IRQ = "/proc/irq"


def affinities(name="smp_affinity_list"):
    """IRQ -> the CPUs procfs lists for it (``effective_affinity_list``: where it is delivered now)."""
    found = {}
    for irq in sorted(int(n) for n in os.listdir(PROC_IRQ) if n.isdigit()):
        try:
            with open(os.path.join(PROC_IRQ, str(irq), name), encoding="ascii") as handle:
                found[irq] = cpus(handle.read().strip() or "")
        except OSError:
            continue
    return found


def default_affinity():
    with open(os.path.join(PROC_IRQ, "default_smp_affinity"), encoding="ascii") as handle:
        return set(CPUSet.parse_mask(handle.read().strip()))


def on(held, table, skip=()):
    """The interrupts of ``table`` whose CPUs include one of ``held`` (``skip`` aside)."""
    return {irq: sorted(cpus_) for irq, cpus_ in table.items() if cpus_ & held and irq not in skip}


@pytest.fixture(name="irqbalance_stopped")
def fixture_irqbalance_stopped():
    subprocess.run(["systemctl", "stop", "irqbalance"], check=True)
    yield


def record_of(pinner_state):
    """kubecpu's interrupt record beside the state file ``pinner_state`` ({} while there is none)."""
    try:
        with open(pinner_state + ".irq.json", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}
