"""``grounded stores``: a tenant's vector stores, in-process over the data directory.

A vector store (OpenAI's, as ``/v1/vector_stores`` serves it) is a named set of the tenant's
documents: its file ids are the doc ids ``grounded docs`` lists, and each membership carries the
attributes that search filters test. Nothing is embedded again when a file joins a store. The
catalog is ``index/store/collections.py``; this module only translates it to commands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, TypeVar

import typer
from rich.markup import escape

from index.access import OPERATOR
from index.errors import DocumentNotFoundError
from index.store.collection_types import (
    VectorStoreFileRecord,
    VectorStoreNotFoundError,
    VectorStoreRecord,
)
from index.store.collections import VectorStoreCatalog
from index.store.paging import MAX_LIMIT, Page
from serve.cli.common import (
    AttrOpt,
    JsonOpt,
    TenantOpt,
    _attributes,
    _print_json,
    _run,
    _table,
    out,
)

commands = typer.Typer(
    help="Vector stores: named sets of a tenant's documents, each file with attributes that "
    "search filters test (what /v1/vector_stores serves).",
    no_args_is_help=True,
)

StoreArg = Annotated[str, typer.Argument(help="The store's id (vs_...), from `stores list`.")]
T = TypeVar("T")


def _catalog(ctx: typer.Context, tenant: str) -> VectorStoreCatalog:
    # an unknown tenant is an error
    return VectorStoreCatalog(ctx.obj.index().shard(tenant), OPERATOR)


def _every(list_page: Callable[[str | None], Page[T]]) -> list[T]:
    """Every item of a paginated catalog list, following its cursor."""
    items: list[T] = []
    after = None
    while True:
        page = list_page(after)
        items.extend(page.data)
        if not page.has_more:
            return items
        after = page.last_id


def _on_store(tenant: str, store_id: str, fn: Callable[[], T]) -> T:
    """``fn`` under ``_run``, with an unknown store id told in the CLI's terms (the catalog
    names the HTTP route that lists the ids)."""

    def work() -> T:
        try:
            return fn()
        except VectorStoreNotFoundError:
            raise VectorStoreNotFoundError(
                f"no vector store {store_id!r} in tenant {tenant!r}: "
                f"`grounded stores list --tenant {tenant}` lists its stores"
            ) from None

    return _run(work)


def _time(timestamp: int | None) -> str:
    return "-" if timestamp is None else datetime.fromtimestamp(timestamp, UTC).isoformat()


def _pairs(values: dict) -> str:  # attributes or metadata, as --attr takes them
    return ", ".join(f"{key}={value}" for key, value in values.items()) or "-"


@commands.command("list")
def stores_list(ctx: typer.Context, tenant: TenantOpt, as_json: JsonOpt = False) -> None:
    """A tenant's vector stores, oldest first, with their file counts."""

    def work() -> list[VectorStoreRecord]:
        catalog = _catalog(ctx, tenant)
        return _every(lambda after: catalog.list_stores(MAX_LIMIT, "asc", after))

    stores = _run(work)
    if as_json:
        _print_json({"tenant": tenant, "vector_stores": [dataclasses.asdict(s) for s in stores]})
        return
    table = _table("id", "name", "status", "files", "completed", "bytes", "last active",
                   whole=("id",))  # fmt: skip
    for s in stores:
        table.add_row(s.id, escape(s.name), s.status, str(s.file_counts.total),
                      str(s.file_counts.completed), str(s.usage_bytes),
                      _time(s.last_active_at))  # fmt: skip
    out.print(table)


@commands.command("create")
def stores_create(
    ctx: typer.Context,
    tenant: TenantOpt,
    name: Annotated[str, typer.Argument(help="The store's name.")],
    file: Annotated[
        list[str] | None,
        typer.Option("--file", help="A document id to attach, from `grounded docs` (repeatable)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a vector store, with its first files attached (all or nothing)."""
    store = _run(lambda: _catalog(ctx, tenant).create_store(name, file_ids=file or ()))
    if as_json:
        _print_json({"tenant": tenant, "vector_store": dataclasses.asdict(store)})
        return
    out.print(f"created {store.id} ({store.name!r}, {store.file_counts.total} files)", markup=False)


@commands.command("show")
def stores_show(
    ctx: typer.Context, tenant: TenantOpt, store_id: StoreArg, as_json: JsonOpt = False
) -> None:
    """A vector store: its state and file counts, then its files in the order attached.

    Each file with its status, size and attributes; --json gives the full records."""

    def work() -> tuple[VectorStoreRecord, list[VectorStoreFileRecord]]:
        catalog = _catalog(ctx, tenant)
        store = catalog.get_store(store_id)
        files = _every(lambda after: catalog.list_store_files(store_id, MAX_LIMIT, "asc", after))
        return store, files

    store, files = _on_store(tenant, store_id, work)
    if as_json:
        _print_json({"tenant": tenant, "vector_store": dataclasses.asdict(store),
                     "files": [dataclasses.asdict(f) for f in files]})  # fmt: skip
        return
    counts = store.file_counts
    expires = f", expires {_time(store.expires_at)}" if store.expires_at is not None else ""
    lines = [
        f"{store.id}  {store.name!r}  {store.status}  created {_time(store.created_at)}, "
        f"last active {_time(store.last_active_at)}{expires}",
        f"files: {counts.total} ({counts.completed} completed, {counts.in_progress} in progress, "
        f"{counts.failed} failed, {counts.cancelled} cancelled), {store.usage_bytes} bytes; "
        f"metadata {_pairs(store.metadata)}",
    ]
    for line in lines:
        out.print(line, markup=False)
    table = _table("file id", "file", "status", "bytes", "attributes", "added", whole=("file id",))
    for f in files:
        status = f"{f.status}: {f.last_error.message}" if f.last_error else f.status
        table.add_row(f.id, escape(f.file_name), escape(status), str(f.usage_bytes),
                      escape(_pairs(f.attributes)), _time(f.created_at))  # fmt: skip
    out.print(table)


@commands.command("add")
def stores_add(
    ctx: typer.Context,
    tenant: TenantOpt,
    store_id: StoreArg,
    file_ids: Annotated[
        list[str], typer.Argument(help="Document ids to attach, from `grounded docs`.")
    ],
    attr: AttrOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Attach documents to a vector store (all or nothing), with the --attr attributes.

    Values are strings. A file already in the store gets these in place of its old ones."""
    attributes = _attributes(attr)
    files = _on_store(
        tenant, store_id, lambda: _catalog(ctx, tenant).attach(store_id, file_ids, attributes)
    )
    if as_json:
        _print_json({"tenant": tenant, "vector_store_id": store_id,
                     "files": [dataclasses.asdict(f) for f in files]})  # fmt: skip
        return
    for f in files:
        out.print(f"added {f.id} ({f.file_name}, {f.status}) to {store_id}; attributes "
                  f"{_pairs(f.attributes)}", markup=False)  # fmt: skip


@commands.command("remove")
def stores_remove(
    ctx: typer.Context,
    tenant: TenantOpt,
    store_id: StoreArg,
    file_id: Annotated[str, typer.Argument(help="The document id, as `stores show` lists it.")],
    as_json: JsonOpt = False,
) -> None:
    """Remove a document from a vector store; it stays in the tenant and in other stores."""

    def work() -> None:
        try:
            _catalog(ctx, tenant).detach(store_id, file_id)
        except VectorStoreNotFoundError:
            raise
        except DocumentNotFoundError:
            raise DocumentNotFoundError(
                f"file {file_id!r} is not in vector store {store_id!r}: "
                f"`grounded stores show --tenant {tenant} {store_id}` lists its files"
            ) from None

    _on_store(tenant, store_id, work)
    if as_json:
        _print_json({"tenant": tenant, "vector_store_id": store_id, "removed": file_id})
    else:
        out.print(f"removed {file_id} from {store_id}")


@commands.command("delete")
def stores_delete(
    ctx: typer.Context, tenant: TenantOpt, store_id: StoreArg, as_json: JsonOpt = False
) -> None:
    """Delete a vector store; its documents stay in the tenant."""
    _on_store(tenant, store_id, lambda: _catalog(ctx, tenant).delete_store(store_id))
    if as_json:
        _print_json({"tenant": tenant, "deleted": store_id})
    else:
        out.print(f"deleted {store_id}")
