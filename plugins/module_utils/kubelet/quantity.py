# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes resource quantities ("2", "500m", "1.5", "1Gi", "256M", "1e3"), parsed exactly."""

from __future__ import annotations

import re
from fractions import Fraction

from ..errors import QuantityError

_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|)\Z")
_DECIMAL = {"n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10 ** 3), "M": Fraction(10 ** 6), "G": Fraction(10 ** 9), "T": Fraction(10 ** 12),
            "P": Fraction(10 ** 15), "E": Fraction(10 ** 18)}
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string; raises QuantityError that quotes the text."""
    if not isinstance(text, str):
        raise QuantityError("quantity %r must be a string" % (text,))
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError('quantity "%s" is not a valid Kubernetes quantity' % text)
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError('quantity "%s" has an exponent out of range' % text)
    return number * Fraction(10) ** exponent


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def milli_value(value: Fraction) -> int:
    """Quantity.MilliValue(): thousandths, rounded up."""
    return _ceil(value * 1000)


def whole_value(value: Fraction) -> int:
    """Quantity.Value(): whole units, rounded up."""
    return _ceil(value)


def integral_cpus(value: Fraction) -> int:
    """The kubelet's exclusive CPU count for a request: Value() if Value()*1000 == MilliValue(), else 0."""
    whole = whole_value(value)
    return whole if whole * 1000 == milli_value(value) else 0
