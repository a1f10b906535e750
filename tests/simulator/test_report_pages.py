"""report.html and compare.html of the documented examples in headless Chromium: no console error,
the decision table lists every decision of report.json, the filter works in the page, compare.html
has every variant with the baseline first; and the documentation's screenshots of both pages
(docs/images) show the current pages, each a PNG that names the page and the command it shows.
A stale screenshot fails; `REGENERATE_DOCS_IMAGES=1` rewrites it (the suite itself never writes
into the clone)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from cloudprovider_grpc.cli import main
from tests.support.chromium import chromium

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
REPORT_ARGS = [
    "--from-dump", "examples/snapshot/cluster.json", "--provider", "vultr", "--emulate", "--duration", "1h",
    "--scale", "deployment/web=2x", "--add-workload", "examples/snapshot/night-batch.yaml",
]  # fmt: skip
COMPARE_ARGS = [
    "examples/scenarios/burst.yaml",
    "--variant", "quick:autoscaler.scale-down-unneeded-time=2m",
    "--variant", "default:autoscaler.scale-down-unneeded-time=10m",
    "--variant", "patient:autoscaler.scale-down-unneeded-time=20m",
]  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser() -> tuple[list[str], dict[str, str]]:
    found = chromium()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("headless Chromium is not available (Debian's chromium package)")
        pytest.skip("headless Chromium is not available (Debian's chromium package)")
    return found


class _Pages:
    """The two documented runs, each simulated the first time a test asks for its page: the
    module's tests are spread over several workers, and most of them need one page of the two."""

    RUNS = {
        "report": (REPORT_ARGS, "cluster", "report.html"),
        "compare": (COMPARE_ARGS, "compare", "compare.html"),
    }

    def __init__(self, out: Path) -> None:
        self.out = out
        self._made: dict[str, Path] = {}

    def __getitem__(self, which: str) -> Path:
        if which not in self._made:
            args, folder, page = self.RUNS[which]
            cwd = os.getcwd()
            os.chdir(ROOT)  # from the repository root, as the docs run them
            try:
                assert main(["simulate", *args, "--out", str(self.out / folder), "--quiet"]) == 0
            finally:
                os.chdir(cwd)
            self._made[which] = self.out / folder / page
        return self._made[which]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> _Pages:
    return _Pages(tmp_path_factory.mktemp("pages"))


def _open(browser, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd, env = browser
    return subprocess.run(
        [*cmd, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )


def _console(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if "CONSOLE" in line]


def test_the_decision_table_lists_every_decision(browser, pages) -> None:
    report = json.loads((pages["report"].parent / "report.json").read_text())
    dom = _open(browser, pages["report"], "--dump-dom")
    assert _console(dom) == []
    table = dom.stdout.split('id="decisions"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr data-kind="([^"]+)"', table)
    assert rows == [d["kind"] for d in report["decisions"]] and len(rows) > 0
    assert f"{len(rows)} of {len(rows)}" in dom.stdout
    # groups by name, never by id: the pool's UUID appears only in the cell's title
    names = {gid: g.get("name", gid) for gid, g in report["timeline"]["groups"].items()}
    for gid, name in names.items():
        if name != gid:
            assert f">{gid}<" not in table and f">{name}<" in table
    up = next(d for d in report["decisions"] if d["kind"] == "scale-up")
    assert up["inputs"]["considered"], "a scale-up records the groups it considered"
    assert 'class="considered"' in table
    # the Job's end is drawn (its last pod completed), not only its start
    assert "batch ends" in dom.stdout and "batch starts" in dom.stdout
    # series.csv: one row per loop, the last cost figure is the report's total
    with (pages["report"].parent / "series.csv").open() as f:
        series = list(csv.reader(f))
    assert len(series) == 1 + report["summary"]["loops"]
    assert abs(float(series[-1][-1]) - report["cost"]["total"]) < 0.01


def test_the_decision_filter_runs_in_the_page(browser, pages, tmp_path) -> None:
    """The filter script, driven from a copy of the page that sets the action list on load."""
    text = pages["report"].read_text()
    driver = (
        '<script>document.getElementById("decision-kind").value="scale-down";'
        'document.getElementById("decision-kind").dispatchEvent(new Event("change"));</script></body>'
    )
    page = tmp_path / "filtered.html"
    page.write_text(text.replace("</body>", driver))
    dom = _open(browser, page, "--dump-dom")
    assert _console(dom) == []
    report = json.loads((pages["report"].parent / "report.json").read_text())
    downs = sum(1 for d in report["decisions"] if d["kind"] == "scale-down")
    assert f'id="decision-count">{downs} of {len(report["decisions"])}<' in dom.stdout
    table = dom.stdout.split('id="decisions"', 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r"<tr [^>]*hidden", table)) == len(report["decisions"]) - downs


def test_the_compare_page_shows_every_variant_beside_the_baseline(browser, pages) -> None:
    dom = _open(browser, pages["compare"], "--dump-dom")
    assert _console(dom) == []
    table = dom.stdout.split('id="variants"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr[^>]*><td>(\w+)</td>", table) == ["baseline", "quick", "default", "patient"]
    assert dom.stdout.count('class="variant-line"') == 4
    assert "decisions that differ from the baseline" in dom.stdout
    with (pages["compare"].parent / "compare.csv").open() as f:
        assert [r[0] for r in csv.reader(f)] == ["variant", "baseline", "quick", "default", "patient"]


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == PNG, "not a PNG"
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        assert struct.unpack(">I", data[i + 8 + n : i + 12 + n])[0] == zlib.crc32(kind + body), "bad CRC"
        out.append((kind, body))
        i += 12 + n
    assert out[0][0] == b"IHDR" and out[-1][0] == b"IEND"
    return out


def _described(png: bytes, text: str) -> bytes:
    """`png` with a tEXt Description chunk after its header."""
    body = b"Description\x00" + text.encode("latin-1")
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    ihdr_end = 8 + 12 + 13
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def _description(png: bytes) -> str:
    for kind, body in _chunks(png):
        if kind == b"tEXt" and body.startswith(b"Description\x00"):
            return body.split(b"\x00", 1)[1].decode("latin-1")
    return ""


@pytest.mark.parametrize(
    ("which", "image", "args", "size"),
    [
        ("report", "simulate-your-cluster.png", REPORT_ARGS, (1200, 1500)),
        ("compare", "simulate-compare.png", COMPARE_ARGS, (1100, 1000)),
    ],
)
def test_the_docs_screenshots_show_the_current_pages(
    browser, pages, tmp_path, which, image, args, size
) -> None:
    """Each says which page of which command it is and the page's digest, so a stale or wrong
    picture cannot pass for the current one. A fresh screenshot is always taken into tmp (so the
    page renders at the stated size); it replaces the committed one only on request."""
    page = pages[which]
    digest = hashlib.sha256(page.read_bytes()).hexdigest()[:16]
    want = f"{page.name} of `cloudprovider-grpc simulate {' '.join(args)}`, page sha256 {digest}"
    shot = tmp_path / image
    _open(browser, page, f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}")
    data = _described(shot.read_bytes(), want)
    width, height = struct.unpack(">II", _chunks(data)[0][1][:8])
    assert (width, height) == size and len(data) > 20_000
    target = IMAGES / image
    if os.environ.get("REGENERATE_DOCS_IMAGES") == "1":
        target.write_bytes(data)
    committed = _description(target.read_bytes()) if target.is_file() else "(missing)"
    assert committed == want, (
        f"docs/images/{image} shows another page ({committed}); "
        "rerun with REGENERATE_DOCS_IMAGES=1 and commit the new picture"
    )


def test_cas_own_decisions_are_drawn_beside_the_simulations(browser, tmp_path) -> None:
    """A replay with cluster-autoscaler's account: CA's decisions as hollow markers and its target
    size as a line on the group's panel, and the agreement table, in the rendered page."""
    import yaml

    from tests.simulator.recordings import CA_CLOUD, with_ca_account

    rec = with_ca_account(tmp_path / "rec")
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text(yaml.safe_dump(CA_CLOUD))
    args = ["simulate", "--replay", str(rec), "--provider", "sim", "--cloud", str(cloud), "--duration", "40m"]
    assert main([*args, "--quiet", "--out", str(tmp_path / "out")]) == 0
    dom = _open(browser, tmp_path / "out" / "report.html", "--dump-dom")
    assert _console(dom) == []
    panel = dom.stdout.split('data-group="general"', 1)[1].split("</svg>", 1)[0]
    assert panel.count('class="ca-decision"') == 3
    assert panel.count('class="ca-target"') == 1
    table = dom.stdout.split('id="agreement"', 1)[1].split("</table>", 1)[0]
    assert table.count('data-outcome="matched"') == 3
