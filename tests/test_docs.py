"""The documentation: the site builds with `mkdocs build --strict`, every shell block either runs
here or says why it cannot, the blocks marked to run do, and the pages speak of the product only.

Convention: the line before a shell block (```sh, ```bash, ```shell, ```console) is an HTML comment,
either `<!-- runs: tests/<module>.py -->` (that module runs it; for this module, the blocks are run
below) or `<!-- not-run: <why> -->` (needs a cluster, Docker, a cloud account...). The README's two
markers (`test-command`, `grpcurl-examples`) count as `runs`: tests/test_readme.py runs them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELLS = {"sh", "bash", "shell", "console"}
README_MARKERS = {
    "<!-- test-command -->": "tests/test_readme.py",
    "<!-- grpcurl-examples -->": "tests/test_readme.py",
}
MARK = re.compile(r"^<!-- (runs|not-run): (.+?) -->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    marker: str  # the comment line before the block, or ""
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        found.append(Block(page, i + 1, m.group(1), before.strip(), "\n".join(lines[i + 1 : end])))
        i = end + 1
    return found


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]
RUN_HERE = [b for b in ALL_BLOCKS if b.marker == "<!-- runs: tests/test_docs.py -->"]


def test_every_block_names_its_language() -> None:
    bare = [b.where for b in ALL_BLOCKS if not b.lang]
    assert not bare, f"fenced blocks without a language: {bare}"


def test_every_shell_block_is_run_by_a_test_or_says_why_not() -> None:
    problems = []
    for b in ALL_BLOCKS:
        if b.lang not in SHELLS:
            continue
        if b.marker in README_MARKERS and b.page.name == "README.md":
            continue
        m = MARK.match(b.marker)
        if not m:
            if b.page.name == "README.md" and "pip install . && .venv/bin/cloudprovider-grpc serve" in b.body:
                continue  # the README's setup command 1: tests/test_readme.py and the release test
            problems.append(f"{b.where}: no <!-- runs: ... --> or <!-- not-run: ... --> before it")
            continue
        if m.group(1) == "runs":
            module = ROOT / m.group(2)
            if not module.is_file():
                problems.append(f"{b.where}: {m.group(2)} does not exist")
    assert not problems, "\n".join(problems)


def test_a_block_runs_here_only_when_this_module_can_run_it() -> None:
    assert RUN_HERE, "no block is marked to run here"
    for b in RUN_HERE:
        for line in b.body.splitlines():
            assert line.startswith("cloudprovider-grpc "), f"{b.where}: {line}"


@pytest.mark.parametrize(
    "line",
    [
        # a replay simulates a recorded hour: over ten seconds, so in the slow tier
        pytest.param((b, line), marks=[pytest.mark.slow] if "--replay" in line else [])
        for b in RUN_HERE
        for line in b.body.splitlines()
        if line.strip()
    ],
    ids=lambda bl: f"{bl[0].page.name}:{bl[1][:60]}",
)
def test_marked_commands_run_as_printed(line: tuple[Block, str], tmp_path: Path) -> None:
    """Run from a directory holding the repository's examples, as a user in a clone would."""
    block, command = line
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    argv = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    out = subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, (block.where, command, out.stderr[-2000:])
    if argv[1] == "check-config":
        assert out.stdout.startswith("configuration OK: provider "), out.stdout


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    assert mkdocs.exists(), "mkdocs is missing: install the test extra"
    out = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    for page in (ROOT / "docs").rglob("*.md"):
        built = tmp_path / "site" / page.relative_to(ROOT / "docs").with_suffix("") / "index.html"
        if page.name == "index.md":
            built = tmp_path / "site" / page.relative_to(ROOT / "docs").parent / "index.html"
        assert built.is_file(), f"{page} is not in the site"


def test_the_simulator_page_names_every_example_scenario() -> None:
    page = (ROOT / "docs" / "simulator.md").read_text()
    missing = [p.stem for p in (ROOT / "examples" / "scenarios").glob("*.yaml") if f"`{p.stem}`" not in page]
    assert not missing, missing


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r"^\s*-\s+[^:#]+:\s+(\S+\.md)\s*$", nav, re.M))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages <= listed, sorted(pages - listed)


# Words about how or by whom the product is built, and paths outside the repository. Spelled in
# pieces so that the same search run over the whole repository does not find this line.
BANNED = re.compile(
    "|".join(["issue [0-9]+", "engin" + r"eers?\b", "hon" + "estly", r"\.\./shared", "/work/"]), re.I
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_speak_of_the_product(page: Path) -> None:
    hits = [
        f"{i}: {line.strip()[:100]}"
        for i, line in enumerate(page.read_text().splitlines(), 1)
        if BANNED.search(line)
    ]
    assert not hits, hits


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Links between pages, and from the README into docs/ and the repository files, point at files
    that exist (mkdocs checks docs/ internally; this covers the README too)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    assert not missing, missing
