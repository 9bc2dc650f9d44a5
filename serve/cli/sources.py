"""``grounded sources``: a tenant's documents kept in step with a folder (a local path or a
mounted share), in-process over the data directory (one node). The runs are
index/sources/sync.py; this module only translates them to commands."""

from __future__ import annotations

import functools
import time
from typing import Annotated

import typer

from index.sources import state
from index.sources.state import Declared
from index.sources.sync import due
from index.sources.sync import sync as run_source
from serve.cli.common import (
    JsonOpt,
    TenantOpt,
    _print_json,
    _progress,
    _run,
    _table,
    err,
    out,
)

commands = typer.Typer(
    help="Sources: keep a tenant's documents in step with a folder (new, changed, moved and "
    "deleted files; access lists from path rules).",
    no_args_is_help=True,
)
NameArg = Annotated[str, typer.Argument(help="The source's name (lowercase, - and _).")]


@commands.command("add")
def add(
    ctx: typer.Context,
    tenant: TenantOpt,
    name: Annotated[str, typer.Option("--name", help="What to call it (lowercase, - and _).")],
    location: Annotated[str, typer.Argument(help="kind:location, e.g. folder:/mnt/hr")],
    access: Annotated[
        str | None,
        typer.Option(
            "--access",
            help="Who reads its files where no rule says: principals "
            "(group:hr,user:ana) or 'tenant' (the default).",
        ),
    ] = None,
    rule: Annotated[
        list[str] | None,
        typer.Option(
            "--rule",
            help="glob=access, first match wins (repeatable): "
            "'hr/**=group:hr', 'public/**=tenant'.",
        ),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option("--every", help="How often it should run (10m, 1h)."),
    ] = None,
    access_from: Annotated[
        str | None,
        typer.Option(
            "--access-from",
            help="'posix': a folder's files readable by their owner, group and ACL "
            "entries (world-readable: the tenant), after the rules.",
        ),
    ] = None,
    name_map: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            help="principal=principal (repeatable): a POSIX name as the identity provider "
            "spells it, e.g. 'user:ana=user:ana@example.com'.",
        ),
    ] = None,
) -> None:
    """Declare a source; `grounded sources sync NAME` runs it."""
    if access_from not in (None, "posix"):
        raise typer.BadParameter("--access-from takes 'posix'", param_hint="--access-from")

    def work() -> Declared:
        shard = ctx.obj.index().shard(tenant, create=True)
        declared = state.checked(name, location, access=access, rules=rule or [], every=every,
                                 posix=access_from == "posix", names=name_map or [])  # fmt: skip
        state.add(shard, declared)
        return declared

    declared = _run(work)
    out.print(f"source {declared.name}: {declared.kind}:{declared.location}; run it with "
              f"`grounded sources sync --tenant {tenant} {declared.name}`")  # fmt: skip


@commands.command("list")
def list_sources(ctx: typer.Context, tenant: TenantOpt, as_json: JsonOpt = False) -> None:
    """Each source: where it reads, its files, its last run."""
    declared = _run(lambda: state.listed(ctx.obj.index().shard(tenant, create=True)))
    if as_json:
        _print_json([d.view() for d in declared])
        return
    table = _table("name", "source", "files", "every", "last run", "next run", whole=("name",))
    for d in declared:
        every = f"{d.every_s:g} s" if d.every_s else "on demand"
        table.add_row(d.name, f"{d.kind}:{d.location}", str(d.files), every,
                      _summary(d.last_run), _next(d))  # fmt: skip
    out.print(table)


def _next(declared: Declared) -> str:
    if declared.running is not None:
        return "running now"
    at = declared.view()["next_run_at"]
    if at is None:
        return "on demand"
    return "due now" if at <= time.time() else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def _summary(run: dict | None) -> str:
    if run is None:
        return "never"
    counts = ", ".join(f"{run[k]} {k}" for k in ("added", "changed", "moved", "access",
                                                  "deleted", "failed") if run[k])  # fmt: skip
    text = f"{counts or 'nothing changed'} in {run['seconds']:.1f} s"
    return f"stopped: {run['error']}" if run.get("error") else text


@commands.command("sync")
def sync(
    ctx: typer.Context,
    tenant: TenantOpt,
    name: NameArg,
    confirm_deletes: Annotated[
        bool,
        typer.Option(
            "--confirm-deletes",
            help="Delete even when the source lists far "
            "fewer files than it held (it was emptied on purpose).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run a source once: its new, changed, moved and deleted files, and access changes."""

    def work():
        service = ctx.obj.index()
        shard = service.shard(tenant, create=True)
        declared = state.get(shard, name)
        with _progress(transient=True) as progress:
            task = progress.add_task(f"syncing {name}", total=None)
            return run_source(shard, service.pipeline(tenant), declared,
                              confirm_deletes=confirm_deletes,
                              progress=lambda n: progress.advance(task, n))  # fmt: skip

    run = _run(work)
    if as_json:
        _print_json(run.json())
        return
    for path, reason in run.failures:
        out.print(f"failed   {path}: {reason}")
    out.print(f"{name}: {_summary(run.json())}; {run.unchanged} unchanged")


@commands.command("watch")
def watch(
    ctx: typer.Context,
    tenant: TenantOpt,
    once: Annotated[bool, typer.Option("--once", help="Run what is due, then stop.")] = False,
) -> None:
    """Run each of the tenant's sources whenever its --every interval has passed, until
    stopped (Ctrl-C); a run that fails is reported and tried again at its next time. Several
    watchers are safe: a source runs once at a time."""
    from index.errors import GroundedError

    while True:
        service = ctx.obj.index()
        shard = service.shard(tenant, create=True)
        declared = _run(functools.partial(state.listed, shard))
        now = time.time()
        for d in declared:
            if due(d, now) == 0:
                try:
                    run = run_source(shard, service.pipeline(tenant), d)
                    out.print(f"{d.name}: {_summary(run.json())}")
                except GroundedError as exc:
                    err.print(f"{d.name}: {exc.message}")
        if once:
            return
        waits = [due(d, time.time()) for d in declared]
        time.sleep(min([w for w in waits if w != float("inf")], default=60.0) or 1.0)


@commands.command("remove")
def remove(
    ctx: typer.Context,
    tenant: TenantOpt,
    name: NameArg,
    keep: Annotated[
        bool, typer.Option("--keep-documents", help="Keep its documents (as the tenant's).")
    ] = False,
) -> None:
    """Forget a source, and delete the documents it made (unless --keep-documents)."""

    count = _run(lambda: state.remove(ctx.obj.index().shard(tenant, create=True), name, keep))
    kept = "kept" if keep else "deleted"
    out.print(f"source {name} removed; its {count} documents {kept}")
