"""report.html in a real browser: headless Chromium draws it with no console error, with a
marker per decision, the back-off and the workloads' start and end, and takes a screenshot."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from cloudprovider_grpc.simulator import load_scenario, run
from cloudprovider_grpc.simulator.html import MARKS
from tests.support.chromium import chromium

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


@pytest.fixture(scope="module")
def browser() -> tuple[list[str], dict[str, str]]:
    found = chromium()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("headless Chromium is not available (Debian's chromium package)")
        pytest.skip("headless Chromium is not available (Debian's chromium package)")
    return found


def _open(
    browser: tuple[list[str], dict[str, str]], page: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd, env = browser
    return subprocess.run(
        [*cmd, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )


def test_the_report_renders_without_console_errors(browser, tmp_path) -> None:
    report = run(load_scenario(SCENARIOS / "priority.yaml"), seed=0)
    report.write(tmp_path, plot=False)
    page = tmp_path / "report.html"
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?https?:""", text), "the page must not load anything"
    dom = _open(browser, page, "--dump-dom")
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    markers = [d for d in report.decisions if d.kind in MARKS and d.group]
    assert dom.stdout.count('class="decision"') == len(markers) > 0
    backoffs = [d for d in report.decisions if "backoff_until" in d.inputs and d.kind.startswith("scale-up-")]
    assert dom.stdout.count('class="backoff"') == len(backoffs) == 1
    assert dom.stdout.count('class="workload"') >= 1
    assert dom.stdout.count("<svg") == len(report.timeline["nodes"]) + 1
    shot = tmp_path / "report.png"
    _open(browser, page, f"--screenshot={shot}", "--window-size=1200,1100")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_a_script_error_would_show_on_the_console(browser, tmp_path) -> None:
    """The console check above can fail: a page that throws is caught by the same reading."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><script>null.x = 1;</script></body></html>")
    dom = _open(browser, page, "--dump-dom")
    assert any("CONSOLE" in line and "Uncaught" in line for line in dom.stderr.splitlines())
