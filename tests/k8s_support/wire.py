"""A tiny protobuf wire reader, independent of the protobuf runtime, for checking raw bytes.

It knows only the wire format (varint, 64-bit, length-delimited, 32-bit), so tests can check what
is on the wire (field order, map entry order, absent fields) without trusting the library that
wrote the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden"


@dataclass(frozen=True)
class Field:
    number: int
    wire_type: int
    value: int | bytes


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint too long")


def fields(data: bytes) -> list[Field]:
    """Top-level fields of one message, in wire order."""
    out: list[Field] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            out.append(Field(number, 0, value))
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            out.append(Field(number, 2, data[pos : pos + length]))
            pos += length
        elif wire_type == 1:
            out.append(Field(number, 1, data[pos : pos + 8]))
            pos += 8
        elif wire_type == 5:
            out.append(Field(number, 5, data[pos : pos + 4]))
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    return out


def sub(data: bytes, *path: int) -> list[bytes]:
    """Every length-delimited value reached by following field numbers `path` from `data`."""
    current = [data]
    for number in path:
        current = [f.value for blob in current for f in fields(blob) if f.number == number]  # type: ignore[misc]
    return current  # type: ignore[return-value]


def map_entries(data: bytes, *path: int) -> list[tuple[bytes, bytes]]:
    """(key, value) bytes of the map entries at `path` (entry: key = 1, value = 2), in wire order."""
    entries = []
    for entry in sub(data, *path):
        parts = {f.number: f.value for f in fields(entry)}
        entries.append((parts[1], parts[2]))
    return entries
