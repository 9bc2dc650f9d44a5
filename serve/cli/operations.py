"""Commands that operate the appliance rather than a tenant's documents: check-config, usage,
backup, restore and up."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
import yaml

from index.errors import InvalidRequestError
from serve.cli.common import JsonOpt, _print_json, _run, _table, err, out
from serve.config import AppConfig

commands = typer.Typer()


@commands.command("check-config")
def check_config(
    path: Annotated[
        Path, typer.Argument(help="configs/cpu.yaml, configs/gpu.yaml, configs/serve.yaml, ...")
    ],
    gpus: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Check that the deployments' GPU shares fit on this many GPUs (default: the "
            "GPUs visible here, when there are any).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a config file and print the configuration it resolves to (defaults included,
    environment overrides applied), or the fields that are wrong and what they allow."""
    from serve.config import check_file

    if gpus is None:
        gpus = _visible_gpus() or None
        if gpus is None:
            err.print("GPU packing not checked: no GPU is visible here (--gpus N checks it)")
    resolved = _run(lambda: check_file(path, gpus))
    if as_json:
        _print_json(resolved)
        return
    out.print(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), end="",
              markup=False, highlight=False)  # fmt: skip
    fits = f" (the GPU shares fit on {gpus} GPU{'s' if gpus > 1 else ''})" if gpus else ""
    err.print(f"{path}: valid{fits}")


def _visible_gpus() -> int:
    """CUDA devices this process sees (0 without CUDA or without a CUDA build of torch)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_since(text: str, now: float) -> float:
    """``30m``, ``24h``, ``7d`` (ago), or an ISO 8601 date or time (UTC unless it says)."""
    import datetime as dt
    import re

    if match := re.fullmatch(r"\s*(\d+)\s*([mhd])\s*", text):
        amount, unit = int(match[1]), match[2]
        return now - amount * {"m": 60, "h": 3600, "d": 86_400}[unit]
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidRequestError(
            f"--since {text!r}: use a duration (30m, 24h, 7d) or an ISO date or time "
            "(2026-11-29, 2026-11-29T08:00, 2026-11-29T08:00+01:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


@commands.command()
def usage(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant.")] = None,
    since: Annotated[
        str | None, typer.Option(help="30m, 24h, 7d, or an ISO date/time (UTC); default: all.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Requests, tokens (prompt, cached, completion), abstentions, refusals by reason and the
    estimated cost, per tenant and key, from the appliance's usage ledger."""
    import time

    from serve.accounting.budgets import Ledger

    config: AppConfig = ctx.obj.config
    start = _run(lambda: parse_since(since, time.time())) if since else None
    if not config.state.url and not (config.data_dir / "usage.sqlite").exists():
        rows = []
    else:
        ledger = Ledger(config.data_dir, config.budgets, state=config.state)
        try:
            rows = ledger.usage(tenant, start)
        finally:
            ledger.close()
    currency = config.budgets.prices.currency
    if as_json:
        _print_json({"since": start, "currency": currency,
                     "usage": [dataclasses.asdict(r) for r in rows]})  # fmt: skip
        return
    if not rows:
        err.print("no requests recorded" + (f" since {since}" if since else ""))
        return
    table = _table("tenant", "key", "requests", "answered", "abstained", "refused", "embedded",
                   "prompt", "cached", "completion", f"cost ({currency})",
                   whole=("key",))  # fmt: skip
    for r in rows:
        refused = ", ".join(f"{n} {reason}" for reason, n in r.refused.items()) or "0"
        table.add_row(r.tenant, r.key_id, str(r.requests), str(r.answered), str(r.abstained),
                      refused, str(r.embedded), str(r.prompt_tokens), str(r.cached_tokens),
                      str(r.completion_tokens), f"{r.cost:.6f}")  # fmt: skip
    out.print(table)


@commands.command()
def audit(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant.")] = None,
    user: Annotated[
        str | None, typer.Option(help="Only this user (as keys and tokens name them), or key id.")
    ] = None,
    document: Annotated[
        str | None, typer.Option(help="Only entries that retrieved or cited this document id.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="30m, 24h, 7d, or an ISO date/time (UTC); default: all.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="An ISO date/time (UTC), or 30m, 24h ...")
    ] = None,
) -> None:
    """The audit trail as JSON lines, oldest first: who asked or read what (endpoint, question,
    the documents retrieved and cited, whether it abstained)."""
    import json
    import time

    from serve.identity.audit import DB_NAME, AuditLog

    config: AppConfig = ctx.obj.config
    now = time.time()
    start = _run(lambda: parse_since(since, now)) if since else None
    end = _run(lambda: parse_since(until, now)) if until else None
    if not config.state.url and not (config.data_dir / DB_NAME).exists():
        err.print("no audit entries recorded yet")
        return
    log = AuditLog(config.data_dir, config.audit, state=config.state)
    for entry in log.entries(tenant, user, document, start, end):
        print(json.dumps(entry, ensure_ascii=False))


@commands.command("backup")
def backup_command(
    ctx: typer.Context,
    dest: Annotated[Path, typer.Argument(help="A new or empty folder for the backup.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy every tenant's shard, the API keys and the usage ledger into DEST, consistently,
    while the appliance serves (SQLite's online backup). Models are named, not copied."""
    from serve.ops.backup import backup, models_in_use

    config: AppConfig = ctx.obj.config

    def report(entry) -> None:
        err.print(f"copied {entry.path} ({entry.size / 1e6:.1f} MB)")

    manifest = _run(lambda: backup(config.data_dir, dest, models=models_in_use(config),
                                   progress=None if as_json else report))  # fmt: skip
    if as_json:
        _print_json({"backup": str(dest), **manifest.model_dump(mode="json")})
        return
    tenants = ", ".join(f"{t.tenant} ({t.documents} documents)" for t in manifest.tenants)
    out.print(f"backed up into {dest}: tenants {tenants or 'none'}; {len(manifest.files)} files")
    if config.state.url:  # not in the data directory: the database server's own tools copy it
        err.print("the API keys, usage ledger, stored responses and audit trail are on the "
                  "PostgreSQL server of state.url, not in this backup: back that database up "
                  "with pg_dump")  # fmt: skip


@commands.command("restore")
def restore_command(
    ctx: typer.Context,
    src: Annotated[Path, typer.Argument(help="A folder written by `grounded backup`.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace the data directory's current state.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify a backup (checksums, SQLite integrity) and make it the data directory's state,
    all or nothing. Stop the appliance first."""
    from serve.ops.backup import restore

    result = _run(lambda: restore(src, ctx.obj.config.data_dir, force=force))
    replaced = str(result.replaced) if result.replaced else None
    if as_json:
        _print_json({"data_dir": str(result.data_dir), "replaced": replaced,
                     **result.manifest.model_dump(mode="json")})  # fmt: skip
        return
    tenants = ", ".join(t.tenant for t in result.manifest.tenants) or "none"
    out.print(f"restored {src} into {result.data_dir} (tenants: {tenants}); vector indexes are "
              "rebuilt when each shard is first opened")  # fmt: skip
    models = ", ".join(f"{role} {name}" for role, name in result.manifest.models.items() if name)
    if models:
        out.print(f"models the backed-up config used (backups hold none): {models}; "
                  "`grounded models list` shows which are installed here")  # fmt: skip
    if replaced:
        err.print(f"the previous state is kept in {replaced}: delete it once you have checked")


@commands.command()
def up(
    ctx: typer.Context,
    address: Annotated[
        str | None, typer.Option(help="Join this Ray cluster instead of starting one.")
    ] = None,
    dashboard: Annotated[bool, typer.Option(help="Start the Ray dashboard.")] = True,
) -> None:
    """Start the appliance (Ray, the deployments, the OpenAI-compatible API) and serve until
    Ctrl-C (or SIGTERM, as `docker stop` sends), which stops what this command started."""
    from serve.ops import up as appliance

    config: AppConfig = ctx.obj.config
    err.print("starting Ray and the Grounded application (the first start takes a minute)...")

    def ready(running: appliance.Running) -> None:
        out.print(f"API        {running.api_url}   (OpenAI-compatible; docs at "
                  f"{running.api_url.removesuffix('/v1')}/docs)")  # fmt: skip
        if running.dashboard_url:
            out.print(f"dashboard  {running.dashboard_url}")
        out.print(f"metrics    {running.metrics_url}")
        out.print(
            "keys       grounded keys create --tenant <tenant>   (Ctrl-C stops the appliance)"
        )

    _run(lambda: appliance.run_in_foreground(config, ready, address=address, dashboard=dashboard))
