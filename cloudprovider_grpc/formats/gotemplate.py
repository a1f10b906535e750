"""A strict renderer for the subset of Go text/template the in-tree Cherry provider's users write.

The in-tree provider renders `cloudinit` and `hostname-pattern` with Go's text/template over a struct,
so users' files contain `{{.Field}}` actions, possibly with Go's whitespace forms (`{{ .Field }}`,
trim markers `{{- .Field -}}`) and comments (`{{/* ... */}}`). We support exactly those. Anything else
(pipelines, functions, `if`/`range`) is rejected when the configuration loads, and so is a field the
template data does not have: Go itself fails on an unknown struct field at execution time, which
in-tree surfaced only when a scale-up was attempted; we surface it at startup.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

_FIELD_RE = re.compile(r"^\.([A-Za-z_][A-Za-z0-9_]*)$")
_SPACE = " \t\r\n"


class TemplateError(ValueError):
    """The template uses syntax we do not support or a field the data does not have."""


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class GoTemplate:
    """A parsed template: literal text and field references, in order."""

    source: str
    parts: tuple[str | _Field, ...]

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p.name for p in self.parts if isinstance(p, _Field))

    @classmethod
    def parse(cls, source: str, allowed: Collection[str]) -> GoTemplate:
        """Parse `source`; raise TemplateError for unsupported actions or fields not in `allowed`."""
        parts: list[str | _Field] = []
        pos = 0
        trim_next = False
        while True:
            start = source.find("{{", pos)
            text = source[pos:] if start < 0 else source[pos:start]
            if trim_next:
                text = text.lstrip(_SPACE)
            if start < 0:
                parts.append(text)
                break
            end = source.find("}}", start + 2)
            if end < 0:
                raise TemplateError(f"unclosed action at offset {start}")
            inner = source[start + 2 : end]
            # Go: "{{- " trims the preceding text, " -}}" the following; the space is required.
            if len(inner) >= 2 and inner[0] == "-" and inner[1] in _SPACE:
                text = text.rstrip(_SPACE)
                inner = inner[2:]
            trim_next = len(inner) >= 2 and inner[-1] == "-" and inner[-2] in _SPACE
            if trim_next:
                inner = inner[:-2]
            parts.append(text)
            action = inner.strip(_SPACE)
            if action.startswith("/*") and action.endswith("*/"):
                pass  # a comment
            else:
                m = _FIELD_RE.match(action)
                if not m:
                    raise TemplateError(
                        f"unsupported action {{{{{action}}}}} at offset {start}: "
                        "only {{.Field}} is supported"
                    )
                if m.group(1) not in allowed:
                    raise TemplateError(
                        f"unknown field .{m.group(1)} at offset {start} (known: {', '.join(sorted(allowed))})"
                    )
                parts.append(_Field(m.group(1)))
            pos = end + 2
        return cls(source, tuple(p for p in parts if p != ""))

    def render(self, data: Mapping[str, str]) -> str:
        out: list[str] = []
        for p in self.parts:
            if isinstance(p, _Field):
                if p.name not in data:
                    raise TemplateError(f"no value for field .{p.name}")
                out.append(data[p.name])
            else:
                out.append(p)
        return "".join(out)
