"""The system daemons' drop-ins (operations/daemon_dropins.py, docs/HOUSEKEEPING.md section 2): AllowedCPUs= for
every unit where cgroup v2 offers cpuset, else CPUAffinity= for the services only; one reload a step; taking them out
widens each to every online CPU and reloads before removing them and reloading again; check mode writes nothing. The
guest's kubelet role test applies them under a real systemd."""

from __future__ import annotations

import os
import re

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, CPUSetError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.daemon_dropins import (
    CONFINED, DROPIN, MAX_FILE_BYTES, WIDENED, apply, dropin_text, setting_key)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from hypothesis import given
from hypothesis import strategies as st

UNITS = ("system.slice", "user.slice", "init.scope", "kubelet.service", "containerd.service")


class Node:
    """A cgroup root, a sysfs root and a systemd directory under tmp_path; the reloads noted with each file then."""

    def __init__(self, root, controllers="cpuset cpu io memory pids", online="0-7"):
        self.root = root
        self.systemd = os.path.join(root, "systemd")
        os.makedirs(os.path.join(root, "cgroup"), exist_ok=True)
        os.makedirs(os.path.join(root, "sys/devices/system/cpu"), exist_ok=True)
        with open(os.path.join(root, "cgroup", "cgroup.controllers"), "w", encoding="utf-8") as handle:
            handle.write(controllers + "\n")
        with open(os.path.join(root, "sys/devices/system/cpu/online"), "w", encoding="utf-8") as handle:
            handle.write(online + "\n")
        self.reloads = []

    def apply(self, present, cpus="0-1", units=UNITS, check_mode=False):
        return apply(present=present, cpus=cpus, units=units, cgroup_root=os.path.join(self.root, "cgroup"),
                     sysfs_root=self.root, systemd_dir=self.systemd, check_mode=check_mode, reload=self.reload)

    def reload(self):
        self.reloads.append(self.files())

    def files(self):
        found = {}
        for top, _dirs, names in os.walk(self.systemd):
            for name in names:
                with open(os.path.join(top, name), encoding="utf-8") as handle:
                    found[os.path.basename(top)[:-2]] = handle.read()
        return found


@pytest.mark.parametrize("controllers, key", [
    ("cpuset cpu io memory pids", "AllowedCPUs"),
    ("cpu io memory pids", "CPUAffinity"),
    ("", "CPUAffinity"),
    ("cpusetx cpu", "CPUAffinity"),
])
def test_the_setting_follows_cgroup_v2s_cpuset_controller(controllers, key):
    assert setting_key(controllers) == key


@pytest.mark.parametrize("unit, key, text", [
    ("system.slice", "AllowedCPUs", CONFINED + "[Slice]\nAllowedCPUs=0-1\n"),
    ("init.scope", "AllowedCPUs", CONFINED + "[Scope]\nAllowedCPUs=0-1\n"),
    ("kubelet.service", "AllowedCPUs", CONFINED + "[Service]\nAllowedCPUs=0-1\n"),
    ("kubelet.service", "CPUAffinity", CONFINED + "[Service]\nCPUAffinity=0-1\n"),
    ("system.slice", "CPUAffinity", ""),  # a slice has no affinity setting: no drop-in
    ("init.scope", "CPUAffinity", ""),
])
def test_each_units_drop_in(unit, key, text):
    assert dropin_text(unit, key, "0-1") == text


def test_confined_with_one_reload_then_given_back_with_two(tmp_path):
    node = Node(str(tmp_path))
    done = node.apply(True)
    assert done.key == "AllowedCPUs" and done.changed and not done.removed and done.reloads == 1
    assert node.reloads == [{unit: CONFINED + "[%s]\nAllowedCPUs=0-1\n" % unit.rsplit(".")[1].capitalize()
                             for unit in UNITS}]
    assert sorted(done.dropins) == sorted(os.path.join(node.systemd, u + ".d", DROPIN) for u in UNITS)
    assert oct(os.stat(done.written[0]).st_mode & 0o777) == "0o644"
    again = node.apply(True)
    assert not again.changed and again.reloads == 0 and len(node.reloads) == 1  # idempotent: no reload either

    off = node.apply(False)
    assert off.reloads == 2 and sorted(off.removed) == sorted(off.written) == sorted(off.dropins)
    widened, gone = node.reloads[1:]
    assert widened == {unit: WIDENED + "[%s]\nAllowedCPUs=0-7\n" % unit.rsplit(".")[1].capitalize()
                       for unit in UNITS}  # every CPU applied while the files are still there
    assert gone == {}
    assert not node.apply(False).changed and len(node.reloads) == 3


def test_without_cpuset_only_the_services_and_a_slices_old_drop_in_goes(tmp_path):
    node = Node(str(tmp_path))
    node.apply(True)
    node = Node(str(tmp_path), controllers="cpu memory pids")  # the cpuset controller no longer offered
    done = node.apply(True)
    assert done.key == "CPUAffinity" and done.reloads == 1
    assert node.reloads[0] == {"kubelet.service": CONFINED + "[Service]\nCPUAffinity=0-1\n",
                               "containerd.service": CONFINED + "[Service]\nCPUAffinity=0-1\n"}
    assert sorted(os.path.basename(os.path.dirname(p)) for p in done.removed) == [
        "init.scope.d", "system.slice.d", "user.slice.d"]


def test_taking_out_widens_with_the_setting_each_file_holds(tmp_path):
    node = Node(str(tmp_path))
    node.apply(True)
    node = Node(str(tmp_path), controllers="cpu memory", online="0-3")
    node.apply(False)
    assert node.reloads[0]["system.slice"] == WIDENED + "[Slice]\nAllowedCPUs=0-3\n"  # what it set, widened
    assert node.reloads[-1] == {}


def test_check_mode_writes_and_reloads_nothing_and_shows_each_file(tmp_path):
    node = Node(str(tmp_path))
    done = node.apply(True, check_mode=True)
    assert done.changed and len(done.written) == 5 and done.reloads == 0 and node.reloads == []
    assert not os.path.exists(node.systemd)
    assert [d["after"] for d in done.diff] == [done.dropins[d["after_header"]] for d in done.diff]
    node.apply(True)
    off = node.apply(False, check_mode=True)
    assert off.changed and len(off.removed) == 5 and node.files() == node.reloads[0]  # nothing touched


@pytest.mark.parametrize("present, cpus, units, error, message", [
    (True, "", UNITS, ConfigError, "no reserved CPUs"),
    (True, "1-0", UNITS, CPUSetError, "1-0"),
    (True, "0-1", ["sshd"], ConfigError, "unit 'sshd': not a systemd service, slice or scope name"),
    (True, "0-1", ["../../etc/passwd.service"], ConfigError, "not a systemd service"),
    (True, "0-1", ["a b.service"], ConfigError, "not a systemd service"),
    (True, "6-9", UNITS, ConfigError, "cpus 6-9: CPU 8-9 not online (online: 0-7), the daemons cannot be confined"),
])
def test_bad_input_is_refused_before_anything_is_written(tmp_path, present, cpus, units, error, message):
    node = Node(str(tmp_path))
    with pytest.raises(error, match=re.escape(message)):
        node.apply(present, cpus=cpus, units=units)
    assert not os.path.exists(node.systemd) and node.reloads == []


def test_unreadable_inputs_name_the_file(tmp_path):
    node = Node(str(tmp_path))
    with open(os.path.join(node.root, "sys/devices/system/cpu/online"), "w", encoding="utf-8") as handle:
        handle.write("")
    for present in (True, False):  # confined to CPUs it cannot tell online, or given back to every online CPU
        with pytest.raises(ConfigError, match=r"cannot read the online CPUs from .*sys/devices/system/cpu"):
            node.apply(present)
    assert not os.path.exists(node.systemd)
    with open(os.path.join(node.root, "sys/devices/system/cpu/online"), "w", encoding="utf-8") as handle:
        handle.write("0-7\n")
    node.apply(True)
    path = os.path.join(node.systemd, "system.slice.d", DROPIN)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match=re.escape("%s is larger than %d bytes" % (path, MAX_FILE_BYTES))):
        node.apply(True)


@given(st.lists(st.sampled_from(UNITS), unique=True), st.sets(st.integers(0, 7), min_size=1),
       st.sampled_from(["cpuset cpu", "cpu memory"]))
def test_any_confinement_is_idempotent_and_taken_out_leaves_nothing(tmp_path_factory, units, reserved, controllers):
    node = Node(str(tmp_path_factory.mktemp("node")), controllers=controllers)
    cpus = ",".join(str(cpu) for cpu in sorted(reserved))
    first = node.apply(True, cpus=cpus, units=units)
    assert first.changed == bool(node.files()) and first.reloads == int(first.changed)
    assert all(text.endswith("=%s\n" % CPUSet.parse(cpus)) for text in node.files().values())
    assert not node.apply(True, cpus=cpus, units=units).changed
    node.apply(False, units=units)
    assert node.files() == {}


def test_a_drop_in_directory_that_is_a_file_is_the_runs_error_naming_it(tmp_path):
    node = Node(str(tmp_path))
    os.makedirs(node.systemd)
    with open(os.path.join(node.systemd, "system.slice.d"), "w", encoding="utf-8") as handle:
        handle.write("not a directory\n")
    with pytest.raises(ConfigError, match=re.escape("cannot read %s: Not a directory" % os.path.join(
            node.systemd, "system.slice.d", DROPIN))):
        node.apply(True, units=["system.slice"])
    assert node.reloads == []
