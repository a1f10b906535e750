"""How an SPC node's instance id (the providerID its Kubernetes Node carries) is derived.

StackPointCloud had no providerID scheme of its own: its nodes ran on AWS, GCE, DigitalOcean,
Azure and others, and each node's kubelet set the providerID of the underlying cloud. The fork
(gen 2) read the Kubernetes Nodes to learn them; we have no cluster access, so we derive the id from
the SPC API's node fields, the way each cloud's kubelet/cloud-controller-manager writes it
(our own reconstruction: SPC had no provider-ID scheme of its own):

- AWS (in-tree/legacy AWS cloud provider, also CA's `aws` provider): `aws:///<zone>/<instance id>`,
  with the instance id from `provider_node_id` (`i-...`) and the availability zone from `zone`, or
  the part of `location` after ":" (`us-west-2:us-west-2a`);
- DigitalOcean (digitalocean-cloud-controller-manager): `digitalocean://<droplet id>`;
- any cloud whose id needs facts the SPC API does not carry (GCE's project, Azure's subscription
  and resource group): an operator-given `provider-id-template`, e.g.
  `gce://my-project/{{.Zone}}/{{.Name}}`; without one such nodes are matched by name.

The cloud is recognised from the node's instance `size` through the SDK's machine table. A node
whose id cannot be derived (yet: a `draft` node has no `provider_node_id`) gets its name as id,
which is what the fork reported for Nodes without a providerID and what NodeGroupDeleteNodes
matches nodes without a providerID by.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError
from cloudprovider_grpc.formats.spc_machine_specs import AWS, DIGITALOCEAN, spec_of

#: fields a provider-id-template may use, and the node JSON they come from
TEMPLATE_FIELDS = ("ProviderNodeID", "Zone", "Region", "Location", "InstanceID", "Name", "PK", "Cluster")

_AWS_INSTANCE_RE = re.compile(r"^i-[0-9a-f]{8,17}$")
_DIGITS_RE = re.compile(r"^[0-9]+$")


def parse_template(source: str) -> GoTemplate:
    """Parse a provider-id-template; raises TemplateError naming the problem."""
    tpl = GoTemplate.parse(source, TEMPLATE_FIELDS)
    if not tpl.fields:
        raise TemplateError("uses no field, so every node would get the same id")
    return tpl


def zone_of(node: Mapping[str, Any]) -> str:
    """The node's zone: `zone`, else the part of `location` after ':' (AWS `region:zone`)."""
    zone = str(node.get("zone") or "").strip()
    if zone:
        return zone
    location = str(node.get("location") or "")
    return location.partition(":")[2].strip()


def region_of(node: Mapping[str, Any]) -> str:
    """`location` before ':' when it has one, else the zone without its last letter (AWS) or
    suffix after the last '-' (GCE), else `location` itself (DigitalOcean's `nyc1`)."""
    location = str(node.get("location") or "").strip()
    if ":" in location:
        return location.partition(":")[0]
    zone = zone_of(node)
    if re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d[a-z]", zone):
        return zone[:-1]
    if re.fullmatch(r"[a-z]+-[a-z]+\d-[a-z]", zone):
        return zone.rsplit("-", 1)[0]
    return location


def fields_of(node: Mapping[str, Any]) -> dict[str, str]:
    return {
        "ProviderNodeID": str(node.get("provider_node_id") or "").strip(),
        "Zone": zone_of(node),
        "Region": region_of(node),
        "Location": str(node.get("location") or "").strip(),
        "InstanceID": str(node.get("instance_id") or "").strip(),
        "Name": node_name(node),
        "PK": str(node.get("pk") or ""),
        "Cluster": str(node.get("cluster") or ""),
    }


def node_name(node: Mapping[str, Any]) -> str:
    """The node's name: SPC's `name` when set, else its `instance_id` (`<cluster>-worker-<n>`)."""
    return str(node.get("name") or "").strip() or str(node.get("instance_id") or "").strip()


def derive_provider_id(node: Mapping[str, Any], template: GoTemplate | None = None) -> str | None:
    """The providerID the node's kubelet sets, or None when it cannot be derived (yet)."""
    fields = fields_of(node)
    if template is not None:
        if any(not fields[f] for f in template.fields):
            return None
        return template.render(fields)
    spec = spec_of(str(node.get("size") or ""))
    cloud = spec.cloud if spec else None
    pid = fields["ProviderNodeID"]
    if not pid:
        return None
    if cloud == AWS or (cloud is None and _AWS_INSTANCE_RE.match(pid)):
        zone = fields["Zone"]
        return f"aws:///{zone}/{pid}" if zone else None
    if cloud == DIGITALOCEAN and _DIGITS_RE.match(pid):
        return f"digitalocean://{pid}"
    return None


def instance_id(node: Mapping[str, Any], template: GoTemplate | None = None) -> str:
    """The id CA sees for the node: the derived providerID, else the node's name."""
    return derive_provider_id(node, template) or node_name(node)
