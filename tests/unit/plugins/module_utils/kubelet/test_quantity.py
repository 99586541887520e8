"""Kubernetes quantities and the exclusive CPU count (ALGORITHM.md section 5)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import QuantityError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.quantity import (integral_cpus, milli_value,
                                                                                           parse_quantity, whole_value)


@pytest.mark.parametrize("text,value", [
    ("2", Fraction(2)), ("500m", Fraction(1, 2)), ("1.5", Fraction(3, 2)), ("1Gi", Fraction(2 ** 30)),
    ("256M", Fraction(256 * 10 ** 6)), ("1e3", Fraction(1000)), ("2000m", Fraction(2)), ("0.5", Fraction(1, 2)),
    ("1Ki", Fraction(1024)), ("100u", Fraction(1, 10 ** 4)), (".5", Fraction(1, 2)), ("+3", Fraction(3)),
    ("1E-3", Fraction(1, 1000)),
])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "Gi", "1 Gi", "1gi", "1mi", "--1", "1e", "0x10"])
def test_bad_quantities(text):
    with pytest.raises(QuantityError, match='"%s"' % text.replace(".", r"\.")):
        parse_quantity(text)


@pytest.mark.parametrize("text,cpus", [("2", 2), ("2000m", 2), ("977m", 0), ("1.5", 0), ("500m", 0), ("1", 1),
                                       ("0.9999", 1), ("64", 64)])  # 0.9999 rounds up to 1000m: integral to the kubelet
def test_integral_cpus(text, cpus):
    assert integral_cpus(parse_quantity(text)) == cpus


def test_rounding_is_upwards():
    assert milli_value(parse_quantity("0.1m")) == 1 and whole_value(parse_quantity("1.1")) == 2
