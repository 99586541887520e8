"""CPU sets: Linux CPU-list syntax (k8s.io/utils/cpuset semantics), hex masks, algebra."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import CPUSetError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import MAX_CPU_ID, CPUSet
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("text,members,canonical", [
    ("", [], ""),
    ("0", [0], "0"),
    ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
    ("1-1", [1], "1"),
    ("3,1,2", [1, 2, 3], "1-3"),
    ("0,2,4", [0, 2, 4], "0,2,4"),
    ("+5", [5], "5"),
    ("007", [7], "7"),
    ("5-6,1-2,2-3", [1, 2, 3, 5, 6], "1-3,5-6"),
])
def test_parse_and_format(text, members, canonical):
    cpus = CPUSet.parse(text)
    assert list(cpus) == members
    assert str(cpus) == canonical


@pytest.mark.parametrize("text,detail", [
    ("3-1", 'invalid range "3-1" (3 > 1)'),
    ("a", 'strconv.Atoi: parsing "a": invalid syntax'),
    ("1,,2", 'strconv.Atoi: parsing "": invalid syntax'),
    ("-1", 'strconv.Atoi: parsing "": invalid syntax'),
    ("1.3", 'strconv.Atoi: parsing "1.3": invalid syntax'),
    (" 1", 'strconv.Atoi: parsing " 1": invalid syntax'),
    ("1,", 'strconv.Atoi: parsing "": invalid syntax'),
    ("1_0", 'strconv.Atoi: parsing "1_0": invalid syntax'),
    # the piece quoted as Go's %q quotes it (strconv.Quote), as the kubelet prints it
    ("1\n", 'strconv.Atoi: parsing "1\\n": invalid syntax'),
    ('0,"1"', 'strconv.Atoi: parsing "\\"1\\"": invalid syntax'),
    ("\u00a0\u00e9", 'strconv.Atoi: parsing "\\u00a0\u00e9": invalid syntax'),
    ("99999999999", 'CPU id 99999999999 in "99999999999" exceeds the supported maximum %d' % MAX_CPU_ID),
    ("99999999999999999999", 'strconv.Atoi: parsing "99999999999999999999": value out of range'),
    ("0-99999999999", 'CPU id 99999999999 in "0-99999999999" exceeds the supported maximum %d' % MAX_CPU_ID),
])
def test_bad_text_is_refused_with_a_message_quoting_it(text, detail):
    with pytest.raises(CPUSetError) as err:
        CPUSet.parse(text)
    assert err.value.detail == detail
    assert str(err.value) == 'invalid CPU list "%s": %s' % (text, detail)


@pytest.mark.parametrize("mask,listing", [
    ("3", "0-1"), ("ff,ffffffff", "0-39"), ("1,00000000", "32"), ("0", ""), ("f0", "4-7"),
    ("00000000,00000001", "0"),
])
def test_hex_masks(mask, listing):
    assert str(CPUSet.parse_mask(mask)) == listing


@pytest.mark.parametrize("mask", ["", "xyz", "1,,2", "123456789"])
def test_bad_masks(mask):
    with pytest.raises(CPUSetError, match="invalid CPU list"):
        CPUSet.parse_mask(mask)


def test_mask_formatting_follows_the_kernel():
    assert CPUSet.parse("0-39").to_mask() == "ff,ffffffff"
    assert CPUSet.parse("0-1").to_mask() == "3"
    assert CPUSet.parse("0").to_mask(width=64) == "00000000,00000001"
    assert CPUSet.parse("").to_mask() == "0"


def test_algebra_and_protocol():
    a, b = CPUSet.parse("0-5"), CPUSet.parse("4-9")
    assert str(a | b) == "0-9" and str(a & b) == "4-5" and str(a - b) == "0-3" and str(a ^ b) == "0-3,6-9"
    assert CPUSet.parse("1-2").issubset(a) and a.issuperset({1}) and a.isdisjoint({7})
    assert 3 in a and 7 not in a and len(a) == 6 and bool(CPUSet()) is False
    assert a == CPUSet([5, 4, 3, 2, 1, 0]) and hash(a) == hash(CPUSet(range(6)))
    with pytest.raises(AttributeError):
        a.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(CPUSetError):
        CPUSet([-1])


@given(st.frozensets(st.integers(min_value=0, max_value=MAX_CPU_ID), max_size=200))
def test_format_parse_round_trip(members):
    cpus = CPUSet(members)
    assert CPUSet.parse(str(cpus)) == cpus
    assert CPUSet.parse_mask(cpus.to_mask()) == cpus
    assert list(cpus) == sorted(members)
