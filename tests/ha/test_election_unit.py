"""The election's rules, one step at a time on a hand-driven clock, over an in-memory Lease store that
answers like the API server does (404 for a missing Lease, 409 for a write at a stale
resourceVersion). The same code against a real kube-apiserver: tests/ha/test_election.py."""

from __future__ import annotations

import copy
import itertools

import pytest
from kubernetes.client.exceptions import ApiException

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.ha.election import Elector
from cloudprovider_grpc.ha.lease import LeaseLock
from cloudprovider_grpc.ha.settings import LeaderElection
from tests.support.servers import ManualClock

pytestmark = pytest.mark.unit


class MemoryLeases:
    """read/create/replace of coordination/v1 Leases with optimistic concurrency."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], object] = {}
        self.versions = itertools.count(1)

    def read_namespaced_lease(self, name: str, namespace: str, **_: object) -> object:
        if (namespace, name) not in self.stored:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.stored[(namespace, name)])

    def create_namespaced_lease(self, namespace: str, body: object, **_: object) -> object:
        key = (namespace, body.metadata.name)  # type: ignore[attr-defined]
        if key in self.stored:
            raise ApiException(status=409, reason="AlreadyExists")
        body.metadata.resource_version = str(next(self.versions))  # type: ignore[attr-defined]
        self.stored[key] = copy.deepcopy(body)
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: object, **_: object) -> object:
        current = self.stored[(namespace, name)]
        if body.metadata.resource_version != current.metadata.resource_version:  # type: ignore[attr-defined]
            raise ApiException(status=409, reason="Conflict")
        body.metadata.resource_version = str(next(self.versions))  # type: ignore[attr-defined]
        self.stored[(namespace, name)] = copy.deepcopy(body)
        return body


def _elector(api: MemoryLeases, identity: str, clock: ManualClock) -> Elector:
    settings = LeaderElection(enabled=True)
    return Elector(settings, LeaseLock(api, "ns", "lease", 1.0), identity, clock=clock)


def _step(e: Elector, clock: ManualClock) -> bool:
    """One round of the loop's decision, as _run makes it."""
    started = clock()
    won = e._try_acquire_or_renew(started)
    if won and e.gate.term < 0:
        e.gate.begin(e._observed.transitions if e._observed else 0, started)
    elif won:
        e.gate.renewed(started)
    return won


def test_one_leader_then_takeover_only_after_the_lease_expires_on_the_observers_clock() -> None:
    api, clock = MemoryLeases(), ManualClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert _step(a, clock) and a.gate.valid()
    assert not _step(b, clock) and not b.gate.valid()
    assert api.stored[("ns", "lease")].spec.holder_identity == "a"
    clock.advance(2)
    assert _step(a, clock)  # renewals keep it
    assert not _step(b, clock)  # b observes the renewal (it retries every period)
    clock.advance(9.9)  # a stops renewing (frozen): still valid until 10 s after its last renewal
    assert a.gate.valid()
    clock.advance(0.2)
    assert not a.gate.valid()  # fenced before anyone else may take over
    assert not _step(b, clock)  # b saw the renewal 10.1 s ago: not expired for it yet
    clock.advance(4.8)
    assert not _step(b, clock)
    clock.advance(0.2)
    assert _step(b, clock) and b.gate.valid()
    assert api.stored[("ns", "lease")].spec.lease_transitions == 1
    # a, resumed, finds another holder: its term stays over
    assert not _step(a, clock) and not a.gate.valid()


def test_a_stale_write_loses_the_race() -> None:
    api, clock = MemoryLeases(), ManualClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert _step(a, clock)
    clock.advance(20)  # expired for both candidates
    lease_b = api.read_namespaced_lease("lease", "ns")
    assert _step(_elector(api, "c", clock), clock) is False  # c has not observed it for 15 s yet
    api.replace_namespaced_lease("lease", "ns", copy.deepcopy(lease_b))  # someone else wrote first
    b._observed = None
    with pytest.raises(ApiException):
        b.lock.replace(lease_b)  # at the old resourceVersion


def test_release_lets_the_next_candidate_in_at_once() -> None:
    api, clock = MemoryLeases(), ManualClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert _step(a, clock) and not _step(b, clock)
    assert a._release()
    assert api.stored[("ns", "lease")].spec.holder_identity is None
    assert _step(b, clock) and b.gate.valid()


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"lease_duration": "10s", "renew_deadline": "10s"}, "longer than the renew deadline"),
        ({"renew_deadline": "2s", "retry_period": "2s"}, "1.2 x the retry period"),
        ({"lease_duration": "fifteen"}, "not a duration"),
        ({"resource_name": "Not_A_Name"}, "Kubernetes object name"),
    ],
)
def test_settings_follow_client_gos_rules(values: dict[str, str], problem: str) -> None:
    from cloudprovider_grpc.config.settings import load_settings

    with pytest.raises(ConfigError, match=problem):
        load_settings(None, {"leader_elect": {"enabled": True, **values}})


def test_durations_take_cas_flag_syntax() -> None:
    settings = LeaderElection(lease_duration="1m30s", renew_deadline="500ms", retry_period=0.1)
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (90, 0.5, 0.1)


def test_flags_take_cas_names_and_go_booleans() -> None:
    from cloudprovider_grpc.cli import _settings, build_parser

    args = build_parser().parse_args(
        [
            "serve",
            "--leader-elect=false",
            "--leader-elect-lease-duration",
            "20s",
            "--leader-elect-resource-name",
            "my-lease",
        ]
    )
    settings = _settings(args)
    assert not settings.leader_elect.enabled
    assert (settings.leader_elect.lease_duration, settings.leader_elect.resource_name) == (20, "my-lease")
    on = _settings(build_parser().parse_args(["serve", "--leader-elect"]))
    assert on.leader_elect.enabled and on.leader_elect.retry_period == 2


def test_a_dry_run_needs_no_leader() -> None:
    from cloudprovider_grpc.config.settings import load_settings

    with pytest.raises(ConfigError, match="dry_run"):
        load_settings(None, {"dry_run": True, "leader_elect": {"enabled": True}})


def test_a_prober_that_hung_up_is_not_a_traceback(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Readiness probes on a busy machine time out and hang up; the metrics port stays quiet about
    it, and reports anything else as one log line."""
    from cloudprovider_grpc.server import metrics_port as metricshttp

    server = metricshttp._MetricsServer.__new__(metricshttp._MetricsServer)  # its handler only, no socket
    for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
        try:
            raise gone
        except OSError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == "" and not caplog.records
    try:
        raise ValueError("boom")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert [r.getMessage() for r in caplog.records] == ["metrics port: a request failed: ValueError: boom"]
    assert "Traceback" not in capsys.readouterr().err
