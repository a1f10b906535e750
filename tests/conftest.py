"""Shared fixtures. Tests start real servers on loopback ports (port 0) and talk over real sockets."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import bytecode  # noqa: E402

#: before anything else is imported, and before xdist starts its workers (they inherit it)
_BYTECODE = bytecode.share_for_this_run()

from tests.deploy_support.tools import unavailable  # noqa: E402
from tests.preparation import gate  # noqa: E402
from tests.preparation import runner as preparation  # noqa: E402
from tests.realnode import figures as realnode_figures  # noqa: E402
from tests.support import controlplane  # noqa: E402
from tests.support.certs import Pki, write_pki  # noqa: E402
from tests.support.front import ensure_front  # noqa: E402
from tests.support.servers import ManualClock  # noqa: E402

SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return write_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} (the project's shared/ folder) is missing")
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def compiled_front() -> Path | None:
    """Built before any server starts, so `--front auto` (the default) finds it everywhere."""
    return ensure_front()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    """A real etcd + kube-apiserver, one per session (per xdist worker); tests keep apart by
    namespace (`control_plane.namespace()`). Its binaries come from the preparation phase: skipped
    where they could not be had (no Go, no apt-get), except under CI=true, where that fails."""
    workdir = tmp_path_factory.mktemp("controlplane")
    try:
        controlplane.binaries()
    except controlplane.Unavailable as exc:
        unavailable("a Kubernetes control plane", str(exc))
    with controlplane.control_plane(workdir) as plane:
        yield plane


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The preparation phase (tests/preparation/): every tool the selected tests use is built or
    fetched here, before xdist starts its workers and before the first test, outside every test's
    time limit. A failed build stops the run with its own output; the tests only look tools up."""
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly or gate.active():
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            if reporter is not None:
                reporter.write_line(line)
                reporter.flush()
            else:
                print(line, flush=True)

    base = config.invocation_params.dir
    paths = [(base / str(arg).split("::", 1)[0]).resolve() for arg in config.args]
    steps = preparation.selected(paths, preparation.marker_filter(config.option.markexpr))
    started = time.monotonic()
    try:
        outcomes = preparation.run(steps, say)
        preparation.check_unavailable(outcomes)
    except preparation.PreparationFailed as exc:
        pytest.exit(f"the preparation phase stopped the run before any test: {exc}", returncode=1)
    preparation.publish(outcomes)
    say(preparation.summary(outcomes, time.monotonic() - started))


# ---------------------------------------------------------------- tiers

TIERS = ("unit", "integration")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is `unit` or `integration` (and may be `slow` as well): a test without its tier
    could not be selected by `-m`, so it is an error, not a default."""
    untiered = [
        item.nodeid for item in items if sum(item.get_closest_marker(t) is not None for t in TIERS) != 1
    ]
    if untiered:
        raise pytest.UsageError(
            "tests must be marked exactly one of unit/integration:\n  " + "\n  ".join(untiered[:20])
        )


def _refuse(what: str) -> Callable[..., NoReturn]:
    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        raise AssertionError(f"a test marked `unit` {what}: mark it `integration`")

    return refuse


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `unit` test opens no socket and starts no process; this holds it to that."""
    if request.node.get_closest_marker("unit") is None:
        return
    monkeypatch.setattr(socket.socket, "bind", _refuse("bound a socket"))
    monkeypatch.setattr(socket.socket, "connect", _refuse("connected a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))


#: the root logger's level before any test ran (pytest leaves it alone unless asked)
_ROOT_LEVEL = logging.getLogger().level


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """Commands run in-process (the simulator's, also from module-scoped fixtures and Dask's
    in-process workers) configure the root logger for a whole program: the simulator sets CRITICAL.
    That level must not silence a later test's caplog in the same worker, so every test starts and
    ends at the level the session started with, and handlers a test added are dropped."""
    root = logging.getLogger()
    root.setLevel(_ROOT_LEVEL)
    handlers = root.handlers[:]
    yield
    root.setLevel(_ROOT_LEVEL)
    root.handlers[:] = handlers


# The real-node tier's figures: the controlling process names the run's figures file and prints it
# in the terminal summary (a subfolder's conftest never loads in xdist's controller, which collects
# nothing, so these hooks live here).
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process (or a run without xdist)
        realnode_figures.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        realnode_figures.discard_if_empty()
        bytecode.discard(_BYTECODE)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = realnode_figures.collected()
    if found is not None:
        path, lines = found
        terminalreporter.write_sep("-", f"realnode figures (also in {path})")
        for line in lines:
            terminalreporter.write_line(line)
