"""/proc/irq as the kernel shows it: CPU lists, the default affinity's hex mask, refusals and limits."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HousekeepingError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irq import MAX_IRQ_FILE_BYTES, IrqFS, format_mask
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq


@pytest.mark.parametrize(("cpus", "mask"), [
    ("", "0"), ("0", "1"), ("0-7", "ff"), ("4-7", "f0"), ("32", "1,00000000"), ("0,33", "2,00000001"),
    ("0-63", "ffffffff,ffffffff"), ("64", "1,00000000,00000000"),
])
def test_the_kernels_bitmap_text(cpus, mask):
    assert format_mask(CPUSet.parse(cpus)) == mask
    assert CPUSet.parse_mask(mask) == CPUSet.parse(cpus)


@given(st.frozensets(st.integers(0, 1023)))
def test_a_mask_reads_back_as_the_same_cpus(cpus):
    assert CPUSet.parse_mask(format_mask(CPUSet(cpus))) == CPUSet(cpus)


def test_reads_lists_and_writes(tmp_path):
    root = proc_irq(tmp_path / "irq", {24: "0-7", 9: "0", 30: "2-3"}, default="0f")
    irqs = IrqFS(root)
    assert irqs.irqs() == [9, 24, 30]  # numeric entries only, ascending
    assert irqs.affinity(24) == CPUSet.parse("0-7")
    assert irqs.effective(30) == CPUSet.parse("2-3")
    assert irqs.default_affinity() == CPUSet.parse("0-3")
    assert irqs.set_affinity(24, CPUSet.parse("0-3")) is True
    assert affinity(root, 24) == "0-3"
    assert irqs.set_default_affinity(CPUSet.parse("0-1,40")) is True
    with open(os.path.join(root, "default_smp_affinity"), encoding="ascii") as handle:
        assert handle.read() == "100,00000003"


def test_what_cannot_be_read_is_none_and_a_gone_interrupt_is_not_an_error(tmp_path):
    root = proc_irq(tmp_path / "irq", {5: "0"})
    with open(os.path.join(root, "5", "smp_affinity_list"), "w", encoding="ascii") as handle:
        handle.write("x" * (MAX_IRQ_FILE_BYTES + 1))
    irqs = IrqFS(root)
    assert irqs.affinity(5) is None  # over the size limit
    assert irqs.affinity(77) is None and irqs.effective(77) is None
    assert irqs.set_affinity(77, CPUSet.parse("1")) is False
    assert IrqFS(str(tmp_path / "none")).irqs() == []


def test_a_write_the_kernel_refuses_for_another_reason_names_the_file(tmp_path):
    root = proc_irq(tmp_path / "irq", {5: "0"})
    os.remove(os.path.join(root, "5", "smp_affinity_list"))
    os.mkdir(os.path.join(root, "5", "smp_affinity_list"))  # EISDIR: neither a refusal (EIO) nor a gone interrupt
    with pytest.raises(HousekeepingError, match=r"cannot write .*5/smp_affinity_list"):
        IrqFS(root).set_affinity(5, CPUSet.parse("1"))
