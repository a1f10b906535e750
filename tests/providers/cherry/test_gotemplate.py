"""The strict Go text/template subset used for cloudinit and hostname-pattern."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError

pytestmark = pytest.mark.unit

FIELDS = ("ClusterName", "NodeGroup", "RandString8")
DATA = {"ClusterName": "c1", "NodeGroup": "pool1", "RandString8": "acdefghi"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("k8s-{{.ClusterName}}-{{.NodeGroup}}-{{.RandString8}}", "k8s-c1-pool1-acdefghi"),
        ("{{ .NodeGroup }}/{{\t.ClusterName\t}}", "pool1/c1"),
        ("a  {{- .NodeGroup -}}  b", "apool1b"),
        ("x {{/* a comment */}}y", "x y"),
        ("a {{- /* trimmed comment */ -}} b", "ab"),
        ("no actions at all", "no actions at all"),
        ("", ""),
        ("{{.NodeGroup}}{{.NodeGroup}}", "pool1pool1"),
    ],
)
def test_renders_the_forms_go_accepts(source: str, expected: str) -> None:
    assert GoTemplate.parse(source, FIELDS).render(DATA) == expected


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{.Bogus}}", "unknown field .Bogus"),
        ("{{.clustername}}", "unknown field .clustername"),
        ("{{if .NodeGroup}}x{{end}}", "unsupported action"),
        ('{{.NodeGroup | printf "%s"}}', "unsupported action"),
        ('{{printf "x"}}', "unsupported action"),
        ("{{.}}", "unsupported action"),
        ("{{-.NodeGroup}}", "unsupported action"),  # Go needs a space after the trim marker
        ("{{.NodeGroup", "unclosed action"),
    ],
)
def test_rejects_what_we_do_not_support(source: str, fragment: str) -> None:
    with pytest.raises(TemplateError) as err:
        GoTemplate.parse(source, FIELDS)
    assert fragment in str(err.value)


def test_fields_lists_the_referenced_fields() -> None:
    assert GoTemplate.parse("{{.NodeGroup}}-{{ .RandString8 }}", FIELDS).fields == {
        "NodeGroup",
        "RandString8",
    }
