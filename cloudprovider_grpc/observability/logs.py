"""Structured logging: one JSON object per line (or plain text for people at a terminal).

Components log ids, counts and cloud error messages. As a last line of defence every formatted line,
exception text included, passes through `secrets.redact`, so a registered secret that some library
put into an exception message never reaches the pod log. `install_hooks()` does the same for the
crashes nobody catches (an unexpected exception at startup or in a thread): one redacted entry, no
raw traceback on stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from types import TracebackType

from cloudprovider_grpc.core.secrets import redact

_STD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update({k: v for k, v in vars(record).items() if k not in _STD})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(doc, default=str))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def setup(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None, where: str
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        return
    logger = logging.getLogger("cloudprovider_grpc")
    if logging.getLogger().handlers:
        logger.critical("unexpected error %s", where, exc_info=(exc_type, exc, tb))
    else:  # before logging is set up: still one redacted line per entry, never the raw traceback
        sys.stderr.write(
            redact(f"cloudprovider-grpc: unexpected error {where}: {exc_type.__name__}: {exc}\n")
        )


def install_hooks() -> None:
    """Route uncaught exceptions (main thread and other threads) through the redacting log."""
    sys.excepthook = lambda t, e, tb: _uncaught(t, e, tb, "in the main thread")
    threading.excepthook = lambda a: _uncaught(
        a.exc_type,
        a.exc_value or a.exc_type(),
        a.exc_traceback,
        f"in thread {a.thread.name if a.thread else '?'}",
    )


class OncePer:
    """Lets one event through per `interval` seconds and counts the ones held back meanwhile: a
    fuzzer or a confused client must not flood the log, and the line that does go out says how
    many it stands for."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._next = 0.0
        self._suppressed = 0

    def due(self) -> int | None:
        """The number held back since the last event let through, or None to stay silent now."""
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._suppressed += 1
                return None
            suppressed, self._suppressed, self._next = self._suppressed, 0, now + self.interval
        return suppressed
