"""A reader for the gcfg (git-config style INI) files the in-tree Cherry provider takes as --cloud-config.

Semantics follow gopkg.in/gcfg.v1, which the in-tree provider uses: `[section]` and
`[section "subsection"]` headers, section and variable names case-insensitive (subsection names are
not), `;`/`#` comments, double-quoted values with `\\"`, `\\\\`, `\\n`, `\\t`, `\\b` escapes, a trailing
backslash continuing a line, a name without `=` meaning "true", repeated names collecting values
(multi-valued variables; a blank value resets the list). Errors name the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from cloudprovider_grpc.core.errors import ConfigError

_SECTION_RE = re.compile(r'^\[\s*([A-Za-z][A-Za-z0-9\-_.]*)\s*(?:"((?:[^"\\]|\\.)*)"\s*)?\]\s*(?:[;#].*)?$')
_NAME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9\-_]*)\s*(=?)(.*)$", re.S)
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "b": "\b"}


@dataclass
class Section:
    """One section: `name` lower-cased, `sub` as written (None without a subsection)."""

    name: str
    sub: str | None
    values: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def label(self) -> str:
        return f'[{self.name} "{self.sub}"]' if self.sub is not None else f"[{self.name}]"


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join backslash-continued lines; yield (first line number, content)."""
    buf: list[str] = []
    first = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        if not buf:
            first = n
        line = raw.rstrip("\r")
        # an odd number of trailing backslashes continues the line
        stripped = line.rstrip()
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            buf.append(stripped[:-1])
            continue
        buf.append(line)
        yield first, "".join(buf)
        buf = []
    if buf:
        yield first, "".join(buf)


def _parse_value(raw: str, where: str) -> str:
    out: list[str] = []
    pending_space = ""
    in_quotes = False
    i = 0
    raw = raw.strip()
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in _ESCAPES:
                raise ConfigError(where, f"invalid escape sequence in value {raw!r}")
            out.append(pending_space + _ESCAPES[raw[i + 1]])
            pending_space = ""
            i += 2
            continue
        if c == '"':
            in_quotes = not in_quotes
            out.append(pending_space)
            pending_space = ""
        elif in_quotes:
            out.append(c)
        elif c in ";#":
            break
        elif c in " \t":
            pending_space += c
        else:
            out.append(pending_space + c)
            pending_space = ""
        i += 1
    if in_quotes:
        raise ConfigError(where, f"unterminated quoted value {raw!r}")
    return "".join(out)


def _unquote_sub(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def parse_gcfg(text: str, source: str = "cloud-config") -> list[Section]:
    """Parse gcfg text into sections in file order (a repeated header continues the same section)."""
    sections: list[Section] = []
    by_key: dict[tuple[str, str | None], Section] = {}
    current: Section | None = None
    for n, line in _logical_lines(text):
        s = line.strip()
        if not s or s[0] in ";#":
            continue
        if s.startswith("["):
            m = _SECTION_RE.match(s)
            if not m:
                raise ConfigError(source, f"line {n}: malformed section header {s!r}")
            key = (m.group(1).lower(), _unquote_sub(m.group(2)) if m.group(2) is not None else None)
            current = by_key.get(key)
            if current is None:
                current = by_key[key] = Section(*key)
                sections.append(current)
            continue
        if current is None:
            raise ConfigError(source, f"line {n}: variable outside any section")
        m = _NAME_RE.match(s)
        if not m:
            raise ConfigError(source, f"line {n}: expected 'name = value', got {s!r}")
        name, eq, rest = m.group(1).lower().replace("_", "-"), m.group(2), m.group(3)
        where = f"{source} {current.label()} {name} (line {n})"
        value = _parse_value(rest, where) if eq else "true"
        if not eq and rest.strip() and rest.strip()[0] not in ";#":
            raise ConfigError(source, f"line {n}: expected '=' after {name!r}")
        values = current.values.setdefault(name, [])
        if value == "" and eq:
            values.clear()  # gcfg: a blank value resets a multi-valued variable
            values.append("")
        else:
            if values == [""]:
                values.clear()
            values.append(value)
        current.lines[name] = n
    return sections
