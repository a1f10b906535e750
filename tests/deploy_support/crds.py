"""Validate custom resources against the CRDs their projects publish, as strictly as the API server.

kubernetes-validate knows only built-in kinds. The kinds our deployments use from elsewhere are
checked against the real CustomResourceDefinitions, taken from the projects' Go modules (a test
dependency, downloaded through the module proxy into the shared cache):

- cert-manager `Certificate` and `Issuer`: `deploy/crds/` of github.com/cert-manager/cert-manager;
- prometheus-operator `ServiceMonitor`: `example/prometheus-operator-crd/` of
  github.com/prometheus-operator/prometheus-operator.

A CRD's `openAPIV3Schema` is turned into a JSON Schema the way `kubectl apply --validate=strict`
treats it: an object with declared `properties` and no `additionalProperties` or
`x-kubernetes-preserve-unknown-fields` refuses unknown fields (the API server would prune them
silently, so a typo such as `dnsName` would vanish instead of failing), `nullable` admits null, and
`metadata` gets ObjectMeta's rules for what we write (name, namespace, labels, annotations). Not
evaluated: the CEL rules (`x-kubernetes-validations`); every structural rule is.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

import jsonschema
import yaml

from tests.deploy_support.tools import module_dir


@dataclass(frozen=True)
class CrdSource:
    module: str
    version: str
    directory: str


#: Pinned like the other tools; bump deliberately.
CERT_MANAGER = CrdSource("github.com/cert-manager/cert-manager", "v1.21.2", "deploy/crds")
PROMETHEUS_OPERATOR = CrdSource(
    "github.com/prometheus-operator/prometheus-operator", "v0.85.0", "example/prometheus-operator-crd"
)
#: API group -> where its CRDs come from
SOURCES = {"cert-manager.io": CERT_MANAGER, "monitoring.coreos.com": PROMETHEUS_OPERATOR}

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


# libyaml when PyYAML has it: prometheus-operator's CRDs run to megabytes.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):
    """PyYAML's safe loader, reading a plain `=` (YAML 1.1's "value" tag; prometheus-operator's CRDs
    have it as an enum member) as the string it is in YAML 1.2, as Go's YAML libraries read it."""


_Loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)


def group_of(obj: dict[str, Any]) -> str:
    return str(obj.get("apiVersion", "")).rpartition("/")[0]


def is_custom(obj: dict[str, Any]) -> bool:
    """Whether obj is of a kind these CRDs define (rather than a built-in kind)."""
    return group_of(obj) in SOURCES


def strict(schema: Any) -> Any:
    """A copy of an OpenAPI v3 structural schema as a strict JSON Schema (see the module doc)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    closed = (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    )
    if closed:
        out["additionalProperties"] = False
    return out


@functools.cache
def _schemas(group: str, kind: str) -> dict[str, dict[str, Any]]:
    """apiVersion -> strict JSON Schema, for every served version of one kind's published CRD."""
    source = SOURCES[group]
    root = module_dir(source.module, source.version) / source.directory
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("*.yaml")):
        text = path.read_text()
        if f"kind: {kind}\n" not in text:  # parse only the file that can define it
            continue
        for doc in yaml.load_all(text, Loader=_Loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            if doc["spec"]["group"] != group or doc["spec"]["names"]["kind"] != kind:
                continue
            for version in doc["spec"]["versions"]:
                if not version.get("served"):
                    continue
                schema = strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                schema["properties"]["metadata"] = _METADATA
                schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
                found[f"{group}/{version['name']}"] = schema
    return found


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless obj is valid against its kind's published CRD."""
    api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
    schemas = _schemas(group_of(obj), kind)
    if api_version not in schemas:
        raise jsonschema.ValidationError(f"{api_version} {kind}: no such kind/version in the published CRDs")
    _validator(api_version, kind).validate(obj)


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_schemas(api_version.rpartition("/")[0], kind)[api_version])
