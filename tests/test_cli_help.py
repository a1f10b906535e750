"""What `--help` and a mistyped flag tell a new user, read in-process from the real parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloudprovider_grpc import cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_an_unknown_flag_is_the_first_line_and_help_a_pointer(capsys: pytest.CaptureFixture[str]) -> None:
    """The useful line first, then where the flags are listed: not the thirty-flag usage before it."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--port", "21086"])
    assert exit_.value.code == 2
    first, *rest = capsys.readouterr().err.splitlines()
    assert first == "cloudprovider-grpc serve: error: unrecognized arguments: --port 21086", first
    assert rest == ["(`cloudprovider-grpc serve --help` lists every flag)"], rest


def test_top_level_help_names_every_command_and_the_python_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = " ".join(help_of(capsys).split())
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert commands
    description = parser.description or ""
    for name in commands:
        assert name in description, name
        assert name in text
    assert "Python 3.11" in text


def test_serve_help_names_the_environment_scheme_and_every_clouds_credentials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = " ".join(help_of(capsys, "serve").split())
    assert "CLOUDPROVIDER_GRPC_<KEY>" in text and "CLOUDPROVIDER_GRPC_SECRETS_DIR" in text
    from cloudprovider_grpc.providers.registry import BACKENDS

    for backend, variables in cli.CREDENTIAL_VARIABLES.items():
        assert backend in BACKENDS, backend
        source = "".join(
            p.read_text() for p in (ROOT / "cloudprovider_grpc/providers" / backend).glob("*.py")
        )
        for var in variables:
            assert var in text, var
            assert f'"{var}"' in source, f"{backend} does not read {var}"
    assert set(cli.CREDENTIAL_VARIABLES) == set(BACKENDS) - {"sim"}


def test_every_server_flag_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "serve")
    for flag in ("--log-level", "--log-format"):
        m = re.search(rf"^\s+{flag} \{{[^}}]+\}}\s*\n?\s+(\S.*)$", text, re.M)
        assert m, (flag, text)


def test_every_variable_a_cloud_reads_is_in_serve_help_and_its_page(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The other direction: each quoted variable name a backend's configuration code reads (config.py,
    credentials.py), and the endpoint overrides it builds by name, is listed for that cloud."""
    text = " ".join(help_of(capsys, "serve").split())
    for backend in cli.CREDENTIAL_VARIABLES:
        folder = ROOT / "cloudprovider_grpc/providers" / backend
        source = "".join(p.read_text() for p in folder.glob("*.py") if p.stem in ("config", "credentials"))
        read = set(re.findall(r'"([A-Z][A-Z0-9]+_[A-Z0-9_]+)"', source))
        read |= (
            {f"ALICLOUD_{api}_ENDPOINT" for api in ("ESS", "ECS", "VPC", "STS")}
            if backend == "alicloud"
            else set()
        )
        listed = {*cli.CREDENTIAL_VARIABLES[backend], *cli.SETTING_VARIABLES[backend]}
        assert read <= listed, (backend, sorted(read - listed))
        assert listed <= read, (backend, sorted(listed - read))
        page = (ROOT / "docs" / "clouds" / f"{backend}.md").read_text()
        for var in sorted(listed):
            assert var in text, var
            assert var in page, (backend, var)
