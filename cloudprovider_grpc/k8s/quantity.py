"""Kubernetes resource Quantities with the exact parse and canonical-form rules of Go's apimachinery.

Go's protobuf decoder runs `resource.ParseQuantity` on every Quantity string and fails the whole Node
or Pod on a bad one, and Go's encoder writes the canonical form. So every quantity we put on the wire
goes through `parse_quantity(...).canonical()`, and every quantity we read is parsed exactly as Go
would. Values are kept as an exact decimal (integer coefficient and power of ten), never a float.

Rules ported from kubernetes/apimachinery `pkg/api/resource/quantity.go` (ParseQuantity,
parseQuantityString, CanonicalizeBytes), `suffix.go` and `amount.go` (AsCanonicalBytes,
AsCanonicalBase1024Bytes) at commit eed236c:

* grammar `<sign>?<digits>[.<digits>]<suffix>` with suffixes binary `Ki Mi Gi Ti Pi Ei`, decimal
  `n u m "" k M G T P E`, or an exponent `e<int>`/`E<int>` (case-sensitive; "E" alone is exa);
* parsed values are rounded away from zero to a multiple of 1n; a BinarySI value is capped at
  2^63-1 in magnitude, and a non-zero BinarySI value below 1 becomes DecimalSI;
* canonical form: no precision lost, no fractional digits, the largest suffix possible, the sign
  only when negative, and the format (DecimalSI, BinarySI, DecimalExponent) remembered from the
  input. BinarySI values in (-1024, 1024) or not whole are written as DecimalSI; a decimal exponent
  with no SI suffix (above E or below n) is written as `e<exp>`.

One Go quirk is deliberately not copied: Go's `String()` echoes the input verbatim when a cheap check
says it is already canonical, which lets odd spellings such as "+5" or "05" through. `canonical()`
always returns the true canonical form ("5").
"""

from __future__ import annotations

import enum
import functools
import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["Format", "Quantity", "canonical", "format_quantity", "parse_quantity"]


class Format(enum.Enum):
    DECIMAL_SI = "DecimalSI"  # 12M = 12 * 10^6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2^20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


_GRAMMAR = "<sign>?<digits>[.<digits>]<suffix>; suffix: Ki Mi Gi Ti Pi Ei | n u m k M G T P E | e<int>"

_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")

# suffix -> power of ten (suffix.go newSuffixer)
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
# suffix -> power of two
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_BY_POWER_OF_1024 = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}

_NANO_EXPONENT = -9
_MAX_BINARY = (1 << 63) - 1  # quantity.go maxAllowed
_MAX_INT18_DIGITS = 18  # math.go maxInt64Factors
# Go accepts numbers of any length; we stop at this many digits (far beyond any resource, and below
# CPython's int/str conversion limit) so a hostile string gets a clear error instead of a slow parse.
_MAX_DIGITS = 1000
# Beyond this power of ten we refuse to materialise the exact value (10^1000 bytes or cores is not a
# resource); parsing and canonical() still work for any exponent Go accepts.
_MAX_NUMERIC_EXPONENT = 1000


def _error(text: str, problem: str) -> ValueError:
    return ValueError(f"invalid quantity {text!r}: {problem} (expected {_GRAMMAR})")


def _strip_tens(coefficient: int, exponent: int) -> tuple[int, int]:
    """Normalise so equal values have one representation (zero is 0e0)."""
    if coefficient == 0:
        return 0, 0
    while coefficient % 10 == 0:
        coefficient //= 10
        exponent += 1
    return coefficient, exponent


@functools.total_ordering
class Quantity:
    """An exact quantity: `coefficient * 10**exponent`, plus the format it is written in.

    Equality and ordering compare values only (like Go's `Cmp`), so `parse_quantity("1Gi") ==
    parse_quantity("1073741824")`; the format only affects `canonical()`.
    """

    __slots__ = ("_coefficient", "_exponent", "format")

    def __init__(self, coefficient: int, exponent: int, format: Format = Format.DECIMAL_SI) -> None:
        if not isinstance(format, Format):
            raise TypeError(f"format must be a Format, not {type(format).__name__}")
        self._coefficient, self._exponent = _strip_tens(int(coefficient), int(exponent))
        self.format = format

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_value(cls, value: int | Fraction | Decimal, format: Format = Format.DECIMAL_SI) -> Quantity:
        """An exact Quantity for `value`; raises ValueError if it has no finite decimal expansion."""
        if isinstance(value, bool):
            raise TypeError("a quantity value must be a number, not bool")
        if isinstance(value, int):
            return cls(value, 0, format)
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise ValueError(f"quantity value {value} is not finite")
            sign, digits, exponent = value.as_tuple()
            coefficient = int("".join(map(str, digits)) or "0")
            return cls(-coefficient if sign else coefficient, int(exponent), format)
        if isinstance(value, Fraction):
            numerator, denominator = value.numerator, value.denominator
            twos = fives = 0
            while denominator % 2 == 0:
                denominator //= 2
                twos += 1
            while denominator % 5 == 0:
                denominator //= 5
                fives += 1
            if denominator != 1:
                raise ValueError(f"quantity value {value} has no exact decimal form")
            places = max(twos, fives)
            return cls(numerator * 2 ** (places - twos) * 5 ** (places - fives), -places, format)
        raise TypeError(f"a quantity value must be int, Fraction or Decimal, not {type(value).__name__}")

    # ---- value --------------------------------------------------------------------------------

    @property
    def value(self) -> Fraction:
        """The exact value (cores for cpu, bytes for memory)."""
        if self._exponent > _MAX_NUMERIC_EXPONENT or self._exponent < -_MAX_NUMERIC_EXPONENT:
            raise ValueError(f"quantity {self.canonical()} is too large or small to compute with")
        if self._exponent >= 0:
            return Fraction(self._coefficient * 10**self._exponent)
        return Fraction(self._coefficient, 10**-self._exponent)

    def __float__(self) -> float:
        if self._exponent > 400:
            return math.copysign(math.inf, self._coefficient)
        if self._exponent < -400:
            return 0.0
        return float(self.value)

    def is_zero(self) -> bool:
        return self._coefficient == 0

    def sign(self) -> int:
        return (self._coefficient > 0) - (self._coefficient < 0)

    # ---- arithmetic (Go's Quantity.Add/Sub: a zero receiver takes the other operand's format) ----

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity.from_value(self.value + other.value, other.format if self.is_zero() else self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity.from_value(self.value - other.value, other.format if self.is_zero() else self.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self._coefficient, self._exponent, self.format)

    def clamp_at_zero(self) -> Quantity:
        """This quantity, or zero (same format) if it is negative: allocatable never goes below 0."""
        return Quantity(0, 0, self.format) if self._coefficient < 0 else self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return (self._coefficient, self._exponent) == (other._coefficient, other._exponent)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value

    def __hash__(self) -> int:
        return hash((self._coefficient, self._exponent))

    # ---- formatting ---------------------------------------------------------------------------

    def canonical(self) -> str:
        """The string Go's Quantity.String()/Marshal write for this value and format."""
        if self._coefficient == 0:
            return "0"
        fmt = self.format
        if fmt is Format.BINARY_SI:
            # CanonicalizeBytes: small or fractional binary values are shown as DecimalSI so that
            # nothing is rounded.
            fractional = self._exponent < 0  # normalised: a negative exponent means a fraction
            small = 0 <= self._exponent < 4 and abs(self._coefficient) * 10**self._exponent < 1024
            if fractional or small:
                fmt = Format.DECIMAL_SI
        if fmt is Format.BINARY_SI:
            number = self._coefficient * 10**self._exponent
            power = 0
            while number % 1024 == 0:
                number //= 1024
                power += 1
            # Binary values are capped at 2^63-1 when parsed, so 1024^6 (Ei) is the largest power
            # Go meets; a larger sum keeps Ei and a longer number instead of losing the suffix.
            while power > 6:
                number *= 1024
                power -= 1
            return f"{number}{_BINARY_BY_POWER_OF_1024[power]}"
        coefficient, exponent = self._coefficient, self._exponent
        while exponent % 3:  # AsCanonicalBytes: exponent rounded down to a multiple of three
            coefficient *= 10
            exponent -= 1
        suffix = _DECIMAL_BY_EXPONENT.get(exponent) if fmt is Format.DECIMAL_SI else None
        if suffix is None:  # DecimalExponent, or beyond the SI suffixes (n..E)
            suffix = "" if exponent == 0 else f"e{exponent}"
        return f"{coefficient}{suffix}"

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r}, {self.format.value})"


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: split into (positive, value, num, denom, suffix) or raise."""
    positive = True
    pos = 0
    end = len(text)
    if text[0] == "-":
        positive = False
        pos = 1
    elif text[0] == "+":
        pos = 1
    while True:  # leading zeros
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, text, text[start:], "", ""
    num = text[start:pos] or "0"
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_LETTERS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise _error(text, f"unexpected {text[pos]!r} at position {pos}")
    return positive, value, num, denom, text[suffix_start:]


def _interpret(text: str, suffix: str) -> tuple[int, int, Format]:
    """suffix.go interpret: (base, exponent, format) or raise."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and all(c in _DIGITS for c in body):
            parsed = int(digits)
            if -(2**63) <= parsed < 2**63:  # strconv.ParseInt(..., 64)
                # Go then converts with int32(parsed), which wraps; copied for parity.
                return 10, (parsed + 2**31) % 2**32 - 2**31, Format.DECIMAL_EXPONENT
    raise _error(text, f"unknown suffix {suffix!r}")


def _takes_fast_path(num: str, denom: str, exponent: int, fmt: Format) -> bool:
    """Whether ParseQuantity's int64 fast path handles the number (else inf.Dec parses `value`)."""
    if fmt is Format.BINARY_SI:
        if denom:
            return False
        precision = 15 - len(num) - (exponent * 3 // 10) - 1
        return precision >= 0 and int(num) << exponent <= _MAX_BINARY
    precision = _MAX_INT18_DIGITS - (len(num) + len(denom))
    return precision >= 0 and exponent - len(denom) >= _NANO_EXPONENT


def parse_quantity(text: str) -> Quantity:
    """Parse like Go's resource.ParseQuantity; raise ValueError for anything Go rejects."""
    if not isinstance(text, str):
        raise TypeError(f"a quantity must be a string, not {type(text).__name__}")
    if text == "":
        raise _error(text, "empty string")
    if text == "0":
        return Quantity(0, 0, Format.DECIMAL_SI)
    positive, value, num, denom, suffix = _scan(text)
    if len(num) + len(denom) > _MAX_DIGITS:
        raise _error(text[:40] + "...", f"more than {_MAX_DIGITS} digits")
    base, exponent, fmt = _interpret(text, suffix)
    if not _takes_fast_path(num, denom, exponent, fmt) and not any(c in _DIGITS for c in value):
        # inf.Dec.SetString("." or "-.") fails: Go's ErrNumeric.
        raise _error(text, "no digits in the number")

    coefficient = int(num + denom)
    if base == 10:
        power10 = exponent - len(denom)
    else:
        coefficient <<= exponent
        power10 = -len(denom)
    if not positive:
        coefficient = -coefficient

    if coefficient and power10 < _NANO_EXPONENT:
        # Round away from zero to a whole number of nanos ("0.9n" -> "1n").
        shift = _NANO_EXPONENT - power10
        magnitude = abs(coefficient)
        # A shift longer than the number means a value below 1n: it rounds up to 1n.
        magnitude = 1 if shift > len(str(magnitude)) else -(-magnitude // 10**shift)
        coefficient = magnitude if coefficient > 0 else -magnitude
        power10 = _NANO_EXPONENT

    if fmt is Format.BINARY_SI:
        magnitude_value = Fraction(abs(coefficient)) * Fraction(10) ** power10
        if magnitude_value > _MAX_BINARY:
            coefficient, power10 = (_MAX_BINARY if coefficient > 0 else -_MAX_BINARY), 0
        elif 0 < magnitude_value < 1:
            fmt = Format.DECIMAL_SI
    return Quantity(coefficient, power10, fmt)


def canonical(text: str) -> str:
    """The canonical form of a quantity string; raises ValueError if Go would reject it."""
    return parse_quantity(text).canonical()


def format_quantity(value: int | Fraction | Decimal, fmt: Format | str = Format.DECIMAL_SI) -> str:
    """Canonical string for an exact value in a format ("DecimalSI", "BinarySI", "DecimalExponent")."""
    return Quantity.from_value(value, Format(fmt)).canonical()
