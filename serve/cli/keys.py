"""``grounded keys``: create, list, limit and revoke API keys (each maps to one tenant)."""

from __future__ import annotations

from typing import Annotated

import typer

from index.errors import InvalidRequestError
from serve.cli.common import JsonOpt, TenantOpt, _fail, _print_json, _run, _table, err, out

commands = typer.Typer(help="API keys: each maps to one tenant and a set of scopes.")


def _key_row(key) -> dict:
    return {
        "id": key.id, "tenant": key.tenant, "scopes": list(key.scopes), "name": key.name,
        "created_at": key.created_at, "revoked_at": key.revoked_at, "budget": key.budget or {},
        "user": key.user, "groups": list(key.groups), "sources_in_text": key.sources_in_text,
    }  # fmt: skip


def _limits_text(limits: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (limits or {}).items()) or "-"


@commands.command("create")
def keys_create(
    ctx: typer.Context,
    tenant: TenantOpt,
    scopes: Annotated[
        str, typer.Option(help="Comma-separated: query, ingest, admin.")
    ] = "query,ingest",
    name: Annotated[str, typer.Option(help="A label for `keys list`.")] = "",
    user: Annotated[
        str | None, typer.Option(help="Who uses it: reads documents restricted to user:<this>.")
    ] = None,
    groups: Annotated[
        str, typer.Option(help="Comma-separated groups it reads as (documents for group:<g>).")
    ] = "",
    sources_in_text: Annotated[
        bool,
        typer.Option(
            "--sources-in-text",
            help="For a chat window (Open WebUI, LibreChat): its answers list their sources "
            "and verified quotes in the message text (docs/answers.md).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print it once (only its hash is stored). A key without the admin
    scope reads the tenant's documents open to everyone, and those restricted to its user or
    one of its groups (`grounded docs access`)."""
    from serve.identity.keys import key_store

    store = key_store(ctx.obj.config)
    key, secret = _run(lambda: store.create(
        tenant, scopes.split(","), name, user, groups.split(","), sources_in_text
    ))  # fmt: skip
    if as_json:
        _print_json({**_key_row(key), "key": secret})
        return
    out.print(secret)
    err.print(f"{key.id}: tenant {key.tenant}, scopes {', '.join(key.scopes)}. "
              "Store the key now: it cannot be shown again.")  # fmt: skip


@commands.command("list")
def keys_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Keys with their tenant, scopes and state (never the secrets)."""
    from serve.identity.keys import key_store

    keys = _run(lambda: key_store(ctx.obj.config).list())
    if as_json:
        _print_json({"keys": [_key_row(k) for k in keys]})
        return
    table = _table("id", "tenant", "scopes", "name", "state", "own budget")
    for key in keys:
        state = "active" if key.active else "revoked"
        table.add_row(key.id, key.tenant, ",".join(key.scopes), key.name, state,
                      _limits_text(key.budget))  # fmt: skip
    out.print(table)


LimitOpt = Annotated[int | None, typer.Option(min=1)]


@commands.command("budget")
def keys_budget(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), from `keys list`.")],
    max_prompt_tokens: LimitOpt = None,
    max_completion_tokens: LimitOpt = None,
    tokens_per_minute: LimitOpt = None,
    tokens_per_day: LimitOpt = None,
    max_concurrent: LimitOpt = None,
    clear: Annotated[bool, typer.Option(help="Remove the key's own limits first.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Set a key's own limits (they apply on top of its tenant's budget from the config);
    the limits not given are kept. The running appliance applies them from the next request."""
    from serve.accounting.budgets import Budget
    from serve.identity.keys import key_store

    store = key_store(ctx.obj.config)
    given = {
        "max_prompt_tokens": max_prompt_tokens, "max_completion_tokens": max_completion_tokens,
        "tokens_per_minute": tokens_per_minute, "tokens_per_day": tokens_per_day,
        "max_concurrent": max_concurrent,
    }  # fmt: skip
    given = {name: value for name, value in given.items() if value is not None}
    if not given and not clear:
        _fail(InvalidRequestError("give a limit (--tokens-per-minute N, ...) or --clear"))

    key = _run(lambda: store.set_budget(key_id, Budget(**given), keep=not clear))
    if as_json:
        _print_json(_key_row(key))
        return
    out.print(f"{key.id}: own budget {_limits_text(key.budget)}")


@commands.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), from `keys list`.")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key; the running appliance refuses it from its next request."""
    from serve.identity.keys import key_store

    key = _run(lambda: key_store(ctx.obj.config).revoke(key_id))
    if as_json:
        _print_json(_key_row(key))
        return
    out.print(f"{key.id} revoked")
