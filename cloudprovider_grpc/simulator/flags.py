"""cluster-autoscaler's command line, as a user pastes it from its Deployment, into scenario options.

Accepts `--name=value`, `--name value` and bare boolean `--name` tokens, one per line or on one
line, with YAML list dashes and quotes as they appear in a manifest (`- --expander=priority`).
Flags the simulator models become `autoscaler:` keys under the same names; the others (logging,
kubeconfig, leader election, discovery) are listed in one note, never silently dropped.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from cloudprovider_grpc.simulator.scenario import AutoscalerOptions

_FIELDS = {f.alias or n: f for n, f in AutoscalerOptions.model_fields.items()}
_LISTS = {name for name, f in _FIELDS.items() if f.annotation is not None and "list" in str(f.annotation)}
_BOOLS = {name for name, f in _FIELDS.items() if f.annotation is bool}


def read_flag_text(value: str) -> list[str]:
    """Tokens from `--autoscaler-flags`: a file holding the flags, or the flags themselves."""
    p = Path(value)
    text = p.read_text(encoding="utf-8") if not value.lstrip().startswith("-") and p.is_file() else value
    tokens: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("- "):  # a YAML list item from a Deployment's args
            line = line[2:].strip()
        if not line or line.startswith("#"):
            continue
        tokens.extend(shlex.split(line))
    return tokens


def parse_flags(tokens: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Scenario `autoscaler:` options (by CA's flag names) and notes about what was ignored.

    A later flag wins over an earlier one (list flags accumulate), as on CA's command line; the
    program name or a `./cluster-autoscaler` command word is skipped."""
    out: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-"):
            continue  # the command itself (./cluster-autoscaler) or a stray word
        name, eq, value = tok.lstrip("-").partition("=")
        if name not in _FIELDS:
            if not eq and i < len(tokens) and not tokens[i].startswith("-"):
                i += 1  # --flag value form of a flag we do not know
            ignored.append(f"--{name}")
            continue
        if not eq:
            if name in _BOOLS and (i >= len(tokens) or tokens[i] not in ("true", "false")):
                value = "true"
            elif i < len(tokens):
                value = tokens[i]
                i += 1
        if name in _LISTS:
            out.setdefault(name, []).append(value)
        elif name in _BOOLS:
            out[name] = value.lower() in ("true", "1", "yes")
        else:
            out[name] = value
    notes = []
    if ignored:
        notes.append(
            "CA flags with no effect on the simulated decisions, ignored: " + ", ".join(sorted(set(ignored)))
        )
    return out, notes
