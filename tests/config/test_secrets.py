"""Secrets are stripped, checked at configuration time and masked everywhere.

The cross-backend marker scan over real server processes is in tests/probes/test_secret_scan.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.core.secrets import read_secret, redact
from cloudprovider_grpc.observability import logs

pytestmark = pytest.mark.integration


def test_surrounding_whitespace_is_stripped_and_the_value_masked() -> None:
    value = read_secret({"X_TOKEN": "  tok-strip-123\n"}, "X_TOKEN")
    assert value == "tok-strip-123"
    assert redact("Authorization: Bearer tok-strip-123\n") == "Authorization: Bearer ***\n"


@pytest.mark.parametrize("bad", ["tok\nmore-123", "tok\x00nul-456", "tök-umlaut-789", "tok\rcr-000"])
def test_a_value_that_cannot_be_a_header_is_a_configuration_error_without_the_value(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_secret({"Y_TOKEN": bad}, "Y_TOKEN")
    assert info.value.key == "Y_TOKEN"
    assert "cannot be sent in an HTTP header" in str(info.value)
    assert bad not in str(info.value) and bad.strip() not in str(info.value)


def test_required_and_blank() -> None:
    with pytest.raises(ConfigError, match="Z_TOKEN: is required and missing"):
        read_secret({}, "Z_TOKEN", required=True)
    with pytest.raises(ConfigError, match="Z_TOKEN: is empty"):
        read_secret({"Z_TOKEN": " \n"}, "Z_TOKEN", required=True)
    assert read_secret({}, "Z_TOKEN", default="d") == "d"


def test_log_lines_and_exception_text_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    read_secret({"W_TOKEN": "w-secret-value-42"}, "W_TOKEN")
    logs.setup("info", "json")
    try:
        try:
            raise ValueError("Invalid header value b'Bearer w-secret-value-42\\n'")
        except ValueError:
            logging.getLogger("test").exception("request failed with w-secret-value-42")
    finally:
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    doc = json.loads(err.strip().splitlines()[-1])
    assert "w-secret-value-42" not in err
    assert doc["msg"] == "request failed with ***"
    assert "Bearer ***" in doc["exc"]


def test_an_uncaught_crash_at_startup_prints_no_secret() -> None:
    """A crash before logging is set up: the exception hook prints one redacted line."""
    code = (
        "import os\n"
        "from cloudprovider_grpc.observability import logs\n"
        "from cloudprovider_grpc.core.secrets import register_environment\n"
        "register_environment(os.environ)\n"
        "logs.install_hooks()\n"
        "raise RuntimeError('header Authorization: Bearer ' + os.environ['CHERRY_AUTH_TOKEN'])\n"
    )
    env = dict(os.environ, CHERRY_AUTH_TOKEN="crash-marker-token-77\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1
    assert "crash-marker-token-77" not in out.stderr + out.stdout
    assert out.stderr.strip() == (
        "cloudprovider-grpc: unexpected error in the main thread: RuntimeError: "
        "header Authorization: Bearer ***"
    )
