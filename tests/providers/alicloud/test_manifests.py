"""The AliCloud overlays read the in-tree Secret unchanged, and the server accepts what they give it.

(tests/deploy/ runs the generic checks — schema, pinned images, locked-down pods, check-config —
on the AccessKey overlay; the RRSA overlay's projected token is checked here.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy_support.pods import load_documents
from tests.deploy_support.tools import kustomize_build as render

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
OVERLAYS = ROOT / "manifests" / "providers" / "alicloud"


def ours(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deploy = next(
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "cluster-autoscaler"
    )
    spec = deploy["spec"]["template"]["spec"]
    container = next(c for c in spec["initContainers"] if c["name"] == "cloudprovider-grpc")
    return {"container": container, "spec": spec}


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container["env"]
    }


def check_config(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc.cli", "check-config", "--offline", *args[1:]],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_access_key_overlay_reads_the_in_tree_secret() -> None:
    got = ours(render(OVERLAYS))
    assert secret_refs(got["container"]) == {
        "ACCESS_KEY_ID": ("cloud-config", "access-key-id"),
        "ACCESS_KEY_SECRET": ("cloud-config", "access-key-secret"),
        "REGION_ID": ("cloud-config", "region-id"),
    }
    args = got["container"]["args"]
    assert args[:3] == ["serve", "--provider", "alicloud"] and args.count("--nodes") == 2
    example = load_documents(OVERLAYS / "secrets.example.yaml")
    assert [(s["metadata"]["name"], sorted(s["stringData"])) for s in example] == [
        ("cloud-config", ["access-key-id", "access-key-secret", "region-id"])
    ]


def test_rrsa_overlay_mounts_the_projected_token_and_check_config_accepts_it(tmp_path: Path) -> None:
    got = ours(render(OVERLAYS / "rrsa"))
    refs = secret_refs(got["container"])
    assert refs == {
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": ("cloud-config", "oidc-provider-arn"),
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE": ("cloud-config", "oidc-token-file-path"),
        "ALIBABA_CLOUD_ROLE_ARN": ("cloud-config", "role-arn"),
        "ALIBABA_CLOUD_SESSION_NAME": ("cloud-config", "session-name"),
        "REGION_ID": ("cloud-config", "region-id"),
    }
    mount = next(m for m in got["container"]["volumeMounts"] if m["name"] == "oidc-token")
    volume = next(v for v in got["spec"]["volumes"] if v["name"] == "oidc-token")
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert (token["audience"], token["expirationSeconds"]) == ("sts.aliyuncs.com", 7200)
    (secret,) = load_documents(OVERLAYS / "rrsa" / "secrets.example.yaml")
    data = secret["stringData"]
    assert data["oidc-token-file-path"] == f"{mount['mountPath']}/{token['path']}"
    # the pod as the kubelet would start it: the token file in place, the Secret's keys as env
    token_file = tmp_path / "oidc-token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.e30.c2ln\n")
    env = {name: data[key] for name, (_, key) in refs.items()}
    env["ALIBABA_CLOUD_OIDC_TOKEN_FILE"] = str(token_file)
    env = {
        k: v.replace("REPLACE-WITH-ACCOUNT-ID", "1234567890").replace("REPLACE-WITH-", "x")
        for k, v in env.items()
    }
    result = check_config(got["container"]["args"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "provider alicloud, 2 node group(s)" in result.stdout
    env["ALIBABA_CLOUD_OIDC_TOKEN_FILE"] = str(tmp_path / "missing")
    failed = check_config(got["container"]["args"], env, tmp_path)
    assert failed.returncode == 2 and "ALIBABA_CLOUD_OIDC_TOKEN_FILE" in failed.stderr


@pytest.mark.parametrize("path", ["alicloud.yaml"])
def test_example_configuration_is_valid(path: str, tmp_path: Path) -> None:
    env = {
        "ACCESS_KEY_ID": "LTAI5tExample",
        "ACCESS_KEY_SECRET": "example-secret",
        "REGION_ID": "cn-hangzhou",
    }
    result = check_config(["serve", "--config", str(ROOT / "examples" / path)], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "provider alicloud" in result.stdout
