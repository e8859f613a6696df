"""Quantity parsing: units, decimal vs binary prefixes, bits vs bytes, dimension checks, bad input."""

from __future__ import annotations

import math

import pytest

from gpusim.errors import UnitError
from gpusim.units import DIMENSIONS, format_quantity, parse_quantity, parse_unit


@pytest.mark.parametrize(
    ("text", "dimension", "si_value"),
    [
        # the examples of the issue
        ("3.35 TB/s", "bytes_per_s", 3.35e12),
        ("80 GiB", "bytes", 80 * 2**30),
        ("1.98 GHz", "hz", 1.98e9),
        ("600 ns", "s", 600e-9),
        ("700 W", "w", 700.0),
        # decimal prefixes are powers of 1000, binary prefixes powers of 1024
        ("64 KB", "bytes", 64_000.0),
        ("64 kB", "bytes", 64_000.0),
        ("64 KiB", "bytes", 65_536.0),
        ("50 MB", "bytes", 50e6),
        ("50 MiB", "bytes", 50 * 2**20),
        ("80 GB", "bytes", 80e9),
        ("2 TiB", "bytes", 2 * 2**40),
        ("1 PB", "bytes", 1e15),
        # bits are an eighth of a byte, with either kind of prefix
        ("400 Gb/s", "bytes_per_s", 50e9),
        ("8 bits", "bytes", 1.0),
        ("5120 b", "bytes", 640.0),
        ("1 Kib", "bytes", 128.0),
        ("1.3 pJ/bit", "j_per_byte", 1.3e-12 * 8),
        # times, rates and compound units
        ("1.5 us", "s", 1.5e-6),
        ("1.5 µs", "s", 1.5e-6),
        ("2 ms", "s", 2e-3),
        ("1 min", "s", 60.0),
        ("2.5 USD/h", "usd_per_s", 2.5 / 3600),
        ("2 GB per s", "bytes_per_s", 2e9),
        ("989.4 TFLOP/s", "flop_per_s", 989.4e12),
        ("5 TFLOPS", "flop_per_s", 5e12),
        ("0.3 pJ/FLOP", "j_per_flop", 0.3e-12),
        ("25 pJ/B", "j_per_byte", 25e-12),
        ("2 GFLOP", "flop", 2e9),
        ("5 pJ", "j", 5e-12),
        # spacing does not matter; a bare number is SI already
        ("80GiB", "bytes", 80 * 2**30),
        ("  3.35 TB/s  ", "bytes_per_s", 3.35e12),
        ("3.35e12", "bytes_per_s", 3.35e12),
        ("1e-9", "s", 1e-9),
        (3.35e12, "bytes_per_s", 3.35e12),
        (132, "dimensionless", 132.0),
        # the sign is kept (bounds are the schema's business, not the parser's)
        ("-5 GB", "bytes", -5e9),
    ],
)
def test_parse_quantity_to_si(text, dimension, si_value):
    assert parse_quantity(text, dimension) == pytest.approx(si_value, rel=1e-12)


def test_decimal_and_binary_prefixes_differ_by_the_expected_factor():
    assert parse_quantity("1 GiB", "bytes") / parse_quantity("1 GB", "bytes") == pytest.approx(2**30 / 1e9)
    assert parse_quantity("1 KiB", "bytes") - parse_quantity("1 KB", "bytes") == 24.0


def test_parse_unit_returns_scale_and_dimension():
    assert parse_unit("GB/s") == (1e9, DIMENSIONS["bytes_per_s"])
    assert parse_unit("pJ/B") == (pytest.approx(1e-12), DIMENSIONS["j_per_byte"])
    assert parse_unit("Gb/s")[0] == 1e9 / 8


@pytest.mark.parametrize(
    ("text", "dimension", "message"),
    [
        ("3.35 GHz", "bytes_per_s", "expected a bandwidth such as 3.35 TB/s, got '3.35 GHz' (hz)"),
        ("80 GB", "hz", "expected a frequency such as 1.98 GHz, got '80 GB' (bytes)"),
        ("9.3 TB", "bytes_per_s", "(bytes)"),
        ("600 ns", "bytes", "(s)"),
        ("700 W", "j", "(w)"),
        ("3.35 TB/s", "flop_per_s", "expected a rate such as 989.4 TFLOP/s"),
        ("1 GHz", "s", "expected a time such as 600 ns"),
        ("3 B/s/s", "bytes_per_s", "expected a bandwidth"),
    ],
)
def test_wrong_dimension_is_an_error(text, dimension, message):
    with pytest.raises(UnitError) as info:
        parse_quantity(text, dimension)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a data size such as 80 GiB, got ''"),
        ("GB", "got 'GB'"),
        ("abc", "got 'abc'"),
        ("3.35 TB/", "malformed unit 'TB/'"),
        ("3 /s", "malformed unit '/s'"),
        ("3..5 GB", "unknown unit"),
        ("3 XB", "unknown unit 'XB'"),
        ("3 GB GB", "unknown unit 'GB GB'"),
        ("1,000 GB", "unknown unit"),
        ("1 GiHz", "binary prefix 'Gi' only applies to bytes or bits"),
        ("nan GB", "got 'nan GB'"),
        ("inf", "got 'inf'"),
    ],
)
def test_malformed_strings_are_errors(text, message):
    with pytest.raises(UnitError) as info:
        parse_quantity(text, "bytes")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_numbers(value):
    with pytest.raises(UnitError, match="got a boolean"):
        parse_quantity(value, "bytes")


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "1e999 B", "-1e999 B"])
def test_non_finite_values_are_errors(value):
    with pytest.raises(UnitError, match="finite"):
        parse_quantity(value, "bytes")


@pytest.mark.parametrize(("value", "type_name"), [(None, "NoneType"), ([80], "list"), ({"GB": 80}, "dict")])
def test_non_scalars_are_errors(value, type_name):
    with pytest.raises(UnitError, match=f"got {type_name}"):
        parse_quantity(value, "bytes")


def test_unknown_expected_dimension_is_a_programming_error():
    with pytest.raises(KeyError):
        parse_quantity("1 GB", "furlongs")


def test_unit_error_is_a_value_error():
    # pydantic turns ValueErrors raised in validators into validation errors with the key path
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize(
    ("value", "dimension", "text"),
    [
        (3.35e12, "bytes_per_s", "3.35 TB/s"),
        (1.98e9, "hz", "1.98 GHz"),
        (600e-9, "s", "600 ns"),
        (700.0, "w", "700 W"),
        (0.0, "bytes", "0 B"),
        (989.4e12, "flop_per_s", "989.4 TFLOP/s"),
    ],
)
def test_format_quantity(value, dimension, text):
    assert format_quantity(value, dimension) == text
    assert parse_quantity(text, dimension) == pytest.approx(value, rel=1e-12)


def test_plural_counts_one_and_many():
    from gpusim.units import plural

    assert plural(1, "point") == "1 point"
    assert plural(0, "point") == "0 points"
    assert plural(12345, "kernel launch", "kernel launches") == "12,345 kernel launches"


def test_durations_rates_and_money_keep_their_digits():
    from gpusim.units import format_duration, format_rate, format_usd

    assert format_duration(0.1696) == "169.6 ms"
    assert format_duration(90.0) == "1.5 min" and format_duration(3 * 3600.0) == "3 h"
    assert format_duration(2019.5 * 86400) == "2,020 days"
    assert format_rate(353690.0) == "353,690" and format_rate(12.34) == "12.3" and format_rate(0.0235) == "0.0235"
    assert format_usd(130328.624) == "$130,328.62" and format_usd(0.000127) == "$0.000127"
