"""Physical quantities written with units: ``"3.35 TB/s"``, ``"80 GiB"``, ``"1.98 GHz"``, ``"600 ns"``.

A quantity is a number and a unit. Units are products of base symbols with optional SI or binary
prefixes, separated by ``/`` for division (``pJ/B``, ``GB/s``, ``TFLOP/s``). Every value is converted
to SI base units (bytes, seconds, joules, FLOP, US dollars) and its dimension is checked against the
dimension the caller expects. KB/MB/GB are powers of 1000; KiB/MiB/GiB powers of 1024.

A plain number (``3.35e12``) is taken as already in SI base units.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

from gpusim.errors import UnitError

# A dimension is a mapping from base dimension to exponent, stored as a sorted tuple of pairs.
Dimension = tuple[tuple[str, int], ...]


def _dim(**exponents: int) -> Dimension:
    return tuple(sorted((k, v) for k, v in exponents.items() if v != 0))


DIMENSIONLESS: Dimension = ()

# Base symbols: (scale to SI base, dimension). Longest symbols are matched first.
_SYMBOLS: Mapping[str, tuple[float, Dimension]] = {
    "B": (1.0, _dim(byte=1)),
    "byte": (1.0, _dim(byte=1)),
    "bytes": (1.0, _dim(byte=1)),
    "b": (0.125, _dim(byte=1)),
    "bit": (0.125, _dim(byte=1)),
    "bits": (0.125, _dim(byte=1)),
    "s": (1.0, _dim(s=1)),
    "sec": (1.0, _dim(s=1)),
    "min": (60.0, _dim(s=1)),
    "h": (3600.0, _dim(s=1)),
    "hour": (3600.0, _dim(s=1)),
    "Hz": (1.0, _dim(s=-1)),
    "J": (1.0, _dim(j=1)),
    "W": (1.0, _dim(j=1, s=-1)),
    "FLOP": (1.0, _dim(flop=1)),
    "flop": (1.0, _dim(flop=1)),
    "FLOPS": (1.0, _dim(flop=1, s=-1)),
    "OP": (1.0, _dim(flop=1)),
    "OPS": (1.0, _dim(flop=1, s=-1)),
    "USD": (1.0, _dim(usd=1)),
    "$": (1.0, _dim(usd=1)),
}

_DECIMAL_PREFIXES: Mapping[str, float] = {
    "p": 1e-12, "n": 1e-9, "u": 1e-6, "µ": 1e-6, "m": 1e-3,
    "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}
_BINARY_PREFIXES: Mapping[str, float] = {
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
}

# Names of dimensions for messages and for callers.
DIMENSIONS: Mapping[str, Dimension] = {
    "bytes": _dim(byte=1),
    "bytes_per_s": _dim(byte=1, s=-1),
    "s": _dim(s=1),
    "hz": _dim(s=-1),
    "j": _dim(j=1),
    "w": _dim(j=1, s=-1),
    "flop": _dim(flop=1),
    "flop_per_s": _dim(flop=1, s=-1),
    "j_per_flop": _dim(j=1, flop=-1),
    "j_per_byte": _dim(j=1, byte=-1),
    "usd": _dim(usd=1),
    "usd_per_s": _dim(usd=1, s=-1),
    "dimensionless": DIMENSIONLESS,
}

_EXAMPLES: Mapping[str, str] = {
    "bytes": "a data size such as 80 GiB",
    "bytes_per_s": "a bandwidth such as 3.35 TB/s",
    "s": "a time such as 600 ns",
    "hz": "a frequency such as 1.98 GHz",
    "j": "an energy such as 5 pJ",
    "w": "a power such as 700 W",
    "flop": "a FLOP count such as 2 GFLOP",
    "flop_per_s": "a rate such as 989.4 TFLOP/s",
    "j_per_flop": "an energy per operation such as 0.5 pJ/FLOP",
    "j_per_byte": "an energy per byte such as 7 pJ/B",
    "usd": "a price such as 2.5 USD",
    "usd_per_s": "a price rate such as 2.5 USD/h",
    "dimensionless": "a plain number",
}

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def _parse_symbol(token: str) -> tuple[float, Dimension]:
    if token in _SYMBOLS:
        return _SYMBOLS[token]
    for prefixes in (_BINARY_PREFIXES, _DECIMAL_PREFIXES):
        for prefix, factor in prefixes.items():
            if token.startswith(prefix) and token[len(prefix):] in _SYMBOLS:
                scale, dim = _SYMBOLS[token[len(prefix):]]
                if prefixes is _BINARY_PREFIXES and dim != _dim(byte=1):
                    raise UnitError(f"binary prefix {prefix!r} only applies to bytes or bits, not {token!r}")
                return factor * scale, dim
    raise UnitError(f"unknown unit {token!r}")


def _combine(a: Dimension, b: Dimension, sign: int) -> Dimension:
    out = dict(a)
    for k, v in b:
        out[k] = out.get(k, 0) + sign * v
    return tuple(sorted((k, v) for k, v in out.items() if v != 0))


def parse_unit(text: str) -> tuple[float, Dimension]:
    """Parse a unit such as ``GB/s`` or ``pJ/FLOP`` into (scale to SI, dimension)."""
    parts = text.replace(" per ", "/").split("/")
    if any(not p.strip() for p in parts):
        raise UnitError(f"malformed unit {text!r}")
    scale, dim = 1.0, DIMENSIONLESS
    for i, part in enumerate(parts):
        s, d = _parse_symbol(part.strip())
        if i == 0:
            scale, dim = s, d
        else:
            scale, dim = scale / s, _combine(dim, d, -1)
    return scale, dim


def dimension_name(dim: Dimension) -> str:
    for name, d in DIMENSIONS.items():
        if d == dim:
            return name
    return " ".join(f"{k}^{v}" for k, v in dim) or "dimensionless"


def parse_quantity(value: object, expected: str) -> float:
    """Return ``value`` in SI base units, checking it has the ``expected`` dimension.

    ``value`` is a number (taken as SI) or a string with a unit. Raises UnitError with a short
    message naming what was expected and what was given.
    """
    if expected not in DIMENSIONS:
        raise KeyError(f"unknown dimension {expected!r}")
    want = DIMENSIONS[expected]
    if isinstance(value, bool):
        raise UnitError(f"expected {_EXAMPLES[expected]}, got a boolean")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = _NUMBER.match(value)
        if not match:
            raise UnitError(f"expected {_EXAMPLES[expected]}, got {value!r}")
        number = float(match.group(1))
        unit = match.group(2)
        if unit:
            scale, dim = parse_unit(unit)
            if dim != want:
                raise UnitError(
                    f"expected {_EXAMPLES[expected]}, got {value!r} ({dimension_name(dim).replace('_', ' ')})"
                )
            number *= scale
    else:
        raise UnitError(f"expected {_EXAMPLES[expected]}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise UnitError(f"expected a finite number, got {value!r}")
    return number


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless there is exactly one: "1 point", "12 points"."""
    return f"{count:,} {noun if count == 1 else (plural_noun or noun + 's')}"


def format_binary_bytes(value: float) -> str:
    """A byte count in binary units, as memory sizes are given: ``39.33 MiB``, ``1.5 TiB``."""
    for unit, factor in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= factor:
            return f"{value / factor:,.4g} {unit}"
    return f"{value:.0f} B"


def format_duration(seconds: float) -> str:
    """A length of time as people read one: SI below a minute, then minutes, hours and days."""
    for unit, factor, from_s in (("days", 86400.0, 2 * 86400.0), ("h", 3600.0, 2 * 3600.0), ("min", 60.0, 60.0)):
        if seconds >= from_s:
            return f"{seconds / factor:,.4g} {unit}"
    return format_quantity(seconds, "s")


def format_usd(amount: float) -> str:
    """Dollars to the cent, or to 3 significant digits below a dollar (``$0.000127``)."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.3g}"


def format_rate(value: float) -> str:
    """A per-second count: whole above 100, one decimal above 1, three significant digits below."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value >= 1 else f"{value:.3g}"


def format_quantity(value: float, dimension: str, digits: int = 4) -> str:
    """Format an SI value with a readable decimal prefix (``3.35e12, 'bytes_per_s'`` -> ``3.35 TB/s``)."""
    unit = {
        "bytes": "B", "bytes_per_s": "B/s", "s": "s", "hz": "Hz", "w": "W", "j": "J",
        "flop": "FLOP", "flop_per_s": "FLOP/s", "op_per_s": "OP/s", "j_per_flop": "J/FLOP", "j_per_byte": "J/B",
        "usd": "USD", "dimensionless": "",
    }[dimension]
    if value == 0:
        return f"0 {unit}".strip()
    prefixes = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
                (1e-3, "m"), (1e-6, "u"), (1e-9, "n"), (1e-12, "p")]
    for factor, prefix in prefixes:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


KEY_UNITS = (("_bytes_per_s", "bytes/s", "3.35 TB/s"), ("_j_per_flop", "J/FLOP", "0.3 pJ/FLOP"),
             ("_j_per_byte", "J/byte", "5 pJ/B"), ("_usd_per_s", "USD/s", "2.69 USD/h"), ("_hz", "Hz", "1.98 GHz"),
             ("_bytes", "bytes", "80 GiB"), ("_w", "W", "700 W"), ("_s", "seconds", "600 ns"))
"""(name suffix, SI unit, an example with a unit) of the quantity keys: the unit a key's name gives
(the naming rule), which a bare number in it is read in."""


def key_unit(name: str) -> tuple[str, str] | None:
    """(SI unit, example) of a quantity key by its name's suffix (``max_shared_bytes_per_cta`` is a
    size in bytes too); None for a key that is not a quantity."""
    for suffix, unit, example in KEY_UNITS:
        if name.endswith(suffix) or (suffix == "_bytes" and name.endswith("_bytes_per_cta")):
            return unit, example
    return None
