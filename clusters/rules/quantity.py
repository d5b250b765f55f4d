"""Kubernetes resource quantities ("500m", "512Gi", "1e3") as exact numbers.

Shared by the broker and the simulator: both must agree to the unit on what a pod asks for.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache
from typing import Mapping

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


# As kube-apiserver bounds a quantity: its value must fit in an int64.
MAX_QUANTITY = Decimal(2**63 - 1)


class QuantityRangeError(ValueError):
    """A quantity written correctly but too large to count with."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity; raise ValueError with the offending text if it is not one, or is out of range."""
    if isinstance(value, bool):
        raise ValueError(f"not a resource quantity: {value!r}")
    if isinstance(value, (int, float)):
        amount = Decimal(str(value))
    else:
        match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
        if not match:
            raise ValueError(f"not a resource quantity: {value!r:.60}")
        number, suffix = match.group(1), match.group(2) or ""
        if suffix in _BINARY:
            amount = Decimal(number) * _BINARY[suffix]
        elif suffix in _DECIMAL:  # before the exponent: "2E" is two exa
            amount = Decimal(number) * _DECIMAL[suffix]
        else:  # an exponent (e3, E-2), applied exactly however large, then bounded below
            amount = Decimal(f"{number}E{suffix[1:]}")
    if not amount.is_finite() or amount.copy_abs() > MAX_QUANTITY:
        raise QuantityRangeError(f"{str(value)[:40]!r} is out of range: a quantity is at most {MAX_QUANTITY}")
    return amount


@lru_cache(maxsize=16384)
def to_milli(value: str | int | float) -> int:
    """A quantity in thousandths, rounded up as the scheduler does, for integer arithmetic.

    Cached: inventories repeat the same few quantities on thousands of nodes and pods."""
    milli = parse_quantity(value) * 1000
    return int(milli.to_integral_value(rounding="ROUND_CEILING"))


def format_quantity(milli: int, resource: str) -> str:
    """Render a milli-amount for people: cores for cpu, binary units for bytes (memory, storage, hugepages), counts
    otherwise."""
    if resource == "cpu":
        return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"
    whole = milli / 1000
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if whole >= size:
                return f"{whole / size:.4g}{unit}"  # three or four figures: 512Gi, 3.953Ti
    return f"{whole:g}"


def add_into(total: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    """Add (or, with sign -1, take away) per-resource amounts into a running total."""
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, 0) + sign * amount
