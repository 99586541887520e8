"""A CPU's power files as sysfs shows them (runtime/cpu_power.py), on a tree modelled on Linux's: the latency limit
under ``cpuN/power``, the governor in the cpufreq policy that ``cpuN/cpufreq`` links to."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cpu_power import CpuPowerFS, parse_cpus
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs


def power_fs(tmp_path, **kwargs):
    root = fake_sysfs.power(str(tmp_path), range(4), **kwargs)
    return CpuPowerFS(os.path.join(root, "sys", "devices", "system", "cpu"))


def test_the_latency_limit_reads_as_the_kernel_shows_it_newline_included(tmp_path):
    fs = power_fs(tmp_path)
    assert fs.latency_file(3) == "cpu3/power/pm_qos_resume_latency_us"
    assert fs.read(fs.latency_file(3)) == "0\n" and fs.exists(fs.latency_file(3))
    assert fs.read("cpu9/power/pm_qos_resume_latency_us") is None and not fs.exists("cpu9/power/x")


def test_a_cpus_policy_is_the_one_its_cpufreq_link_names(tmp_path):
    fs = power_fs(tmp_path, governors=fake_sysfs.ACPI_CPUFREQ, policies={0: [0, 1], 2: [2], 3: [3]})
    shared, why = fs.policy(1)
    assert why == "" and shared.governor_file == "cpufreq/policy0/scaling_governor"
    assert shared.cpus == CPUSet.parse("0-1") and "schedutil" in shared.available
    assert fs.policy(2)[0].cpus == CPUSet.parse("2")


def test_a_cpu_without_cpufreq_has_no_policy_and_says_why(tmp_path):
    fs = power_fs(tmp_path, without_cpufreq=[2])
    policy, why = fs.policy(2)
    assert policy is None and "cpu2 has no cpufreq" in why
    assert fs.policy(1)[0] is not None
    none_at_all = power_fs(tmp_path / "vm", governor=None)  # a virtual machine: no frequency driver
    assert none_at_all.policy(0)[0] is None


def test_a_write_goes_into_an_existing_file_only_and_replaces_its_text(tmp_path):
    fs = power_fs(tmp_path)
    fs.write("cpu1/power/pm_qos_resume_latency_us", "n/a\n")
    assert fs.read("cpu1/power/pm_qos_resume_latency_us") == "n/a\n"
    with pytest.raises(FileNotFoundError):
        fs.write("cpu7/power/pm_qos_resume_latency_us", "0\n")  # sysfs makes no files: neither does kubecpu
    assert not os.path.exists(os.path.join(fs.cpu_dir, "cpu7"))


@pytest.mark.parametrize("text, cpus", [("2-3", "2-3"), ("", ""), ("x", ""), ("3-1", "")])
def test_a_records_cpu_list_that_is_not_one_is_empty(text, cpus):
    assert parse_cpus(text) == CPUSet.parse(cpus)
