"""Quantity parsing and canonical form against Kubernetes' own test vectors.

Vectors are copied from kubernetes/apimachinery `pkg/api/resource/quantity_test.go` at commit
eed236ceee2c19c2753a3d93ac0631dc20750454 (TestQuantityParse, TestQuantityString,
TestQuantityParseEmit, TestParseQuantity and the invalid list of TestQuantityParse). Upstream writes
an expected value as `decQuantity(mantissa, scale, format)` = mantissa * 10^scale; the tables below
keep that notation so each row can be checked against the Go file by eye.
"""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction

import pytest

from cloudprovider_grpc.k8s.quantity import Format, Quantity, canonical, format_quantity, parse_quantity

pytestmark = pytest.mark.unit

DSI, BSI, DEX = Format.DECIMAL_SI, Format.BINARY_SI, Format.DECIMAL_EXPONENT
MAX_INT64 = 2**63 - 1


def dec(mantissa: int, scale: int) -> Fraction:
    return Fraction(mantissa) * Fraction(10) ** scale


# ---- apimachinery's vectors (k8s.io/apimachinery pkg/api/resource/quantity_test.go) -----------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        (".001Ki", "1024m"),
        ("300Mi", "300Mi"),
        ("1025", "1025"),
        ("5", "5"),
        ("0.5", "500m"),
        ("3000", "3k"),
        ("0", "0"),
        # values our templates use
        ("4", "4"),
        ("3800m", "3800m"),
        ("16Gi", "16Gi"),
        ("15788Mi", "15788Mi"),
        ("110", "110"),
        ("100Gi", "100Gi"),
    ],
)
def test_canonical_examples(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert canonical(expected) == expected  # canonical strings are fixed points


@pytest.mark.parametrize("text", ["", "1gi", "1GB", "abc", "1.2.3"])
def test_research_invalid_forms(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


# ---- TestQuantityParse ---------------------------------------------------------------------------

PARSE_TABLE = [
    ("0", 0, 0, DSI),
    ("0n", 0, 0, DSI),
    ("0u", 0, 0, DSI),
    ("0m", 0, 0, DSI),
    ("0Ki", 0, 0, BSI),
    ("0k", 0, 0, DSI),
    ("0Mi", 0, 0, BSI),
    ("0M", 0, 0, DSI),
    ("0Gi", 0, 0, BSI),
    ("0G", 0, 0, DSI),
    ("0Ti", 0, 0, BSI),
    ("0T", 0, 0, DSI),
    ("1", 1, 0, DSI),
    ("1Ki", 1024, 0, BSI),
    ("8Ki", 8 * 1024, 0, BSI),
    ("7Mi", 7 * 1024**2, 0, BSI),
    ("6Gi", 6 * 1024**3, 0, BSI),
    ("5Ti", 5 * 1024**4, 0, BSI),
    ("4Pi", 4 * 1024**5, 0, BSI),
    ("3Ei", 3 * 1024**6, 0, BSI),
    ("10Ti", 10 * 1024**4, 0, BSI),
    ("100Ti", 100 * 1024**4, 0, BSI),
    ("5n", 5, -9, DSI),
    ("4u", 4, -6, DSI),
    ("3m", 3, -3, DSI),
    ("9", 9, 0, DSI),
    ("8k", 8, 3, DSI),
    ("50k", 5, 4, DSI),
    ("7M", 7, 6, DSI),
    ("6G", 6, 9, DSI),
    ("5T", 5, 12, DSI),
    ("40T", 4, 13, DSI),
    ("300T", 3, 14, DSI),
    ("2P", 2, 15, DSI),
    ("1E", 1, 18, DSI),
    ("1E-3", 1, -3, DEX),
    ("1e3", 1, 3, DEX),
    ("1E6", 1, 6, DEX),
    ("1e9", 1, 9, DEX),
    ("1E12", 1, 12, DEX),
    ("1e15", 1, 15, DEX),
    ("1E18", 1, 18, DEX),
    ("1e14", 1, 14, DEX),
    ("1e13", 1, 13, DEX),
    ("100.035k", 100035, 0, DSI),
    ("0.001", 1, -3, DSI),
    ("0.0005k", 5, -1, DSI),
    ("0.005", 5, -3, DSI),
    ("0.05", 5, -2, DSI),
    ("0.5", 5, -1, DSI),
    ("0.00050k", 5, -1, DSI),
    ("0.00500", 5, -3, DSI),
    ("0.05000", 5, -2, DSI),
    ("0.50000", 5, -1, DSI),
    ("0.5e0", 5, -1, DEX),
    ("0.5e-1", 5, -2, DEX),
    ("0.5e-2", 5, -3, DEX),
    ("10.035M", 10035, 3, DSI),
    ("1.2e3", 12, 2, DEX),
    ("1.3E+6", 13, 5, DEX),
    ("1.40e9", 14, 8, DEX),
    ("1.53E12", 153, 10, DEX),
    ("1.6e15", 16, 14, DEX),
    ("1.7E18", 17, 17, DEX),
    ("9.01", 901, -2, DSI),
    ("8.1k", 81, 2, DSI),
    ("7.123456M", 7123456, 0, DSI),
    ("6.987654321G", 6987654321, 0, DSI),
    ("5.444T", 5444, 9, DSI),
    ("40.1T", 401, 11, DSI),
    ("300.2T", 3002, 11, DSI),
    ("2.5P", 25, 14, DSI),
    ("1.01E", 101, 16, DSI),
    # things that saturate or round
    ("3.001n", 4, -9, DSI),
    ("1.1E-9", 2, -9, DEX),
    ("0.0000000001", 1, -9, DSI),
    ("0.0000000005", 1, -9, DSI),
    ("0.00000000050", 1, -9, DSI),
    ("0.5e-9", 1, -9, DEX),
    ("0.9n", 1, -9, DSI),
    ("0.00000012345", 124, -9, DSI),
    ("0.00000012354", 124, -9, DSI),
    ("9Ei", MAX_INT64, 0, BSI),
    ("9223372036854775807Ki", MAX_INT64, 0, BSI),
    ("12E", 12, 18, DSI),
    # fractional binary
    ("100.035Ki", 10243584, -2, BSI),
    ("0.5Mi", 524288, 0, BSI),
    ("0.05Gi", 536870912, -1, BSI),
    ("0.025Ti", 274877906944, -1, BSI),
    # "things written by trolls"
    ("0.000000000001Ki", 2, -9, DSI),  # rounds up, changes format
    (".001", 1, -3, DSI),
    (".0001k", 100, -3, DSI),
    ("1.", 1, 0, DSI),
    ("1.G", 1, 9, DSI),
]


@pytest.mark.parametrize(("text", "mantissa", "scale", "fmt"), PARSE_TABLE)
def test_parse_value_and_format(text: str, mantissa: int, scale: int, fmt: Format) -> None:
    q = parse_quantity(text)
    assert q.value == dec(mantissa, scale)
    assert q.format is fmt


@pytest.mark.parametrize(("text", "mantissa", "scale", "fmt"), PARSE_TABLE)
def test_parse_signed_variants(text: str, mantissa: int, scale: int, fmt: Format) -> None:
    negative = parse_quantity("-" + text)
    assert negative.value == -dec(mantissa, scale)
    assert negative.format is fmt
    positive = parse_quantity("+" + text)
    assert positive.value == dec(mantissa, scale)
    assert positive.format is fmt


@pytest.mark.parametrize(
    "text",
    [
        *("1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 "),
        # and forms the scanner must reject on its own: no digits before a tiny exponent (Go's
        # inf.Dec parse fails), a bare or malformed exponent, a repeated sign, a non-ASCII digit
        *(".e-10", "-.Ei", "e", "1e", "1E+", "1e+-3", "--1", "1Ki3", "\u0661"),
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        parse_quantity(5)  # type: ignore[arg-type]


def test_parse_accepts_digitless_forms_go_accepts() -> None:
    # parseQuantityString's table: "." and "-." are zero; the int64 fast path takes ".Ti".
    for text in (".", "-.", "+.", ".Ti", "0e-20"):
        assert parse_quantity(text).is_zero(), text


# ---- TestQuantityString --------------------------------------------------------------------------

STRING_TABLE = [
    (1024**3, 0, BSI, "1Gi", "1024Mi"),
    (300 * 1024**2, 0, BSI, "300Mi", "307200Ki"),
    (6 * 1024, 0, BSI, "6Ki", ""),
    (1001 * 1024**3, 0, BSI, "1001Gi", "1025024Mi"),
    (1024**4, 0, BSI, "1Ti", "1024Gi"),
    (5, 0, BSI, "5", "5000m"),
    (500, -3, BSI, "500m", "0.5"),
    (1, 9, DSI, "1G", "1000M"),
    (1000, 6, DSI, "1G", "0.001T"),
    (1000000, 3, DSI, "1G", ""),
    (1000000000, 0, DSI, "1G", ""),
    (1, -3, DSI, "1m", "1000u"),
    (80, -3, DSI, "80m", ""),
    (1080, -3, DSI, "1080m", "1.08"),
    (108, -2, DSI, "1080m", "1080000000n"),
    (10800, -4, DSI, "1080m", ""),
    (300, 6, DSI, "300M", ""),
    (1, 12, DSI, "1T", ""),
    (1234567, 6, DSI, "1234567M", ""),
    (1234567, -3, BSI, "1234567m", ""),
    (3, 3, DSI, "3k", ""),
    (1025, 0, BSI, "1025", ""),
    (0, 0, DSI, "0", ""),
    (0, 0, BSI, "0", ""),
    (1, 9, DEX, "1e9", ".001e12"),
    (1, -3, DEX, "1e-3", "0.001e0"),
    (1, -9, DEX, "1e-9", "1000e-12"),
    (80, -3, DEX, "80e-3", ""),
    (300, 6, DEX, "300e6", ""),
    (1, 12, DEX, "1e12", ""),
    (1, 3, DEX, "1e3", ""),
    (3, 3, DEX, "3e3", ""),
    (3, 3, DSI, "3k", ""),
    (0, 0, DEX, "0", "00"),
    (1, -9, DSI, "1n", ""),
    (80, -9, DSI, "80n", ""),
    (1080, -9, DSI, "1080n", ""),
    (108, -8, DSI, "1080n", ""),
    (10800, -10, DSI, "1080n", ""),
    (1, -6, DSI, "1u", ""),
    (80, -6, DSI, "80u", ""),
    (1080, -6, DSI, "1080u", ""),
]


@pytest.mark.parametrize(("mantissa", "scale", "fmt", "expected", "alternate"), STRING_TABLE)
def test_canonical_string(mantissa: int, scale: int, fmt: Format, expected: str, alternate: str) -> None:
    q = Quantity(mantissa, scale, fmt)
    assert q.canonical() == expected
    assert str(q) == expected
    assert canonical(expected) == expected
    if alternate:
        assert canonical(alternate) == expected
    if mantissa:  # never "-0"
        assert Quantity(-mantissa, scale, fmt).canonical() == "-" + expected


# ---- TestQuantityParseEmit -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
    ],
)
def test_parse_emit(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert canonical("-" + text) == "-" + expected


# ---- TestParseQuantity: large values keep every digit --------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("999999999999999999", "999999999999999999"),
        ("-999999999999999999.0", "-999999999999999999"),
        ("999999999999999999.1", "999999999999999999100m"),
        ("9999999999999999999", "9999999999999999999"),
        ("-1E", "-1E"),
        ("1000000000000000000", "1E"),
        ("1.0E", "1E"),
        ("9999999999999999999000m", "9999999999999999999"),
        ("1.0000000000000000001E", "1000000000000000000100m"),
        ("-1000000000000000000.1", "-1000000000000000000100m"),
        ("1.000000000000000001E", "1000000000000000001"),
        ("10E", "10E"),
        ("-10000000000000000000", "-10E"),
        ("10000000000000000000000m", "10E"),
        ("10.0000000000000000001E", "10000000000000000000100m"),
        ("10.000000000000000001E", "10000000000000000001"),
        ("-9223372036854775809", "-9223372036854775809"),
        ("9223372036854775806.1", "9223372036854775806100m"),
        ("-9223372036854775808000m", "-9223372036854775808"),
        ("9223372036854775807.1", "9223372036854775807100m"),
        ("9223372036854775808", "9223372036854775808"),
        ("-9223372036854775807.1", "-9223372036854775807100m"),
    ],
)
def test_large_values_keep_precision(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert parse_quantity(text).value == Fraction(Decimal(text.removesuffix("E").removesuffix("m"))) * (
        10**18 if text.endswith("E") else Fraction(1, 1000) if text.endswith("m") else 1
    )


def test_decimal_beyond_exa_falls_back_to_exponent() -> None:
    # quantity.go CanonicalizeBytes: no SI suffix above E (10^18) or below n, so "e<exp>" is used
    # rather than dropping the exponent.
    assert canonical("1000E") == "1e21"
    assert format_quantity(Fraction(1, 10**12)) == "1e-12"


def test_whole_binary_values_stay_binary_and_others_become_decimal() -> None:
    assert canonical("1.5Ki") == "1536"  # whole, but not a multiple of 1024
    assert canonical("0.5Ki") == "512"  # below 1024: DecimalSI
    assert canonical("100.035Ki") == "102435840m"  # not whole: DecimalSI, nothing rounded
    assert canonical("-8Ei") == "-9223372036854775807"  # capped at 2^63-1 in magnitude


def test_go_string_cache_quirk_not_copied() -> None:
    # Go's String() echoes "+5" or "05" verbatim (its cheap "already canonical" check); the
    # canonical form proper has no sign and no leading zeros.
    assert canonical("+5") == "5"
    assert canonical("05") == "5"
    assert canonical("-0") == "0"


# ---- values, arithmetic, formatting --------------------------------------------------------------


def test_values_are_exact_and_float_is_a_view() -> None:
    assert parse_quantity("100m").value == Fraction(1, 10)
    assert parse_quantity("1Gi").value == 2**30
    assert float(parse_quantity("1500m")) == 1.5
    assert float(parse_quantity("1e999")) == float("inf")
    assert parse_quantity("1Gi") == parse_quantity("1073741824")  # equality is by value
    assert parse_quantity("1") < parse_quantity("1001m")


def test_subtraction_and_clamp_keep_format() -> None:
    # 16Gi - 1Gi = 15Gi (BinarySI kept)
    assert (parse_quantity("16Gi") - parse_quantity("1Gi")).canonical() == "15Gi"
    # 4 - 200m = 3.8 -> "3800m"
    assert (parse_quantity("4") - parse_quantity("200m")).canonical() == "3800m"
    # 16Gi - 1000M = 17179869184 - 1000000000 = 16179869184; / 1024 = 15800653.5, so no binary
    # suffix fits and the whole number is written out
    assert (parse_quantity("16Gi") - parse_quantity("1000M")).canonical() == "16179869184"
    short = parse_quantity("1") - parse_quantity("2")
    assert short.canonical() == "-1"
    assert short.clamp_at_zero().canonical() == "0"
    assert parse_quantity("2").clamp_at_zero() == parse_quantity("2")
    # Go's Add/Sub: a zero receiver takes the other operand's format
    assert (parse_quantity("0") + parse_quantity("1Ki")).canonical() == "1Ki"
    assert (-parse_quantity("1Ki")).canonical() == "-1Ki"


def test_format_quantity() -> None:
    assert format_quantity(2**30, Format.BINARY_SI) == "1Gi"
    assert format_quantity(2**30, "DecimalSI") == "1073741824"
    assert format_quantity(Fraction(3, 2)) == "1500m"
    assert format_quantity(Decimal("0.25")) == "250m"
    assert format_quantity(3000, Format.DECIMAL_EXPONENT) == "3e3"
    with pytest.raises(ValueError, match="no exact decimal"):
        format_quantity(Fraction(1, 3))
    with pytest.raises(ValueError):
        format_quantity(1, "Hex")
    with pytest.raises(TypeError):
        format_quantity(1.5)  # type: ignore[arg-type]


def test_canonical_round_trips_random_quantities() -> None:
    """For many random inputs: canonical() parses back to the same value and is a fixed point."""
    rng = random.Random(20260101)
    suffixes = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "e3", "e-2"]
    for _ in range(2000):
        integer = str(rng.randrange(0, 10 ** rng.randrange(1, 12)))
        fraction = "." + str(rng.randrange(0, 10**6)) if rng.random() < 0.4 else ""
        sign = rng.choice(["", "", "-", "+"])
        text = sign + integer + fraction + rng.choice(suffixes)
        q = parse_quantity(text)
        text2 = q.canonical()
        again = parse_quantity(text2)
        assert again == q, (text, text2)
        assert again.canonical() == text2, (text, text2)
        assert "." not in text2 and not text2.startswith("+"), text2


def test_extreme_exponents_and_lengths() -> None:
    # Any exponent Go accepts still parses and formats without materialising 10^exp.
    huge = parse_quantity("1e2147483647")
    assert huge.canonical() == "10e2147483646"  # exponent rounded down to a multiple of 3
    assert float(huge) == float("inf")
    with pytest.raises(ValueError, match="too large"):
        _ = huge.value
    assert parse_quantity("1e-2147483648").canonical() == "1e-9"  # rounds up to one nano
    # Go converts the parsed exponent with int32(), which wraps: 2^32 becomes 0.
    assert parse_quantity("1e4294967296").value == 1
    with pytest.raises(ValueError, match="unknown suffix"):
        parse_quantity("1e9223372036854775808")  # beyond int64: strconv.ParseInt fails
    with pytest.raises(ValueError, match="more than 1000 digits"):
        parse_quantity("1" * 1001)
    assert parse_quantity("1" * 1000).value == int("1" * 1000)
