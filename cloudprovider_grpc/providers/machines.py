"""The machine shape of the shared machinery: turns a `MachineDriver` into a full `CloudProvider`.

For clouds where our server owns the size and creates machines one by one (Cherry Servers, SPC, the
sim cloud's machine mode). The read side is `providers/base.py`; this module adds:

- **Target-size bookkeeping.** A group's target is derived, never stored: the machines the cloud
  lists for it (not being deleted) plus the creations we have accepted and not yet seen appear.
  So it cannot drift, and every Refresh reconciles it with the cloud (machines deleted behind our
  back disappear from the target; machines created elsewhere with the group's tags join it).
- **Background create/delete** through `JobRunner` with bounded concurrency and per-attempt
  exponential backoff with jitter.
- **Idempotency.** Every accepted creation carries a token that the driver stores on the machine.
  When a create fails in a way that leaves its outcome unknown (timeout, 5xx after sending), the
  next attempt first looks the token up in the cloud's listing and only creates if it is absent, so
  throttling, timeouts and restarts never double a machine. For clouds whose create cannot carry a
  token (`create_carries_token = False`), an unknown outcome is never re-sent: the next listings
  adopt one new untokened machine of the group instead, and if none appears within `failed_ttl`
  the creation fails visibly (CA backs off and asks again). Deletes treat "already gone" as done;
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

import enum
import logging
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError, MachineGone
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.providers import activity
from cloudprovider_grpc.providers.base import GroupProvider, GroupStateBase, ListingSpan
from cloudprovider_grpc.providers.contract import Instance, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, MachineDriver, MachineListing

log = logging.getLogger(__name__)


class CreationStatus(enum.Enum):
    """Where an accepted creation stands. Listed in the order DecreaseTargetSize cancels them: the
    least likely to deliver a machine first."""

    FAILED = 0  # gave up; shown with errorInfo until CA deletes it or failed_ttl passes
    QUEUED = 1  # not sent yet
    UNKNOWN = 2  # an attempt may have reached the cloud: look the token up (or adopt) before more
    INFLIGHT = 3  # an attempt is running


class Resolved(enum.Enum):
    """What a node named in DeleteNodes is to a group."""

    MACHINE = "machine"
    CREATION = "creation"
    GONE = "gone"  # it was ours and has left the cloud already: deleting it again is done
    FOREIGN = "foreign"  # not in this group


@dataclass
class _Creation:
    """A machine CA asked for that the cloud does not list yet."""

    token: str
    group: str
    status: CreationStatus = CreationStatus.QUEUED
    attempts: int = 0
    error: InstanceError | None = None
    failed_at: float = 0.0
    unknown_since: float | None = None  # untokened clouds: when the outcome became unknown
    sent: bool = False  # a create request may have left (journaled before it goes out)
    cancelled: bool = False  # CA no longer wants it; delete the machine if the inflight create lands
    accepted_at: float = 0.0  # provider clock when IncreaseSize accepted it (the status shows its age)


@dataclass
class _GroupState(GroupStateBase):
    created_locally: dict[str, float] = field(default_factory=dict)  # id -> clock when our create returned
    creations: dict[str, _Creation] = field(default_factory=dict)  # token -> creation, in order accepted
    resolved: dict[str, str] = field(default_factory=dict)  # creation token -> id of the machine it became

    def target(self) -> int:
        wanted = sum(1 for c in self.creations.values() if not c.cancelled) if self.creations else 0
        return self.live_count() + wanted


class MachineProvider(GroupProvider[_GroupState]):
    """A `CloudProvider` over any `MachineDriver`; see the module docstring."""

    shape = "machines"
    driver: MachineDriver

    def __init__(self, driver: MachineDriver, **kwargs: Any) -> None:
        super().__init__(driver, **kwargs)

    # ------------------------------------------------------------------ base hooks
    def _new_state(self, config: GroupConfig) -> _GroupState:
        return _GroupState(config)

    def _target(self, state: _GroupState) -> int:
        return state.target()

    def _placeholder_ids(self, state: _GroupState) -> list[str]:
        ids = [self._placeholder(c.token) for c in state.creations.values() if not c.cancelled]
        # CA may still hold the placeholder of a machine that now exists
        ids.extend(self._placeholder(token) for token in state.resolved)
        return ids

    # ------------------------------------------------------------------ read RPCs (memory only)
    def nodes(self, group_id: str) -> list[Instance]:
        with self._lock:
            state = self._group(group_id)
            out: list[Instance] = []
            for m in state.machines.values():
                st = InstanceState.DELETING if m.id in state.deleting else m.state
                out.append(Instance(m.id, st, m.error))
            for c in state.creations.values():
                if not c.cancelled:
                    error = c.error or (state.listing_error if c.status != CreationStatus.INFLIGHT else None)
                    out.append(Instance(self._placeholder(c.token), InstanceState.CREATING, error))
            return out

    # ------------------------------------------------------------------ write RPCs (record and return)
    def increase_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            state, target = self._check_increase(group_id, delta)
            self._admit("create", group_id, delta)
            for _ in range(delta):
                creation = _Creation(token=secrets.token_hex(8), group=group_id, accepted_at=self._clock())
                state.creations[creation.token] = creation
                self._index_node(self._placeholder(creation.token), group_id)
                self._submit_create(creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d", self._shown(group_id), target, target + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        with self._changing(group_id):
            state, target = self._check_decrease(group_id, delta)
            self._admit("cancel", group_id, -delta)
            new = target + delta
            # cancel the requests least likely to deliver first: failed, then not yet sent, then newest
            wanted = [c for c in state.creations.values() if not c.cancelled]
            wanted.sort(key=lambda c: c.status.value)
            for creation in wanted[:-delta]:
                self._cancel_creation(state, creation)
            self._save_journal()
        log.info("node group %s: target %d -> %d (decrease)", self._shown(group_id), target, new)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        with self._changing(group_id):
            state = self._group(group_id)
            machines: dict[str, Machine] = {}
            creations: dict[str, _Creation] = {}
            for node in nodes:
                kind, obj = self._resolve(state, node)
                if kind is Resolved.MACHINE and isinstance(obj, Machine):
                    machines[obj.id] = obj
                elif kind is Resolved.CREATION and isinstance(obj, _Creation):
                    creations[obj.token] = obj
                elif kind is Resolved.FOREIGN:
                    raise self._not_in_group(group_id, node)
            reducing = sum(
                1
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ) + sum(1 for c in creations.values() if c.status != CreationStatus.FAILED and not c.cancelled)
            self._check_min(state, reducing)
            leaving = [
                m.id
                for m in machines.values()
                if m.id not in state.deleting and m.state != InstanceState.DELETING
            ]
            leaving += [self._placeholder(c.token) for c in creations.values() if not c.cancelled]
            if leaving:
                self._admit("delete", group_id, len(leaving), leaving)
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
                self._shown(group_id),
                ", ".join([*machines, *map(self._placeholder, creations)]),
            )

    # ------------------------------------------------------------------ refresh (cloud I/O)
    def _list(self) -> MachineListing:
        try:
            listing = self.driver.list_machines()
        except CloudError as exc:
            raise Unavailable(f"{self.name}: listing machines failed: {exc.message}") from exc
        return listing if isinstance(listing, MachineListing) else MachineListing(listing)

    def _apply(self, listing: MachineListing, started: float, span: ListingSpan) -> None:
        listed: dict[str, dict[str, Machine]] = {gid: {} for gid in self._groups}
        for m in listing:
            if m.group in listed:
                listed[m.group][m.id] = m
        now = self._clock()
        for gid, state in self._groups.items():
            if not self._takes_listing(state, span):
                continue
            failure = listing.failed.get(gid)
            self._note_listing_error(state, failure)
            if failure is not None:
                continue  # keep what we knew; its creations and deletions go on in the background
            fresh = listed[gid]
            self._delete_duplicates(state, fresh, now)
            for m in fresh.values():
                if m.id in state.deleting:
                    continue
                creation = state.creations.get(m.token) if m.token else None
                if creation is not None:  # our creation landed (maybe after a timeout or a restart)
                    self._resolve_creation(state, creation, m, now)
            if not self.driver.create_carries_token:
                self._adopt_untokened(state, fresh, now)
            # keep machines our own create returned after this listing started: the listing may predate them
            for mid, m in state.machines.items():
                if mid not in fresh and state.created_locally.get(mid, -1.0) >= started:
                    fresh[mid] = m
            for mid in set(state.machines) - set(fresh):
                state.tombstones[mid] = now
                state.deleting.pop(mid, None)
            state.created_locally = {k: v for k, v in state.created_locally.items() if k not in listed[gid]}
            state.machines = fresh
            state.listed_once = True

    def _resolve_creation(self, state: _GroupState, creation: _Creation, m: Machine, now: float) -> None:
        del state.creations[creation.token]
        state.resolved[creation.token] = m.id
        if creation.cancelled and m.id not in state.deleting:
            state.deleting[m.id] = now
            self._submit_delete(m)

    def _adopt_untokened(self, state: _GroupState, fresh: dict[str, Machine], now: float) -> None:
        """Clouds whose create carries no token: each creation whose outcome is unknown adopts one
        machine of the group that no listing showed before and no create of ours returned (oldest
        id first). A machine someone else created at the same moment can be adopted instead of
        ours; that is the price of an API without idempotency, and it never doubles a machine."""
        waiting = [c for c in state.creations.values() if c.status == CreationStatus.UNKNOWN]
        if not waiting or not state.listed_once:
            return  # the first listing of a group (after a start) is the baseline newcomers are told from

        # told apart by the cloud's own handle where there is one: an id can change while a machine
        # boots (SPC reports a node by name until its provider id exists), a handle (pk) cannot
        def key(m: Machine) -> str:
            return m.handle or m.id

        seen = [*state.machines.values()]
        known = {key(m) for m in seen} | set(state.resolved.values()) | set(state.tombstones)
        known |= {m.id for m in seen}
        newcomers = sorted(
            (
                m
                for mid, m in fresh.items()
                if key(m) not in known and mid not in known and not m.token and mid not in state.deleting
            ),
            key=lambda m: _natural(m.id),
        )
        for creation, machine in zip(waiting, newcomers, strict=False):
            log.info(
                "node group %s: adopting %s for the create whose outcome was unknown",
                self._shown(state.config.id),
                machine.id,
            )
            self._resolve_creation(state, creation, machine, now)

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
                    self._shown(state.config.id),
                    extra.id,
                    keeper.id,
                    token,
                )
                state.deleting[extra.id] = now
                self._submit_delete(extra)

    def _expire(self, now: float) -> None:
        for state in self._groups.values():
            for token, c in list(state.creations.items()):
                if (
                    c.status == CreationStatus.UNKNOWN
                    and c.unknown_since is not None
                    and now - c.unknown_since >= self._failed_ttl
                ):
                    # untokened cloud: no new machine appeared; fail visibly so CA backs off and asks again
                    c.status, c.failed_at = CreationStatus.FAILED, now
                    c.error = InstanceError(
                        "CREATE_OUTCOME_UNKNOWN",
                        f"no new machine appeared within {self._failed_ttl:.0f}s of a create "
                        "whose answer was lost",
                    )
                    log.error("node group %s: %s", self._shown(c.group), c.error.message)
                if c.status == CreationStatus.FAILED and now - c.failed_at >= self._failed_ttl:
                    log.info(
                        "node group %s: dropping failed creation %s",
                        self._shown(c.group),
                        self._placeholder(token),
                    )
                    del state.creations[token]
                    state.tombstones[self._placeholder(token)] = now
                    if not any(x.status == CreationStatus.FAILED for x in state.creations.values()):
                        self.activity.expired(c.group)
            state.resolved = {
                t: mid
                for t, mid in state.resolved.items()
                if mid in state.machines or mid in state.tombstones
            }
        super()._expire(now)

    # ------------------------------------------------------------------ background operations
    def _submit_create(self, creation: _Creation) -> None:
        self._jobs.submit(lambda: self._attempt_create(creation), what="create machine")

    def _attempt_create(self, c: _Creation) -> float | None:
        with self._changing(c.group):
            state = self._groups.get(c.group)
            if state is None or state.creations.get(c.token) is not c or c.cancelled:
                return None  # resolved by a listing, cancelled before it was sent, or the group is gone
            look_up_first = c.status == CreationStatus.UNKNOWN
            if look_up_first and not self.driver.create_carries_token:
                return None  # never re-sent: a listing adopts its machine (_adopt_untokened)
            c.status = CreationStatus.INFLIGHT
            c.attempts += 1
            if not c.sent and not look_up_first:
                # journaled before the request leaves: after a crash, a creation never sent is sent
                # again at once, and only one that may have left is looked up (or, untokened, adopted)
                c.sent = True
                self._save_journal()
        try:
            machine = None
            if look_up_first:
                listing = self.driver.list_machines()
                failed = listing.failed if isinstance(listing, MachineListing) else {}
                if c.group in failed:
                    raise failed[c.group]
                machine = next((m for m in listing if m.token == c.token), None)
            if machine is None:
                if not self._allowed("create", c.group, 1):
                    with self._lock:
                        c.status = CreationStatus.UNKNOWN if c.sent else CreationStatus.QUEUED
                    return None
                machine = self.driver.create_machine(c.group, c.token)
        except CloudError as exc:
            return self._create_failed(c, exc)
        metrics.OPERATIONS.labels(self.name, "create", "ok").inc()
        with self._changing(c.group):
            state = self._groups.get(c.group)
            if state is None:
                return None
            state.creations.pop(c.token, None)
            state.resolved[c.token] = machine.id  # its placeholder keeps pointing at the group
            state.machines[machine.id] = machine
            if c.cancelled:
                state.deleting[machine.id] = self._clock()
                self._submit_delete(machine)
            else:
                state.created_locally[machine.id] = self._clock()
                self._index_node(machine.id, c.group, machine.name)
            self._save_journal()
        log.info("node group %s: created %s", self._shown(c.group), machine.id)
        self.activity.succeeded(c.group)
        self.activity.occurred(
            activity.Occurrence(
                activity.MACHINE_CREATED, f"node group {c.group}: created {machine.id}", c.group
            )
        )
        return None

    def _create_failed(self, c: _Creation, exc: CloudError) -> float | None:
        with self._changing(c.group):
            if exc.transient and not self.driver.create_carries_token:
                # the request may have reached the cloud and nothing identifies its machine: never
                # send it again; the next listings adopt the machine if it appears (_adopt_untokened)
                c.status, c.unknown_since, c.error = CreationStatus.UNKNOWN, self._clock(), None
                metrics.OPERATIONS.labels(self.name, "create", "unknown").inc()
                log.warning(
                    "node group %s: create outcome unknown (%s); waiting for the machine to be listed",
                    self._shown(c.group),
                    exc.message,
                )
                self._save_journal()
                return None
            if exc.transient and c.attempts < self._max_attempts:
                c.status = CreationStatus.UNKNOWN  # the request may have reached the cloud
                c.error = None
                metrics.OPERATIONS.labels(self.name, "create", "retry").inc()
                delay = self._backoff(c.attempts)
                log.warning(
                    "node group %s: create attempt %d failed (%s); retrying in %.1fs",
                    self._shown(c.group),
                    c.attempts,
                    exc.message,
                    delay,
                )
                self.activity.backing_off(c.group, "creating a machine", exc.message, delay)
                return delay
            c.status = CreationStatus.FAILED
            c.failed_at = self._clock()
            error = exc.as_instance_error()
            if exc.transient:
                error = replace(error, message=f"gave up after {c.attempts} attempts: {exc.message}")
            c.error = error
            metrics.OPERATIONS.labels(self.name, "create", "failed").inc()
            self._save_journal()
            self.activity.create_failed(
                c.group, error.code, error.message, error.error_class, self._failed_ttl
            )
        log.error("node group %s: creating a machine failed: %s", self._shown(c.group), exc.message)
        return None

    def _submit_delete(self, machine: Machine) -> None:
        attempts = [0]

        def attempt() -> float | None:
            with self._lock:
                state = self._groups.get(machine.group)
                if state is None or machine.id not in state.deleting:
                    return None  # gone from the cloud meanwhile
            attempts[0] += 1
            if not self._allowed("delete", machine.group, 1, (machine.id,)):
                return None
            try:
                self.driver.delete_machine(machine)
            except MachineGone:
                pass
            except CloudError as exc:
                if exc.transient and attempts[0] < self._max_attempts:
                    metrics.OPERATIONS.labels(self.name, "delete", "retry").inc()
                    delay = self._backoff(attempts[0])
                    self.activity.backing_off(machine.group, f"deleting {machine.id}", exc.message, delay)
                    return delay
                metrics.OPERATIONS.labels(self.name, "delete", "failed").inc()
                self.activity.cloud_failed(machine.group, exc.code, exc.message)
                self.activity.occurred(
                    activity.Occurrence(
                        activity.MACHINE_DELETE_FAILED,
                        f"node group {machine.group}: deleting {machine.id} failed: {exc.message}",
                        machine.group,
                        warning=True,
                        node=machine.name,
                    )
                )
                log.error(
                    "node group %s: deleting %s failed: %s",
                    self._shown(machine.group),
                    machine.id,
                    exc.message,
                )
                with self._changing(machine.group):
                    state = self._groups.get(machine.group)
                    if state is not None:
                        state.deleting.pop(machine.id, None)
                    self._save_journal()
                return None
            metrics.OPERATIONS.labels(self.name, "delete", "ok").inc()
            log.info("node group %s: deleted %s", self._shown(machine.group), machine.id)
            self.activity.succeeded(machine.group)
            self.activity.occurred(
                activity.Occurrence(
                    activity.MACHINE_DELETED,
                    f"node group {machine.group}: deleted machine {machine.id}",
                    machine.group,
                    node=machine.name,
                )
            )
            return None

        self._jobs.submit(attempt, what="delete machine")

    def _cancel_creation(self, state: _GroupState, c: _Creation) -> None:
        if c.status in (CreationStatus.INFLIGHT, CreationStatus.UNKNOWN):
            c.cancelled = True  # the attempt (or a later listing) deletes the machine if it appears
        else:
            state.creations.pop(c.token, None)
            state.tombstones[self._placeholder(c.token)] = self._clock()
        self._unindex_node(self._placeholder(c.token))

    def _operations(self, state: _GroupState, now: float) -> list[dict[str, Any]]:
        return [
            {
                "kind": "create",
                "instance": self._placeholder(c.token),
                "state": c.status.name.lower(),
                "attempts": c.attempts,
                "age_seconds": round(max(now - c.accepted_at, 0.0), 1),
            }
            for c in state.creations.values()
            if not c.cancelled
        ]

    # ------------------------------------------------------------------ helpers
    def _placeholder(self, token: str) -> str:
        return f"{self.driver.id_prefix}pending-{token}"

    def _resolve(self, state: _GroupState, node: NodeRef) -> tuple[Resolved, Machine | _Creation | None]:
        pid = node.provider_id
        if pid:
            if pid in state.machines:
                return Resolved.MACHINE, state.machines[pid]
            prefix = self._placeholder("")
            if pid.startswith(prefix):
                token = pid[len(prefix) :]
                if token in state.creations:
                    return Resolved.CREATION, state.creations[token]
                mid = state.resolved.get(token)
                if mid is not None:  # CA still knows the placeholder of a machine that has since appeared
                    if mid in state.machines:
                        return Resolved.MACHINE, state.machines[mid]
                    return Resolved.GONE, None
            if pid in state.tombstones:
                return Resolved.GONE, None
        else:  # no providerID: match the machine by its name (hostname)
            for m in state.machines.values():
                if node.name and m.name == node.name:
                    return Resolved.MACHINE, m
        # the driver's label fallback (SPC's stackpoint.io/instance_id when the id cannot be derived)
        mid = self.driver.machine_of(node)
        if mid is not None and mid in state.machines:
            return Resolved.MACHINE, state.machines[mid]
        return Resolved.FOREIGN, None

    # ------------------------------------------------------------------ journal
    def _journal_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for gid, s in self._groups.items():
            creations = [
                {"token": c.token, "sent": c.sent}
                for c in s.creations.values()
                if c.status != CreationStatus.FAILED and not c.cancelled
            ]
            deleting = [_machine_doc(m) for mid in s.deleting if (m := s.machines.get(mid)) is not None]
            if creations or deleting:
                doc[gid] = {"creations": creations, "deleting": deleting}
        return doc

    def _parse_journal(self, doc: dict[str, Any]) -> dict[str, Any]:
        entries: dict[str, dict[str, list[Any]]] = {}
        try:
            if doc.get("version") == 1:  # flat lists of {"group": ...} items
                for item in doc.get("creations", []):
                    entries.setdefault(str(item["group"]), {"creations": [], "deleting": []})
                    entries[str(item["group"])]["creations"].append((str(item["token"]), True))
                for item in doc.get("deleting", []):
                    entries.setdefault(str(item["group"]), {"creations": [], "deleting": []})
                    entries[str(item["group"])]["deleting"].append(_machine_from(item, str(item["group"])))
                return entries
            for gid, entry in dict(doc.get("groups", {})).items():
                entries[str(gid)] = {
                    "creations": [_creation_from(t) for t in entry.get("creations", [])],
                    "deleting": [_machine_from(m, str(gid)) for m in entry.get("deleting", [])],
                }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._journal._error(f"has a malformed entry ({type(exc).__name__}: {exc})") from None
        return entries

    def _restore(self, state: _GroupState, entry: Any) -> None:
        now = self._clock()
        for token, sent in entry["creations"]:
            if sent:  # it may have left before the restart: look the token up (or adopt) first
                creation = _Creation(
                    token, state.config.id, CreationStatus.UNKNOWN, sent=True, accepted_at=now
                )
                if not self.driver.create_carries_token:
                    creation.unknown_since = now
            else:  # never sent: send it
                creation = _Creation(token, state.config.id, accepted_at=now)
            state.creations[token] = creation
            self._submit_create(creation)
        for machine in entry["deleting"]:
            state.machines.setdefault(machine.id, machine)
            state.deleting[machine.id] = now
            self._submit_delete(machine)


def _creation_from(item: Any) -> tuple[str, bool]:
    """A journaled creation: (token, whether its request may have left); bare tokens are older
    journals, where every creation counts as possibly sent."""
    if isinstance(item, str):
        return item, True
    return str(item["token"]), bool(item["sent"])


def _machine_doc(m: Machine) -> dict[str, str]:
    return {"id": m.id, "name": m.name, "token": m.token, "handle": m.handle}


def _machine_from(item: Any, group: str) -> Machine:
    return Machine(
        str(item["id"]),
        group,
        InstanceState.DELETING,
        str(item.get("name", "")),
        str(item.get("token", "")),
        handle=str(item.get("handle", "")),
    )


def _natural(text: str) -> list[object]:
    """Sort key comparing digit runs as numbers: 'x://9' < 'x://10' (older ids sort first)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


__all__ = ["CreationStatus", "MachineProvider"]
