"""Commands on a tenant's documents, in-process over the data directory: ingest, search,
docs, delete, reindex and stats."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from index.access import KEEP, parse_access
from index.pipeline import IngestResult, discover
from index.service import IndexService
from serve.cli.common import (
    AttrOpt,
    JsonOpt,
    TenantOpt,
    _attributes,
    _print_json,
    _progress,
    _run,
    _table,
    err,
    out,
)
from serve.query.retrieval import SEARCH_MODES, SearchFilter, SearchParams, search_tenant

commands = typer.Typer()
AccessOpt = Annotated[
    str | None,
    typer.Option(
        help="Who may read the files: user:<name> and group:<name>, comma-separated ('tenant': "
        "everyone). Default: new files are the tenant's, stored ones keep their list."
    ),
]


@commands.command()
def ingest(
    ctx: typer.Context,
    tenant: TenantOpt,
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursive).")],
    attr: AttrOpt = None,
    access: AccessOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files into a tenant: added, replaced, unchanged (same content) or refused."""
    attributes = _attributes(attr)
    readers = _run(lambda: parse_access(access)) if access is not None else KEEP

    def work() -> list[IngestResult]:
        service: IndexService = ctx.obj.index()
        pipeline = service.pipeline(tenant)
        files, results = discover(paths)
        files = [dataclasses.replace(f, attributes=attributes, access=readers) for f in files]
        with _progress(transient=True) as progress:
            task = progress.add_task(f"ingesting into {tenant}", total=len(files))
            for result in pipeline.ingest(files):
                results.append(result)
                progress.advance(task)
        return results

    results = _run(work)
    summary = Counter(r.status for r in results)
    counts = {s: summary.get(s, 0) for s in ("added", "replaced", "unchanged", "refused")}
    if as_json:
        _print_json(
            {
                "tenant": tenant,
                "results": [r.json() for r in results],
                "summary": counts,
            }
        )
    else:
        for r in results:
            if r.status == "refused":
                err.print(f"refused  {r.source}: {r.reason}")
            elif r.status != "unchanged":
                flagged = (f"; {r.flagged} instruction-like passage(s) withheld from answers, "
                           "see `grounded docs`") if r.flagged else ""  # fmt: skip
                out.print(f"{r.status:<9}{r.file_name}  ({r.chunks} chunks, {r.doc_id}{flagged})")
        out.print(", ".join(f"{n} {s}" for s, n in counts.items()))
    if counts["refused"]:
        raise typer.Exit(1)


@commands.command()
def search(
    ctx: typer.Context,
    tenant: TenantOpt,
    query: Annotated[str, typer.Argument(help="The question or keywords.")],
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=1000, help="Results.")] = 5,
    mode: Annotated[str, typer.Option(help="dense | lexical | hybrid")] = "hybrid",
    file: Annotated[
        list[str] | None, typer.Option("--file", help="Only this file name (repeatable).")
    ] = None,
    doc: Annotated[
        list[str] | None, typer.Option("--doc", help="Only this doc id (repeatable).")
    ] = None,
    attr: AttrOpt = None,
    min_score: Annotated[float | None, typer.Option(help="Drop results scoring lower.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a tenant's chunks and print them with their sources."""
    search_filter = SearchFilter(
        doc_ids=tuple(doc) if doc else None,
        file_names=tuple(file) if file else None,
        attributes=_attributes(attr),
    )
    if mode not in SEARCH_MODES:
        raise typer.BadParameter(f"{mode!r}: use dense, lexical or hybrid", param_hint="--mode")

    def work():
        service: IndexService = ctx.obj.index()
        settings = ctx.obj.config.query  # fusion as configured (benchmarks/results/retrieval.md)
        params = SearchParams(mode, settings.fusion, settings.dense_weight, settings.candidates,
                              search_filter, min_score)  # fmt: skip
        return search_tenant(service, tenant, query, k, params)

    hits = _run(work)
    if as_json:
        rows = [
            {"rank": rank, "score": score, **dataclasses.asdict(hit)}
            for rank, (hit, score) in enumerate(hits, start=1)
        ]
        _print_json({"tenant": tenant, "query": query, "mode": mode, "results": rows})
        return
    if not hits:
        out.print("no results")
    for rank, (hit, score) in enumerate(hits, start=1):
        where = " > ".join(hit.heading_path) or "-"
        page = f", page {hit.page}" if hit.page else ""
        out.print(
            f"[bold]{rank}. {hit.file_name}[/bold]{page}  [dim]{where}  score {score:.4f}"
            f"  chars {hit.start}-{hit.end}[/dim]",
            markup=True,
        )
        snippet = " ".join(hit.text.split())
        out.print("   " + (snippet[:300] + " ..." if len(snippet) > 300 else snippet))


@commands.command()
def docs(ctx: typer.Context, tenant: TenantOpt, as_json: JsonOpt = False) -> None:
    """List a tenant's documents."""
    shard = _run(lambda: ctx.obj.index().shard(tenant))
    records = shard.list_documents()
    if as_json:
        _print_json({"tenant": tenant, "documents": [dataclasses.asdict(r) for r in records]})
        return
    table = _table("doc id", "file", "type", "version", "chunks", "flagged", "readers",
                   "updated", whole=("doc id",))  # fmt: skip
    for r in records:
        readers = ", ".join(r.access) if r.access else "tenant"
        table.add_row(r.doc_id, r.file_name, r.media_type, str(r.version), str(r.chunk_count),
                      str(len(r.flagged)), readers, r.updated_at)  # fmt: skip
    out.print(table)
    for r in (r for r in records if r.flagged):
        text = shard.document_text(r.doc_id)
        err.print(f"{r.file_name}: withheld from answers as instruction-like text:")
        for start, end, reason in r.flagged:
            err.print(f"  [{start}:{end}] ({reason}) {text[start:end][:200]!r}")


@commands.command("access")
def set_access(
    ctx: typer.Context,
    tenant: TenantOpt,
    doc_id: Annotated[str, typer.Argument(help="Document id, as `grounded docs` lists it.")],
    readers: Annotated[
        str | None,
        typer.Argument(
            help="Who may read it: user:<name> and group:<name>, comma-separated; 'tenant' "
            "for everyone in the tenant. Without it, the current list is shown."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show or change who may read a document, from the next request on (nothing is
    embedded again). Keys read what is open to the tenant and what names their user or one
    of their groups (`grounded keys create --user --groups`); admin keys read everything."""

    def work():
        shard = ctx.obj.index().shard(tenant)
        if readers is not None:
            shard.set_access(doc_id, parse_access(readers))
        return shard.get_document(doc_id).access

    access = _run(work)
    if as_json:
        _print_json({"tenant": tenant, "doc_id": doc_id, "access": access})
    else:
        out.print(f"{doc_id}: " + (", ".join(access) if access else "the whole tenant"))


@commands.command()
def delete(
    ctx: typer.Context,
    tenant: TenantOpt,
    doc_id: Annotated[str, typer.Argument(help="Document id, as `grounded docs` lists it.")],
    as_json: JsonOpt = False,
) -> None:
    """Delete a document: its chunks are never retrieved again."""

    def work() -> None:
        shard = ctx.obj.index().shard(tenant)
        shard.delete_document(doc_id)
        shard.flush()

    _run(work)
    if as_json:
        _print_json({"tenant": tenant, "deleted": doc_id})
    else:
        out.print(f"deleted {doc_id}")


@commands.command()
def reindex(
    ctx: typer.Context,
    tenant: TenantOpt,
    embedder: Annotated[
        str | None,
        typer.Option(
            help="An embedder by name: default, or one of index.embedders "
            "(default: the one index.tenant_embedders gives the tenant)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-chunk and re-embed a tenant's stored text, moving it to its configured embedder.
    Readers (a running appliance too) keep searching the old vectors until the new ones
    replace them in one transaction."""

    def work() -> tuple[str, str, int, int]:
        service: IndexService = ctx.obj.index()
        old, new, chunks = service.reindex(tenant, embedder)
        return old, new, len(service.shard(tenant).list_documents()), chunks

    old, new, documents, chunks = _run(work)
    if as_json:
        _print_json({"tenant": tenant, "documents": documents, "chunks": chunks,
                     "embedder": new, "previous_embedder": old})  # fmt: skip
    else:
        out.print(f"reindexed {documents} documents into {chunks} chunks with {new} (was {old})")


@commands.command()
def stats(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="One tenant only.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Documents, chunks, vectors, index type and disk use per tenant."""

    def work():
        service: IndexService = ctx.obj.index()
        names = [tenant] if tenant else service.tenants.tenants()
        # adopt: a shard built by a model no longer configured is listed too (to be reindexed)
        stats = [service.shard(name, adopt=True).stats() for name in names]
        return stats, [service.embedders.model_id(service.config.embedder_name(n)) for n in names]

    rows, configured = _run(work)
    if as_json:
        tenants = [dataclasses.asdict(s) | {"configured_embedder": c}
                   for s, c in zip(rows, configured, strict=True)]  # fmt: skip
        _print_json({"data_dir": str(ctx.obj.config.data_dir), "tenants": tenants})
        return
    table = _table(
        "tenant",
        "documents",
        "chunks",
        "vectors",
        "index",
        "gen",
        "disk",
        "embedder",
        whole=("tenant",),
    )
    for s, wanted in zip(rows, configured, strict=True):
        embedder = s.manifest.embedder_model_id
        if wanted != embedder:  # the config moved the tenant: `reindex` completes the move
            embedder += f" (configured: {wanted or 'not installed'}; run `grounded reindex`)"
        table.add_row(
            s.tenant,
            str(s.documents),
            str(s.chunks),
            str(s.vectors),
            s.index_kind,
            str(s.generation),
            f"{s.disk_bytes / 1e6:.1f} MB",
            embedder,
        )
    out.print(table)
