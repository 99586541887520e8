"""/proc/irq as the kernel shows it: CPU lists, the default affinity's hex mask, refusals and limits."""

from __future__ import annotations

import errno
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


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EBUSY, errno.EINVAL, errno.ERANGE])
def test_a_write_the_kernel_refuses_is_that_interrupts_refusal_with_its_reason(tmp_path, monkeypatch, code):
    """Managed (EIO), no vector space (ENOSPC), a move pending (EBUSY), a CPU gone offline (EINVAL): False and the
    reason, never an exception that would end the pass."""
    root = proc_irq(tmp_path / "irq", {5: "0"})
    irqs = IrqFS(root)

    def refused(fd, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", refused)
    assert irqs.set_affinity(5, CPUSet.parse("1")) is False and irqs.refusals == {"5": errno.errorcode[code]}
    assert irqs.set_default_affinity(CPUSet.parse("1")) is False and irqs.refusals["default"] == errno.errorcode[code]
    monkeypatch.undo()
    assert irqs.set_affinity(5, CPUSet.parse("1")) is True and "5" not in irqs.refusals


def test_a_procfs_kubecpu_cannot_write_at_all_names_the_file(tmp_path, monkeypatch):
    root = proc_irq(tmp_path / "irq", {5: "0"})

    def denied(path, flags, mode=0o777):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(HousekeepingError, match=r"cannot write .*5/smp_affinity_list: Permission denied"):
        IrqFS(root).set_affinity(5, CPUSet.parse("1"))


def test_an_interrupt_names_its_handlers(tmp_path):
    root = proc_irq(tmp_path / "irq", {5: "0", 6: "0"})
    os.makedirs(os.path.join(root, "5", "nvme0q1"))
    os.makedirs(os.path.join(root, "5", "eth0"))
    irqs = IrqFS(root)
    assert (irqs.actions(5), irqs.actions(6), irqs.actions(7)) == ("eth0,nvme0q1", "", None)
    assert irqs.exists(5) and not irqs.exists(7)


def test_a_long_cpu_list_is_read_whole(tmp_path):
    """8,192 CPUs, every other one: about 40 KiB (4 KiB was read as missing, and its original dropped)."""
    text = ",".join(str(cpu) for cpu in range(0, 8192, 2))
    root = proc_irq(tmp_path / "irq", {5: text})
    assert len(text) > 4096 and IrqFS(root).affinity(5) == CPUSet(range(0, 8192, 2))
