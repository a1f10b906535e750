"""The `--state-file` journal: what the machinery accepted and the cloud may not show yet.

Each shape keeps its own content (the machine shape: creations not yet listed and deletions in
progress; the pool shape: wanted sizes and removals in progress); this module owns only how it is
stored. Writes are atomic and durable: a temporary file in the same directory, fsync, rename over the
old file, fsync of the directory, so a crash or a power loss leaves the old journal or the new one,
never a torn file. A journal that cannot be read is a configuration error naming the file (exit 2):
the server does not guess, the operator moves the file away to recover from the cloud alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.errors import ConfigError

#: version 1 (machine shape only, no "shape" key) is still read
VERSION = 2


class Journal:
    def __init__(self, path: Path | None, *, backend: str, shape: str) -> None:
        self.path = path
        self.backend = backend
        self.shape = shape

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def load(self) -> dict[str, Any]:
        """The shape's saved content, {} when there is none. Raises ConfigError("state-file", ...)
        when the file exists but cannot be used."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            doc = json.loads(self.path.read_bytes())
        except OSError as exc:
            raise self.error(f"cannot be read ({exc.strerror})") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise self.error(f"is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
        if not isinstance(doc, dict):
            raise self.error("is not a JSON object")
        version = doc.get("version")
        shape = doc.get("shape", "machines" if version == 1 else None)
        if version not in (1, VERSION):
            raise self.error(f"has unknown version {version!r}")
        if doc.get("backend") not in (None, self.backend):
            raise self.error(f"belongs to backend {doc.get('backend')!r}, not {self.backend!r}")
        if shape != self.shape:
            raise self.error(f"holds {shape!r} state, not {self.shape!r}")
        return doc

    def save(self, content: dict[str, Any], still: Callable[[], bool] | None = None) -> None:
        """Write `content` atomically. `still`, when given, is asked once more after the new file is
        on disk and right before it replaces the old one; if it says no, the old journal stays (a
        process whose leadership ended while it wrote must not overwrite what the next leader wrote)."""
        if self.path is None:
            return
        doc = {"version": VERSION, "backend": self.backend, "shape": self.shape, **content}
        data = json.dumps(doc, indent=1, sort_keys=True).encode()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if still is not None and not still():
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, self.path)
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def error(self, problem: str) -> ConfigError:
        """The error a journal that cannot be used raises (the shapes raise it for a malformed entry)."""
        return ConfigError(
            "state-file", f"{self.path} {problem}; move it away to start from what the cloud lists"
        )
