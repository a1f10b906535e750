"""Read a Dockerfile and a .dockerignore the way the Docker builder does, for what we use.

There is no Docker engine where the tests run. These helpers let the tests check the recipe's
contract (stages, ENTRYPOINT, the pip install step) and rebuild the build stage's file tree from
the build context, honouring .dockerignore (moby patternmatcher semantics: patterns are matched
against the path and its parent directories, the last matching pattern wins, `!` re-includes,
`*` does not cross `/`, `**` does).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instruction:
    keyword: str
    value: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def instructions(self, keyword: str) -> list[Instruction]:
        return [i for s in self.stages for i in s.instructions if i.keyword == keyword]

    def resolve(self, text: str) -> str:
        """Substitute global ARG defaults (`${NAME}` / `$NAME`), as FROM lines see them."""
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.global_args.get(m.group(1), m.group(0)), text)

    def arg_default(self, name: str) -> str | None:
        for inst in self.instructions("ARG"):
            key, _, default = inst.value.partition("=")
            if key.strip() == name:
                return default.strip().strip('"')
        return self.global_args.get(name)

    def exec_form(self, keyword: str) -> list[str]:
        """The last ENTRYPOINT/CMD, which must be in JSON (exec) form."""
        found = [i for i in self.stages[-1].instructions if i.keyword == keyword]
        if not found:
            raise ValueError(f"the final stage has no {keyword}")
        last = found[-1]
        value = json.loads(last.value)
        assert isinstance(value, list), f"{keyword} must be in exec form"
        return value


def _logical_lines(text: str) -> list[str]:
    """Join backslash continuations and drop comments and blank lines."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def parse(text: str) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "FROM":
            parts = value.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"only ARG may precede FROM, got {keyword}")
            key, _, default = value.partition("=")
            global_args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(Instruction(keyword, value))
    return Dockerfile(global_args, stages)


def pip_install_specs(command: str) -> list[str]:
    """The package specs of the first `pip install` in a shell command (options dropped)."""
    tokens = shlex.split(command)
    for i, token in enumerate(tokens):
        if token == "install" and i > 0 and tokens[i - 1].endswith("pip"):
            specs = []
            for arg in tokens[i + 1 :]:
                if arg in ("&&", ";", "||", "|"):
                    break
                if not arg.startswith("-"):
                    specs.append(arg)
            return specs
    raise ValueError(f"no pip install in {command!r}")


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


class DockerIgnore:
    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line[1:].strip() if negated else line
            pattern = pattern.lstrip("/").rstrip("/")
            self.rules.append((negated, _pattern_regex(pattern)))

    def excluded(self, rel_path: str) -> bool:
        parts = rel_path.split("/")
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        excluded = False
        for negated, regex in self.rules:
            if any(regex.match(c) for c in candidates):
                excluded = not negated
        return excluded

    def context_files(self, root: Path) -> set[str]:
        """Relative paths of all files the build context would hold."""
        files = set()
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not self.excluded(rel):
                files.add(rel)
        return files


def stage_copy(stage: Stage, context: set[str], root: Path, dest_root: Path) -> Path:
    """Replay a stage's WORKDIR and COPY (from the context) into dest_root; return the WORKDIR."""
    workdir = Path("/")
    for inst in stage.instructions:
        if inst.keyword == "WORKDIR":
            workdir = workdir / inst.value
        elif inst.keyword == "COPY":
            args = shlex.split(inst.value)
            if any(a.startswith("--") for a in args):
                raise ValueError(f"COPY options are not replayed: {inst.value}")
            *sources, dest = args
            target = dest_root / (workdir / dest).relative_to("/")
            for source in sources:
                source = source.rstrip("/")
                members = [p for p in context if p == source or p.startswith(source + "/")]
                if not members:
                    raise FileNotFoundError(f"COPY {source}: not in the build context")
                if members != [source]:  # a directory: its contents land in dest
                    outputs = {m: target / Path(m).relative_to(source) for m in members}
                elif dest.endswith("/") or len(sources) > 1:  # a file into a directory
                    outputs = {source: target / Path(source).name}
                else:  # a file to a file name
                    outputs = {source: target}
                for member, out in outputs.items():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root / member, out)
    return dest_root / workdir.relative_to("/")
