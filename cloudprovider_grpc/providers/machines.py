"""The machine shape of the shared machinery: turns a `MachineDriver` into a full `CloudProvider`.

Everything CA-facing that is the same for every cloud lives here once:

- **Target-size bookkeeping.** A group's target is derived, never stored: the machines the cloud
  lists for it (not being deleted) plus the creations we have accepted and not yet seen appear.
  So it cannot drift, and every Refresh reconciles it with the cloud (machines deleted behind our
  back disappear from the target; machines created elsewhere with the group's tags join it).
- **Caches rebuilt on Refresh.** Refresh makes one `list_machines()` call (and reloads the catalogue
  when it is older than `catalog_ttl`); every other RPC answers from memory under one lock.
- **Background create/delete** through `JobRunner` with bounded concurrency and per-attempt
  exponential backoff with jitter.
- **Idempotency.** Every accepted creation carries a token that the driver stores on the machine.
  When a create fails in a way that leaves its outcome unknown (timeout, 5xx after sending), the
  next attempt first looks the token up in the cloud's listing and only creates if it is absent, so
  throttling, timeouts and restarts never double a machine. Deletes treat "already gone" as done;
  DeleteNodes for a machine deleted earlier succeeds (tombstones); a request naming any node that
  is not in the group deletes nothing.
- **Instance states.** Accepted-but-not-created machines appear as `instanceCreating` with a
  placeholder id `<prefix>pending-<token>`; failed creations keep that placeholder with errorInfo
  (class 1 for stockout/quota) until CA deletes it or `failed_ttl` passes, so the target is never
  inflated forever; machines being deleted appear as `instanceDeleting`.
- **Optional journal.** With `state_file`, accepted creations and deletions survive a restart: they
  resume on start (creations by token lookup first). Without it, a restart recovers the target and
  membership from the cloud alone, and creations not yet sent are dropped (CA asks again).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from cloudprovider_grpc import metrics
from cloudprovider_grpc.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    NotImplementedByProvider,
    Unavailable,
)
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import (
    AutoscalingOptions,
    CloudProvider,
    GroupSizes,
    Instance,
    InstanceError,
    InstanceState,
    NodeGroup,
    NodeRef,
)
from cloudprovider_grpc.providers.driver import CloudError, GroupConfig, Machine, MachineDriver, MachineGone
from cloudprovider_grpc.providers.jobs import JobRunner

log = logging.getLogger(__name__)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
TEMPLATE_NAME_PREFIX = "template-node-for-"


@dataclass
class _Creation:
    """A machine CA asked for that the cloud does not list yet."""

    token: str
    group: str
    # queued: not sent yet; inflight: an attempt is running; unknown: an attempt may have reached the
    # cloud (look the token up before creating again); failed: gave up, shown with errorInfo
    status: str = "queued"
    attempts: int = 0
    error: InstanceError | None = None
    failed_at: float = 0.0
    cancelled: bool = False  # CA no longer wants it; delete the machine if the inflight create lands


@dataclass
class _GroupState:
    config: GroupConfig
    machines: dict[str, Machine] = field(default_factory=dict)
    created_locally: dict[str, float] = field(default_factory=dict)  # id -> clock when our create returned
    creations: dict[str, _Creation] = field(default_factory=dict)  # token -> creation, in order accepted
    deleting: dict[str, float] = field(default_factory=dict)  # id -> clock when deletion was accepted
    tombstones: dict[str, float] = field(default_factory=dict)  # id -> clock when it left the cloud
    resolved: dict[str, str] = field(default_factory=dict)  # creation token -> id of the machine it became

    def live_machines(self) -> list[Machine]:
        return [
            m
            for m in self.machines.values()
            if m.state != InstanceState.DELETING and m.id not in self.deleting
        ]

    def target(self) -> int:
        return len(self.live_machines()) + sum(1 for c in self.creations.values() if not c.cancelled)


class MachineProvider(CloudProvider):
    """A `CloudProvider` over any `MachineDriver`; see the module docstring."""

    def __init__(
        self,
        driver: MachineDriver,
        *,
        concurrency: int = 10,
        clock: Callable[[], float] | None = None,
        inline_workers: bool = False,
        state_file: Path | None = None,
        catalog_ttl: float = 300.0,
        failed_ttl: float = 600.0,
        tombstone_ttl: float = 3600.0,
        max_attempts: int = 8,
        max_backoff: float = 60.0,
        seed: int | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.driver = driver
        self.name = driver.name
        self._clock = clock or time.monotonic
        self._lock = threading.RLock()
        self._jobs = JobRunner(
            concurrency=concurrency, clock=self._clock, inline=inline_workers, name=driver.name
        )
        self._state_file = state_file
        self._catalog_ttl = catalog_ttl
        self._failed_ttl = failed_ttl
        self._tombstone_ttl = tombstone_ttl
        self._max_attempts = max_attempts
        self._max_backoff = max_backoff
        self._rng = random.Random(seed) if seed is not None or inline_workers else random.Random()
        self._on_stop = on_stop
        self._catalog_loaded_at: float | None = None
        self._groups: dict[str, _GroupState] = {}
        for cfg in driver.groups():
            if cfg.id in self._groups:
                raise ValueError(f"node group {cfg.id!r} is configured twice")
            self._groups[cfg.id] = _GroupState(cfg)
        self._node_groups = tuple(NodeGroup(c.id, c.min_size, c.max_size, c.debug) for c in driver.groups())
        self._group_objs = {g.id: g for g in self._node_groups}
        self._by_id: dict[str, str] = {}  # providerID or placeholder -> group
        self._by_name: dict[str, str] = {}  # machine name -> group
        self._journal_pending: list[tuple[str, _Creation]] = []
        self._journal_deleting: list[Machine] = []
        self._load_journal()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._lock:
            for group, creation in self._journal_pending:
                self._groups[group].creations[creation.token] = creation
                self._submit_create(creation)
            for machine in self._journal_deleting:
                state = self._groups[machine.group]
                state.machines.setdefault(machine.id, machine)
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            self._journal_pending.clear()
            self._journal_deleting.clear()
            self._reindex()
        self._jobs.start()
        try:
            self.refresh()
        except Unavailable as exc:  # the server still starts; CA's Refresh will try again
            log.warning("initial refresh failed: %s", exc.message)

    def stop(self, timeout: float = 10.0) -> None:
        self._jobs.stop(timeout)
        self.driver.close()
        if self._on_stop is not None:
            self._on_stop()

    def cleanup(self) -> None:
        return None

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no background operation is queued or running (tests, benchmarks)."""
        return self._jobs.wait_idle(timeout)

    # ------------------------------------------------------------------ read RPCs (memory only)
    def node_groups(self) -> Sequence[NodeGroup]:
        return self._node_groups  # immutable and the same object every time: the service caches its answer

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        if self.driver.is_control_plane(node):
            return None
        with self._lock:
            gid = self._by_id.get(node.provider_id) if node.provider_id else None
            if gid is None and not node.provider_id and node.name:
                gid = self._by_name.get(node.name)
        return self._group_objs.get(gid) if gid is not None else None

    def target_size(self, group_id: str) -> int:
        with self._lock:
            return self._group(group_id).target()

    def nodes(self, group_id: str) -> list[Instance]:
        with self._lock:
            state = self._group(group_id)
            out: list[Instance] = []
            for m in state.machines.values():
                st = InstanceState.DELETING if m.id in state.deleting else m.state
                out.append(Instance(m.id, st, m.error))
            for c in state.creations.values():
                if not c.cancelled:
                    out.append(Instance(self._placeholder(c.token), InstanceState.CREATING, c.error))
            return out

    def template(self, group_id: str) -> NodeTemplate:
        with self._lock:
            self._group(group_id)
        tpl = self.driver.template(group_id)
        if tpl is None:
            raise NotImplementedByProvider(f"{self.name}: no template is known for node group {group_id!r}")
        return tpl

    def options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions:
        with self._lock:
            cfg = self._group(group_id).config
        if not cfg.options:
            raise NotImplementedByProvider(f"node group {group_id!r} has no autoscaling option overrides")
        return defaults.merged(cfg.options)

    def gpu_label(self) -> str:
        return self.driver.gpu_label

    def gpu_types(self) -> list[str]:
        return list(self.driver.gpu_types())

    def node_price(self, node: NodeRef, start: datetime, end: datetime) -> float:
        gid = self._group_for_pricing(node)
        price = self.driver.hourly_price(gid) if gid else None
        if price is None:
            raise NotImplementedByProvider(
                f"{self.name}: no price is known for node {node.name or node.provider_id!r}"
            )
        return price * _hours(start, end)

    def pod_price(self, requests: Mapping[str, float], start: datetime, end: datetime) -> float:
        """The cheapest share of a node the pod would occupy: for each priced group whose template
        fits the pod, hourly price x the pod's dominant share (max of its cpu, memory and GPU
        fractions of the node's allocatable); the minimum over groups, or over all priced groups
        when it fits none. This mirrors how CA's price expander compares node cost with the value of
        the pods it schedules (cluster-autoscaler expander/price/price.go)."""
        best_fit: float | None = None
        best_any: float | None = None
        for gid in self._groups:
            price = self.driver.hourly_price(gid)
            tpl = self.driver.template(gid)
            if price is None or tpl is None:
                continue
            share, fits = _dominant_share(requests, tpl)
            cost = price * share
            best_any = cost if best_any is None else min(best_any, cost)
            if fits:
                best_fit = cost if best_fit is None else min(best_fit, cost)
        best = best_fit if best_fit is not None else best_any
        if best is None:
            raise NotImplementedByProvider(f"{self.name}: no node group has a price")
        return best * _hours(start, end)

    def sizes(self) -> dict[str, GroupSizes]:
        with self._lock:
            return {gid: GroupSizes(s.target(), len(s.live_machines())) for gid, s in self._groups.items()}

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        if delta <= 0:
            raise InvalidArgument(f"size increase must be positive, got delta={delta}")
        with self._lock:
            state = self._group(group_id)
            target, cap = state.target(), state.config.max_size
            if target + delta > cap:
                raise FailedPrecondition(
                    f"increasing node group {group_id!r} by {delta} would make its size {target + delta}, "
                    f"above its max size {cap} (current target {target})"
                )
            for _ in range(delta):
                creation = _Creation(token=secrets.token_hex(8), group=group_id)
                state.creations[creation.token] = creation
                self._by_id[self._placeholder(creation.token)] = group_id
                self._submit_create(creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d", group_id, target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        if delta >= 0:
            raise InvalidArgument(f"size decrease must be negative, got delta={delta}")
        with self._lock:
            state = self._group(group_id)
            target = state.target()
            existing = len(state.live_machines())
            new = target + delta
            if new < existing:
                raise FailedPrecondition(
                    f"decreasing node group {group_id!r} by {-delta} would make its target {new}, below the "
                    f"{existing} machines it already has (current target {target}); "
                    "use DeleteNodes to remove machines"
                )
            # cancel the requests least likely to deliver first: failed, then not yet sent, then newest
            order = {"failed": 0, "queued": 1, "unknown": 2, "inflight": 3}
            wanted = [c for c in state.creations.values() if not c.cancelled]
            wanted.sort(key=lambda c: order[c.status])
            for creation in wanted[:-delta]:
                self._cancel_creation(state, creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d (decrease)", group_id, target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self._lock:
            state = self._group(group_id)
            machines: dict[str, Machine] = {}
            creations: dict[str, _Creation] = {}
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind == "machine":
                    machines[obj.id] = obj  # type: ignore[union-attr]
                elif kind == "creation":
                    creations[obj.token] = obj  # type: ignore[union-attr]
                elif kind is None:
                    label = node.name or node.provider_id
                    other = self._by_id.get(node.provider_id) if node.provider_id else None
                    where = f"; it belongs to node group {other!r}" if other and other != group_id else ""
                    raise InvalidArgument(
                        f"node {label!r} (providerID {node.provider_id!r}) does not belong to node group "
                        f"{group_id!r}{where}; nothing was deleted"
                    )
            reducing = sum(
                1
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ) + sum(1 for c in creations.values() if c.status != "failed" and not c.cancelled)
            target = state.target()
            if reducing and target - reducing < state.config.min_size:
                raise FailedPrecondition(
                    f"deleting {reducing} node(s) from node group {group_id!r} would make its size "
                    f"{target - reducing}, below its min size {state.config.min_size}; nothing was deleted"
                )
            for creation in creations.values():
                self._cancel_creation(state, creation)
            for machine in machines.values():
                if machine.id in state.deleting or machine.state == InstanceState.DELETING:
                    continue  # already on its way out: idempotent
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            self._save_journal()
        if machines or creations:
            log.info(
                "node group %s: deleting %s",
                group_id,
                ", ".join([*machines, *map(self._placeholder, creations)]),
            )

    # ------------------------------------------------------------------ refresh (cloud I/O)
    def refresh(self) -> None:
        self._jobs.run_due()  # inline mode only (simulation): creates and deletes run here, in order
        now = self._clock()
        if self._catalog_loaded_at is None or now - self._catalog_loaded_at >= self._catalog_ttl:
            try:
                self.driver.refresh_catalog()
                self._catalog_loaded_at = now
            except CloudError as exc:
                if self._catalog_loaded_at is None:
                    raise Unavailable(f"{self.name}: loading the catalogue failed: {exc.message}") from exc
                log.warning("catalogue refresh failed, keeping the cached one: %s", exc.message)
        started = self._clock()
        try:
            listing = self.driver.list_machines()
        except CloudError as exc:
            raise Unavailable(f"{self.name}: listing machines failed: {exc.message}") from exc
        with self._lock:
            self._apply_listing(listing, started)
            self._expire(self._clock())
            self._reindex()
            sizes = {gid: (s.target(), len(s.live_machines())) for gid, s in self._groups.items()}
        for gid, (target, registered) in sizes.items():
            metrics.GROUP_TARGET_SIZE.labels(self.name, gid).set(target)
            metrics.GROUP_REGISTERED_SIZE.labels(self.name, gid).set(registered)

    def _apply_listing(self, listing: list[Machine], started: float) -> None:
        listed: dict[str, dict[str, Machine]] = {gid: {} for gid in self._groups}
        for m in listing:
            if m.group in listed:
                listed[m.group][m.id] = m
        now = self._clock()
        for gid, state in self._groups.items():
            fresh = listed[gid]
            self._delete_duplicates(state, fresh, now)
            for m in fresh.values():
                if m.id in state.deleting:
                    continue
                creation = state.creations.get(m.token) if m.token else None
                if creation is not None:  # our creation landed (maybe after a timeout or a restart)
                    del state.creations[m.token]
                    state.resolved[m.token] = m.id
                    if creation.cancelled and m.id not in state.deleting:
                        state.deleting[m.id] = now
                        self._submit_delete(m)
            # keep machines our own create returned after this listing started: the listing may predate them
            for mid, m in state.machines.items():
                if mid not in fresh and state.created_locally.get(mid, -1.0) >= started:
                    fresh[mid] = m
            for mid in set(state.machines) - set(fresh):
                state.tombstones[mid] = now
                state.deleting.pop(mid, None)
            state.created_locally = {k: v for k, v in state.created_locally.items() if k not in listed[gid]}
            state.machines = fresh
        self._save_journal()

    def _delete_duplicates(self, state: _GroupState, fresh: dict[str, Machine], now: float) -> None:
        """Keep one machine per creation token and delete the others.

        Most cloud APIs have no idempotency key. A create that timed out can still be carried out
        by the cloud after a retry looked its token up, found nothing and created again, leaving
        one token on two machines. The extra one is provably ours and provably surplus: the one we
        already know (or else the oldest id) stays, the others go through the normal delete path,
        which also takes them out of the target at once."""
        by_token: dict[str, list[Machine]] = {}
        for m in fresh.values():
            if m.token and m.state != InstanceState.DELETING:
                by_token.setdefault(m.token, []).append(m)
        for token, same in by_token.items():
            if len(same) < 2:
                continue
            known = state.resolved.get(token)
            keeper = next((m for m in same if m.id == known), None) or min(same, key=lambda m: _natural(m.id))
            for extra in same:
                if extra is keeper or extra.id in state.deleting:
                    continue
                log.warning(
                    "node group %s: %s duplicates %s (creation token %s); deleting it",
                    state.config.id,
                    extra.id,
                    keeper.id,
                    token,
                )
                state.deleting[extra.id] = now
                self._submit_delete(extra)

    def _expire(self, now: float) -> None:
        for state in self._groups.values():
            for token, c in list(state.creations.items()):
                if c.status == "failed" and now - c.failed_at >= self._failed_ttl:
                    log.info("node group %s: dropping failed creation %s", c.group, self._placeholder(token))
                    del state.creations[token]
                    state.tombstones[self._placeholder(token)] = now
            state.tombstones = {k: v for k, v in state.tombstones.items() if now - v < self._tombstone_ttl}
            state.resolved = {
                t: mid
                for t, mid in state.resolved.items()
                if mid in state.machines or mid in state.tombstones
            }

    # ------------------------------------------------------------------ background operations
    def _submit_create(self, creation: _Creation) -> None:
        self._jobs.submit(lambda: self._attempt_create(creation))

    def _attempt_create(self, c: _Creation) -> float | None:
        with self._lock:
            state = self._groups[c.group]
            if state.creations.get(c.token) is not c or c.cancelled:
                return None  # resolved by a listing, or cancelled before it was sent
            look_up_first = c.status == "unknown"
            c.status = "inflight"
            c.attempts += 1
        try:
            machine = None
            if look_up_first:
                machine = next((m for m in self.driver.list_machines() if m.token == c.token), None)
            if machine is None:
                machine = self.driver.create_machine(c.group, c.token)
        except CloudError as exc:
            return self._create_failed(c, exc)
        metrics.OPERATIONS.labels(self.name, "create", "ok").inc()
        with self._lock:
            state = self._groups[c.group]
            state.creations.pop(c.token, None)
            state.resolved[c.token] = machine.id
            self._by_id.pop(self._placeholder(c.token), None)
            if c.cancelled:
                state.machines[machine.id] = machine
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            else:
                state.machines[machine.id] = machine
                state.created_locally[machine.id] = self._clock()
                self._by_id[machine.id] = c.group
                if machine.name:
                    self._by_name[machine.name] = c.group
            self._save_journal()
        log.info("node group %s: created %s", c.group, machine.id)
        return None

    def _create_failed(self, c: _Creation, exc: CloudError) -> float | None:
        with self._lock:
            if exc.transient and c.attempts < self._max_attempts:
                c.status = "unknown"  # the request may have reached the cloud
                c.error = None
                metrics.OPERATIONS.labels(self.name, "create", "retry").inc()
                delay = self._backoff(c.attempts)
                log.warning(
                    "node group %s: create attempt %d failed (%s); retrying in %.1fs",
                    c.group,
                    c.attempts,
                    exc.message,
                    delay,
                )
                return delay
            c.status = "failed"
            c.failed_at = self._clock()
            error = exc.as_instance_error()
            if exc.transient:
                error = replace(error, message=f"gave up after {c.attempts} attempts: {exc.message}")
            c.error = error
            metrics.OPERATIONS.labels(self.name, "create", "failed").inc()
            self._save_journal()
        log.error("node group %s: creating a machine failed: %s", c.group, exc.message)
        return None

    def _submit_delete(self, machine: Machine) -> None:
        attempts = [0]

        def attempt() -> float | None:
            with self._lock:
                state = self._groups[machine.group]
                if machine.id not in state.deleting:
                    return None  # gone from the cloud meanwhile
            attempts[0] += 1
            try:
                self.driver.delete_machine(machine)
            except MachineGone:
                pass
            except CloudError as exc:
                if exc.transient and attempts[0] < self._max_attempts:
                    metrics.OPERATIONS.labels(self.name, "delete", "retry").inc()
                    return self._backoff(attempts[0])
                metrics.OPERATIONS.labels(self.name, "delete", "failed").inc()
                log.error("node group %s: deleting %s failed: %s", machine.group, machine.id, exc.message)
                with self._lock:
                    self._groups[machine.group].deleting.pop(machine.id, None)
                    self._save_journal()
                return None
            metrics.OPERATIONS.labels(self.name, "delete", "ok").inc()
            log.info("node group %s: deleted %s", machine.group, machine.id)
            return None

        self._jobs.submit(attempt)

    def _cancel_creation(self, state: _GroupState, c: _Creation) -> None:
        if c.status == "inflight" or c.status == "unknown":
            c.cancelled = True  # the attempt (or a later listing) deletes the machine if it appears
        else:
            state.creations.pop(c.token, None)
            state.tombstones[self._placeholder(c.token)] = self._clock()
        self._by_id.pop(self._placeholder(c.token), None)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter (AWS architecture blog, 'Exponential Backoff And Jitter')."""
        return self._rng.uniform(0, min(self._max_backoff, 0.5 * 2**attempt))

    # ------------------------------------------------------------------ helpers
    def _group(self, group_id: str) -> _GroupState:
        state = self._groups.get(group_id)
        if state is None:
            raise NotFound(f"node group {group_id!r} not found")
        return state

    def _placeholder(self, token: str) -> str:
        return f"{self.driver.id_prefix}pending-{token}"

    def _resolve(self, state: _GroupState, node: NodeRef) -> tuple[str | None, Machine | _Creation | None]:
        pid = node.provider_id
        if pid:
            if pid in state.machines:
                return "machine", state.machines[pid]
            prefix = self._placeholder("")
            if pid.startswith(prefix):
                token = pid[len(prefix) :]
                if token in state.creations:
                    return "creation", state.creations[token]
                mid = state.resolved.get(token)
                if mid is not None:  # CA still knows the placeholder of a machine that has since appeared
                    return ("machine", state.machines[mid]) if mid in state.machines else ("gone", None)
            if pid in state.tombstones:
                return "gone", None
            return None, None
        # no providerID: match the machine by its name (hostname)
        for m in state.machines.values():
            if node.name and m.name == node.name:
                return "machine", m
        return None, None

    def _group_for_pricing(self, node: NodeRef) -> str | None:
        if node.provider_id:
            with self._lock:
                gid = self._by_id.get(node.provider_id)
            if gid:
                return gid
        itype = node.labels.get(INSTANCE_TYPE_LABEL)
        if itype:
            for gid in self._groups:
                tpl = self.driver.template(gid)
                if tpl is not None and tpl.instance_type == itype:
                    return gid
        if node.name.startswith(TEMPLATE_NAME_PREFIX):
            rest = node.name[len(TEMPLATE_NAME_PREFIX) :]
            # CA names sanitized templates template-node-for-<group>-<random suffix>
            for gid in sorted(self._groups, key=len, reverse=True):
                if rest == gid or rest.startswith(gid + "-"):
                    return gid
        return None

    def _reindex(self) -> None:
        by_id: dict[str, str] = {}
        by_name: dict[str, str] = {}
        for gid, state in self._groups.items():
            for m in state.machines.values():
                by_id[m.id] = gid
                if m.name:
                    by_name[m.name] = gid
            for c in state.creations.values():
                if not c.cancelled:
                    by_id[self._placeholder(c.token)] = gid
            for token in state.resolved:  # CA may still hold the placeholder of a machine that now exists
                by_id.setdefault(self._placeholder(token), gid)
        self._by_id, self._by_name = by_id, by_name

    # ------------------------------------------------------------------ journal
    def _save_journal(self) -> None:
        if self._state_file is None:
            return
        doc = {
            "version": 1,
            "backend": self.name,
            "creations": [
                {"group": c.group, "token": c.token}
                for s in self._groups.values()
                for c in s.creations.values()
                if c.status != "failed" and not c.cancelled
            ],
            "deleting": [
                {"group": m.group, "id": m.id, "name": m.name, "token": m.token}
                for s in self._groups.values()
                for mid in s.deleting
                if (m := s.machines.get(mid)) is not None
            ],
        }
        tmp = self._state_file.with_suffix(self._state_file.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, self._state_file)

    def _load_journal(self) -> None:
        if self._state_file is None or not self._state_file.exists():
            return
        doc = json.loads(self._state_file.read_text())
        for item in doc.get("creations", []):
            if item["group"] in self._groups:
                # it may have been sent before the restart: look the token up before creating
                self._journal_pending.append(
                    (item["group"], _Creation(item["token"], item["group"], "unknown"))
                )
        for item in doc.get("deleting", []):
            if item["group"] in self._groups:
                self._journal_deleting.append(
                    Machine(
                        item["id"],
                        item["group"],
                        InstanceState.DELETING,
                        item.get("name", ""),
                        item.get("token", ""),
                    )
                )


def _natural(text: str) -> list[object]:
    """Sort key comparing digit runs as numbers: 'x://9' < 'x://10' (older ids sort first)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _hours(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600.0)


def _dominant_share(requests: Mapping[str, float], tpl: NodeTemplate) -> tuple[float, bool]:
    """(largest fraction of the template's allocatable the requests take, whether they fit)."""
    from cloudprovider_grpc.k8s.quantity import parse_quantity

    share, fits = 0.0, True
    for resource, amount in requests.items():
        if amount <= 0:
            continue
        cap = tpl.capacity.get(resource)
        if cap is None:
            if resource in ("cpu", "memory"):
                fits = False
            continue
        total = float(parse_quantity(cap))
        reserved = tpl.reserved.get(resource)
        if reserved:
            total -= float(parse_quantity(reserved))
        if total <= 0:
            fits = False
            continue
        frac = amount / total
        fits = fits and frac <= 1.0
        share = max(share, frac)
    return share, fits


__all__ = ["MachineProvider"]
