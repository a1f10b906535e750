"""`check-config`: everything `serve` would check before it starts, then one read-only pass over the
cloud's API with the given credentials, so that "configuration OK" means `serve` will work.

The API pass is the listing `serve` itself makes on CA's first Refresh (the same code, through a
provider that never writes: DryRunGate, no journal), so the groups it reports are the groups `serve`
would offer, counted the same way. A refused token, a project or pool the token may not read, or a
backend's own extra check (Exoscale's instance quota) makes it fail with exit status 1 and the
cloud's answer. `--offline` skips the pass (validation only). A `--nodes` spec or a `group_options`
entry that names no group the listing offers fails too, with the nearest name: `serve` would run,
but never apply it to the group meant.

After the listing, every group must have a template source: a template from the cloud's catalogue,
or a machine of its own CA can copy. A group with neither is a failure (exit status 1):
cluster-autoscaler can never scale it up from zero (1.29 and later skip it), and on 1.25-1.28 the
template error abandons every loop that needs it, so no group scales at all
(cluster-autoscaler-1.28.7 core/static_autoscaler.go:352-356). With `--autoscaler-flags` naming the
price expander, groups without a price are named: when no option of a scale-up can be priced, the
price expander picks none and CA makes no scale-up (cluster-autoscaler-1.36.1
expander/price/price.go:120-132, core/scaleup/orchestrator/orchestrator.go:1079-1084).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import NotImplementedByProvider, ProviderError, did_you_mean
from cloudprovider_grpc.grpcapi.template_sources import REMEDY, templateless
from cloudprovider_grpc.providers.contract import NodeRef
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


def check(settings: Any, *, offline: bool, price_expander: bool = False) -> Report:
    """Build the provider as `serve` does (raising ConfigError for invalid input) and, unless
    `offline`, list the cloud once with the configured credentials and check each group's template
    (and, with `price_expander`, its price)."""
    # never written by a check: no journal, and a gate that refuses every write
    ctx = settings.provider_context(state_file=None, gate=DryRunGate())
    provider = build_provider(settings.provider, ctx)
    report = Report()
    try:
        if not offline:
            _ask_the_api(settings.provider, ctx, provider, report)
        report.groups = list(provider.node_groups())
        if not offline and not report.failures:
            _templates_and_prices(provider, report, price_expander)
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
    _unmatched_group_options(name, ctx, provider, report)
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


def _unmatched_group_options(name: str, ctx: Any, provider: Any, report: Report) -> None:
    """Report every `group_options` entry naming no node group `serve` would offer (by id or name),
    with the nearest name: its options would apply to no group."""
    configs = getattr(provider, "group_configs", None)
    if not ctx.group_options or configs is None:
        return
    groups: list[GroupConfig] = configs()
    unmatched = ctx.group_options.unmatched(groups)
    known = {n for g in groups for n in (g.id, g.name) if n}
    names = sorted({g.name or g.id for g in groups})
    for ref in unmatched:
        hint = did_you_mean(ref, known) or (
            f"; the groups are {', '.join(names)}" if names else "; the cloud offers no group at all"
        )
        report.failures.append(
            f"group_options.{ref}: names no node group the {name} API lists (by id or name), so its "
            f"options apply to none{hint}"
        )


def _templates_and_prices(provider: Any, report: Report, price_expander: bool) -> None:
    """A failure for every group with no template and no machine to copy; with the price expander,
    one line naming the groups whose template node has no price."""
    start = datetime.now(UTC)
    unpriced = []
    missing = set(templateless(provider))
    for group in report.groups:
        if group.id in missing:
            report.failures.append(
                f"node group {group.id}: no template is known and it has no machine to copy, so "
                "cluster-autoscaler cannot scale it up from zero; on cluster-autoscaler 1.25 to 1.28 "
                f"no group scales while it has no node. To fix: {REMEDY}"
            )
            continue
        if price_expander:
            # priced as CA prices it: the sanitized template node, template-node-for-<group>-<suffix>
            template_node = NodeRef("", f"template-node-for-{group.id}-0", {}, {})
            try:
                provider.node_price(template_node, start, start + timedelta(hours=1))
            except NotImplementedByProvider:
                unpriced.append(group.id)
    if unpriced:
        report.lines.append(
            f"warning: no price is known for node group(s) {', '.join(unpriced)}: with --expander=price, "
            "cluster-autoscaler makes no scale-up at all when none of a scale-up's options can be priced, "
            "and never picks an unpriced group; add a fallback expander (--expander=price,least-waste) "
            "or give the groups a price"
        )


def run(settings: Any, *, offline: bool, autoscaler_flags: str | None = None) -> int:
    """Print the check's outcome; the exit status (0 OK, 1 the cloud's API check failed, or a group
    has no template source)."""
    report = check(settings, offline=offline, price_expander=_uses_price_expander(autoscaler_flags))
    for line in report.lines:
        print(line)
    if report.failures:
        for failure in report.failures:
            print(f"cloudprovider-grpc: check-config: {failure}", file=sys.stderr)
        print(
            f"configuration valid but the {settings.provider} API check failed: "
            f"{len(report.failures)} problem(s); `serve` would not work as cluster-autoscaler needs it",
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


def _uses_price_expander(flags: str | None) -> bool:
    """Whether cluster-autoscaler's flags (a file or the flags themselves, as `simulate` reads them)
    put the price expander in the chain."""
    if not flags:
        return False
    from cloudprovider_grpc.simulator.flags import parse_flags, read_flag_text

    options, _ = parse_flags(read_flag_text(flags))
    chain = str(options.get("expander", ""))
    return "price" in (name.strip() for name in chain.split(","))
