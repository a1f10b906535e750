"""The OpenAPI document python-exoscale ships, as a validator of our emulator's answers and of the
requests our client sends: the emulator cannot drift from the real API without a test failing.

python-exoscale (the official SDK, a test dependency only) regenerates `exoscale/openapi.json` from
Exoscale's live API description; its schemas are OpenAPI 3.0, i.e. JSON Schema draft 4 plus a few
keywords (`nullable`, `readOnly`) a draft-4 validator ignores.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import exoscale
import jsonschema

from cloudprovider_grpc.emulators import Request, Response

SPEC: dict[str, Any] = json.loads((Path(exoscale.__file__).parent / "openapi.json").read_text())
_FORMATS = jsonschema.FormatChecker()


def _route(path: str) -> re.Pattern[str]:
    regex = re.sub(r"\\\{[^}]+\\\}", "[^/:]+", re.escape(path))
    return re.compile(f"^/v2{regex}$")


#: (method, compiled path, operation) for every operation of the document
OPERATIONS: list[tuple[str, re.Pattern[str], dict[str, Any]]] = [
    (verb.upper(), _route(path), op) for path, item in SPEC["paths"].items() for verb, op in item.items()
]


def operation(method: str, path: str) -> dict[str, Any]:
    for m, regex, op in OPERATIONS:
        if m == method and regex.match(path):
            return op
    raise AssertionError(f"{method} {path} is not an operation of the Exoscale OpenAPI document")


_VALIDATORS: dict[str, jsonschema.Draft4Validator] = {}


def errors(schema: dict[str, Any], value: Any) -> list[str]:
    key = json.dumps(schema, sort_keys=True)
    validator = _VALIDATORS.get(key)
    if validator is None:
        validator = _VALIDATORS[key] = jsonschema.Draft4Validator(
            {**schema, "components": SPEC["components"]}, format_checker=_FORMATS
        )
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(value)
    ]


def _tolerated(op_id: str, body: Any) -> Any:
    """The one place the document contradicts itself: an SKS nodepool's `size` may be 0 (scale to
    zero, `sks-nodepool.size` minimum 0) but the Instance Pool behind it has `size` > 0
    (`instance-pool.size` exclusiveMinimum). A nodepool-managed pool of size 0 is checked without
    its size; a standalone pool of size 0 still fails."""

    def fix(pool: Any) -> Any:
        managed = isinstance(pool, dict) and (pool.get("manager") or {}).get("type") == "sks-nodepool"
        if managed and pool.get("size") == 0:
            return {k: v for k, v in pool.items() if k != "size"}
        return pool

    if op_id == "get-instance-pool":
        return fix(body)
    if op_id == "list-instance-pools" and isinstance(body, dict):
        return {**body, "instance-pools": [fix(p) for p in body.get("instance-pools") or []]}
    return body


def response_errors(method: str, path: str, status: int, body: Any) -> list[str]:
    op = operation(method, path)
    if status != 200:
        return (
            []
            if isinstance(body, dict) and isinstance(body.get("message"), str)
            else [f"error body {body!r}"]
        )
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    return errors(schema, _tolerated(op["operationId"], body))


def query_errors(method: str, path: str, query: dict[str, list[str]]) -> list[str]:
    """Every query parameter must be one the operation declares, with a value its schema allows."""
    op = operation(method, path)
    declared = {p["name"]: p["schema"] for p in op.get("parameters", []) if p["in"] == "query"}
    out: list[str] = []
    for name, values in query.items():
        if name not in declared:
            out.append(f"{op['operationId']} has no query parameter {name!r}")
            continue
        for value in values:
            out += [f"query {name}: {e}" for e in errors(declared[name], value)]
    return out


def request_errors(method: str, path: str, body: bytes) -> list[str]:
    op = operation(method, path)
    if "requestBody" not in op:
        return [] if not body else [f"{op['operationId']} takes no body"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    return errors(schema, json.loads(body))


@dataclass
class Recorder:
    """An emulator observer: validates every request and answer and keeps what it found."""

    problems: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def __call__(self, req: Request, resp: Response) -> None:
        where = f"{req.method} {req.path}"
        try:
            op = operation(req.method, req.path)["operationId"]
        except AssertionError as exc:
            if resp.status < 400:  # an unknown path may only be refused
                self.problems.append(f"{where} answered {resp.status}: {exc}")
            return
        self.seen.append(op)
        if 200 <= resp.status < 300:
            self.problems += [f"{where} request {p}" for p in request_errors(req.method, req.path, req.body)]
            self.problems += [f"{where} {p}" for p in query_errors(req.method, req.path, req.query)]
        self.problems += [
            f"{where} -> {resp.status} {p}"
            for p in response_errors(req.method, req.path, resp.status, resp.body)
        ]
