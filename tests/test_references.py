"""The package's docstrings and comments name files and modules that exist, and cite no note kept
outside the repository.

A docstring that says "see machines/core.py" after the file moved sends the reader nowhere; files are
renamed and moved often enough that only a check keeps the references true. What counts:
- a file reference, `name.py` or `some/path/name.py`, resolves when a file of the repository ends
  with that path (whole components: `machines/core.py` names
  `cloudprovider_grpc/providers/machinery/machines/core.py`). A path whose first folder is no folder
  of the repository belongs to another project (`alibabacloud_credentials/provider/oidc.py`), and so
  does one written after a repository and a colon (`owner/repo:tests/conftest.py`): neither is checked;
- a dotted reference, `cloudprovider_grpc.x.y[.name]`, resolves when its longest module prefix is a
  module or package of the repository and the first name after it is defined or imported there;
- the sources the code relies on are cited as themselves (a repository and path at a tag, a public
  URL, an issue), never as a note the repository does not hold.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cloudprovider_grpc"
#: generated code, not ours to word
GENERATED = PACKAGE / "protos"
_SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache", "site"}

#: `x.py` or `a/b/x.py`, not part of a longer word, URL or dotted name; group 1 is a `repo:` prefix
FILE_REF = re.compile(r"(?<![\w./:-])([\w.-]+/[\w.-]+:)?((?:[\w.-]+/)*[\w-]+\.py)(?![\w/])")
DOTTED_REF = re.compile(r"(?<![\w.])cloudprovider_grpc(?:\.\w+)+")
#: the citations of notes kept outside the repository: "research note(s)", "research alicloud.md",
#: "research §5", "research B5"
NOTE_CITATION = re.compile(r"research\s+(?:notes?\b|[\w-]+\.md|§|[A-Z]\d|section\b|part\b)", re.IGNORECASE)


def _walk(top: Path) -> Iterator[Path]:
    for path in sorted(top.iterdir()):
        if path.name in _SKIP_DIRS or path.name.startswith("."):
            continue
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _walk(path)


@cache
def _repository() -> tuple[dict[str, list[tuple[str, ...]]], frozenset[str]]:
    """Every file's path as components, by file name, and every folder's name."""
    files: dict[str, list[tuple[str, ...]]] = {}
    folders: set[str] = set()
    for path in _walk(ROOT):
        if path.is_dir():
            folders.add(path.name)
        else:
            files.setdefault(path.name, []).append(path.relative_to(ROOT).parts)
    return files, frozenset(folders)


def _file_exists(reference: str) -> bool:
    """Some file of the repository ends with `reference`, whole components."""
    wanted = tuple(reference.split("/"))
    named = _repository()[0].get(wanted[-1], [])
    return any(parts[-len(wanted) :] == wanted for parts in named if len(parts) >= len(wanted))


def _is_ours(reference: str) -> bool:
    """A bare file name, or a path starting at a folder the repository has."""
    first, _, rest = reference.partition("/")
    return not rest or first in _repository()[1]


def _module_file(dotted: str) -> Path | None:
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_resolves(reference: str) -> bool:
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(".".join(parts[:cut]))
        if module is None:
            continue
        if cut == len(parts):
            return True
        name = parts[cut]
        if (module.parent / name).is_dir() or module.with_name(f"{name}.py").is_file():
            return False  # a submodule that the longest prefix would have found
        return (
            re.search(
                rf"\b(?:def|class)\s+{name}\b|^{name}\b|\bimport\b.*\b{name}\b", module.read_text(), re.M
            )
            is not None
        )
    return False


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if GENERATED not in p.parents]


def _our_python() -> list[Path]:
    """The package and the tests', benchmarks' and scripts' own Python, but this file, whose
    examples must hold what it refuses."""
    others = [
        p for folder in ("tests", "benchmarks", "scripts") for p in sorted((ROOT / folder).rglob("*.py"))
    ]
    return _modules() + [p for p in others if p != Path(__file__).resolve()]


def _problems(check: Callable[[str], Iterator[str]], paths: list[Path] | None = None) -> list[str]:
    found = []
    for path in _modules() if paths is None else paths:
        for line, text in _prose(path):
            found.extend(f"{path.relative_to(ROOT)}:{line}: {what}" for what in check(text))
    return found


def _dangling(text: str) -> Iterator[str]:
    for match in FILE_REF.finditer(text):
        repo, reference = match.groups()
        if repo is None and _is_ours(reference) and not _file_exists(reference):
            yield f"{reference} names no file of the repository"
    for match in DOTTED_REF.finditer(text):
        reference = match.group(0).rstrip(".")
        if not _dotted_resolves(reference):
            yield f"{reference} names no module (or no name in it) of the package"


def _note_citations(text: str) -> Iterator[str]:
    for match in NOTE_CITATION.finditer(text):
        yield f"cites {match.group(0)!r}: name the source itself, or say the fact is our own"


def test_docstrings_and_comments_name_files_and_modules_that_exist() -> None:
    assert _problems(_dangling) == []


def test_no_docstring_or_comment_cites_a_note_outside_the_repository() -> None:
    assert _problems(_note_citations, _our_python()) == []


def test_the_checks_catch_what_they_are_for() -> None:
    """Each rule refuses what it should and accepts what it should, so neither test passes empty."""
    assert list(_dangling("see grpcapi/handlers.py and handlers.py")) == []
    assert list(_dangling("machines/core.py; cloudprovider_grpc.grpcapi.handlers.raw_calls")) == []
    assert list(_dangling("another project's alibabacloud_credentials/provider/oidc.py")) == []
    assert list(_dangling("cherryservers/cherryservers-sdk-python:tests/unit/plans/conftest.py")) == []
    assert len(list(_dangling("see grpcapi/no_such_module.py"))) == 1
    assert len(list(_dangling("see no_such_module.py"))) == 1
    assert len(list(_dangling("cloudprovider_grpc.grpcapi.no_such_module"))) == 1
    assert len(list(_dangling("cloudprovider_grpc.grpcapi.handlers.no_such_name"))) == 1
    assert len(list(_note_citations("(research notes §2.2)"))) == 1
    assert len(list(_note_citations("(research alicloud.md §5)"))) == 1
    assert len(list(_note_citations("(research B5)"))) == 1
    assert list(_note_citations("the research left them open; kubernetes/autoscaler#4796")) == []
