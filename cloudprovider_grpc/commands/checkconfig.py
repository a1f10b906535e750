"""`check-config`: everything `serve` would check before it starts, then one read-only pass over the
cloud's API with the given credentials, so that "configuration OK" means `serve` will work.

The API pass is the listing `serve` itself makes on CA's first Refresh (the same code, through a
provider that never writes: DryRunGate, no journal), so the groups it reports are the groups `serve`
would offer, counted the same way. A refused token, a project or pool the token may not read, or a
backend's own extra check (Exoscale's instance quota) makes it fail with exit status 1 and the
cloud's answer. `--offline` skips the pass (validation only).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import ProviderError, did_you_mean
from cloudprovider_grpc.providers.driver import GroupConfig
from cloudprovider_grpc.providers.machinery.gate import DryRunGate
from cloudprovider_grpc.providers.registry import backend_module, build_provider

EXIT_OK = 0
#: the cloud refused the credentials, or a group cannot be listed: `serve` would not work
EXIT_API = 1


@dataclass
class Report:
    """What the check found: the groups `serve` would offer, report lines, and failures."""

    groups: list[Any] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def check(settings: Any, *, offline: bool) -> Report:
    """Build the provider as `serve` does (raising ConfigError for invalid input) and, unless
    `offline`, list the cloud once with the configured credentials."""
    # never written by a check: no journal, and a gate that refuses every write
    ctx = settings.provider_context(state_file=None, gate=DryRunGate())
    provider = build_provider(settings.provider, ctx)
    report = Report()
    try:
        if not offline:
            _ask_the_api(settings.provider, ctx, provider, report)
        report.groups = list(provider.node_groups())
    finally:
        provider.stop(timeout=0)
    return report


def _ask_the_api(name: str, ctx: Any, provider: Any, report: Report) -> None:
    try:
        provider.refresh()
    except ProviderError as exc:
        report.failures.append(f"the {name} API: {exc.message}")
        return
    unmatched = _unmatched_specs(name, ctx, provider, report)
    listing_errors: dict[str, str] = getattr(provider, "listing_errors", dict)()
    for gid, message in listing_errors.items():
        if gid not in unmatched:  # already reported, with a suggestion
            report.failures.append(f"node group {gid}: the {name} API: {message}")
    # a backend may add read-only checks of its own against its real cloud (Exoscale: max sizes
    # beyond the instance quota); lines starting with "error:" are failures
    backend_checks = getattr(backend_module(name), "check_config", None)
    if backend_checks is not None and not ctx.emulate and not listing_errors and not unmatched:
        for line in backend_checks(ctx, provider.driver):
            (report.failures if line.startswith("error:") else report.lines).append(
                line.removeprefix("error: ")
            )


def _unmatched_specs(name: str, ctx: Any, provider: Any, report: Report) -> set[str]:
    """Report every `--nodes` spec naming no group the cloud offers (by id or name), with the
    nearest name or the list of them: `serve` would run, but never manage the group meant.
    Returns the names reported."""
    driver = getattr(provider, "driver", None)
    if not ctx.nodes or driver is None:
        return set()
    try:
        offered: list[GroupConfig] | None = driver.offered_groups()
    except CloudError as exc:
        report.failures.append(f"the {name} API: {exc.message}")
        return set()
    if offered is None:  # `--nodes` defines this cloud's groups
        return set()
    known = {n for g in offered for n in (g.id, g.name) if n}
    unmatched: set[str] = set()
    for spec in ctx.nodes:
        if spec.name in known:
            continue
        unmatched.add(spec.name)
        names = sorted({g.name or g.id for g in offered})
        hint = did_you_mean(spec.name, known) or (
            f"; did you mean one of {', '.join(names)}?" if names else "; the cloud offers no group at all"
        )
        report.failures.append(
            f"--nodes {spec.min_size}:{spec.max_size}:{spec.name} names no node group the {name} API "
            f"lists (by id or name){hint}"
        )
    return unmatched


def run(settings: Any, *, offline: bool) -> int:
    """Print the check's outcome; the exit status (0 OK, 1 the cloud's API check failed)."""
    report = check(settings, offline=offline)
    for line in report.lines:
        print(line)
    if report.failures:
        for failure in report.failures:
            print(f"cloudprovider-grpc: check-config: {failure}", file=sys.stderr)
        print(
            f"configuration valid but the {settings.provider} API check failed: "
            f"{len(report.failures)} problem(s); `serve` would not work",
            file=sys.stderr,
        )
        return EXIT_API
    tls = "mTLS" if settings.tls.ca else "TLS" if settings.tls.enabled else "plaintext"
    groups = report.groups
    api = "not asked (--offline)" if offline else "listed with these credentials"
    print(
        f"configuration OK: provider {settings.provider}, {len(groups)} node group(s) "
        f"[{', '.join(f'{g.id} {g.min_size}..{g.max_size}' for g in groups)}], "
        f"gRPC {settings.address} ({tls}), "
        + (f"metrics {settings.metrics_address}" if settings.metrics_address else "metrics disabled")
        + f"; cloud API {api}"
    )
    return EXIT_OK
