"""Shared pydantic building blocks: frozen strict models and quantity-typed fields."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gpusim.units import parse_quantity


FIELD_MARK = "@field="


def field_error(field: str, message: str) -> ValueError:
    """A cross-field error that the loader reports at ``<model path>.<field>``."""
    return ValueError(f"{FIELD_MARK}{field}|{message}")


class Spec(BaseModel):
    """Base of every spec: frozen, unknown keys rejected, no coercion of strings to numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, use_attribute_docstrings=True)


def _quantity_parser(dimension: str):
    def parse(value: Any) -> Any:
        if isinstance(value, (str, int, float)):  # a boolean is refused by parse_quantity
            return parse_quantity(value, dimension)
        return value

    return parse


def quantity(dimension: str, *, gt: float | None = 0.0, ge: float | None = None, le: float | None = None) -> Any:
    """A float field in SI units that also accepts strings with units of ``dimension``.

    Bounds (``gt``/``ge``/``le``) are in SI units and reject zero, negative and absurd values.
    """
    return Annotated[float, BeforeValidator(_quantity_parser(dimension)), Field(strict=False, **_bounds(gt, ge, le))]


def _bounds(gt: float | None, ge: float | None, le: float | None) -> dict[str, float]:
    """Field bound keywords: ``ge`` replaces ``gt`` when given."""
    kwargs: dict[str, float] = {}
    if ge is not None:
        kwargs["ge"] = ge
    elif gt is not None:
        kwargs["gt"] = gt
    if le is not None:
        kwargs["le"] = le
    return kwargs


_YAML_STRING_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
"""A number in exponent form without a dot (``1e6``), which YAML 1.1 reads as text."""


def _from_exponent_text(value: Any) -> Any:
    if isinstance(value, str) and _YAML_STRING_NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def _strict_int(value: Any) -> Any:
    value = _from_exponent_text(value)
    if isinstance(value, bool):
        raise ValueError("expected a whole number, got a boolean")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def count(*, ge: int = 1, le: int = 10**9) -> Any:
    """A whole-number count with bounds."""
    return Annotated[int, BeforeValidator(_strict_int), Field(ge=ge, le=le)]


def _strict_float(value: Any) -> Any:
    value = _from_exponent_text(value)
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, str):
        raise ValueError(f"expected a plain number, got {value!r}")
    return value


def number(*, gt: float | None = 0.0, ge: float | None = None, le: float | None = None) -> Any:
    """A dimensionless float (a factor or fraction) with bounds; strings are rejected."""
    return Annotated[float, BeforeValidator(_strict_float), Field(**_bounds(gt, ge, le))]


# Bounds generous enough for any plausible future device, tight enough to catch unit slips.
Bytes = quantity("bytes", le=1e18)
BytesPerS = quantity("bytes_per_s", ge=1e3, le=1e17)  # a bare 3.35 (3.35 B/s, the unit forgotten) is refused
Hz = quantity("hz", ge=1e6, le=1e11)
Seconds = quantity("s", le=1.0)
SecondsOrZero = quantity("s", gt=None, ge=0.0, le=1.0)
Watts = quantity("w", le=1e7)
JoulesPerFlop = quantity("j_per_flop", gt=None, ge=0.0, le=1e-6)
JoulesPerByte = quantity("j_per_byte", gt=None, ge=0.0, le=1e-6)
UsdPerS = quantity("usd_per_s", gt=None, ge=0.0, le=1e3)
Fraction = number(gt=0.0, le=1.0)
FlopPerCycle = number(gt=0.0, le=1e7)
