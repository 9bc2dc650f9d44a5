"""Commands that run the query path in-process (or against a running appliance): ask and
eval, and the machine-readable answer they print."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from index.errors import InvalidRequestError
from index.service import IndexService
from serve.cli.common import JsonOpt, TenantOpt, _fail, _print_json, _progress, _run, _table, out
from serve.config import AppConfig

commands = typer.Typer()


UserOpt = Annotated[
    str | None,
    typer.Option(help="As this user (the documents open to the tenant and restricted to it)."),
]
GroupsOpt = Annotated[str | None, typer.Option(help="Comma-separated groups (and --user).")]


def _as_identity(user: str | None, groups: str | None):
    """QueryOptions that search as ``user`` in ``groups`` (index/access.py); without either,
    as the operator: every document of the tenant."""
    from index.access import Reader, principals_of
    from serve.query.pipeline import QueryOptions
    from serve.query.retrieval import SearchFilter

    if user is None and groups is None:
        return QueryOptions()
    readers = principals_of(user, [g.strip() for g in (groups or "").split(",") if g.strip()])
    reader = Reader(f"user:{user}" if user else "operator", readers)
    return QueryOptions(search_filter=SearchFilter(readable_by=reader))


@contextlib.asynccontextmanager
async def _query_pipeline(ctx: typer.Context, tenant: str, generate: bool = True):
    """The in-process query path for one tenant; the vLLM engine starts only when needed
    (answers, or the generator reranker) and is shut down on the way out."""
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher

    config: AppConfig = ctx.obj.config
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO" if logging.root.level <= 20 else "ERROR")
    service: IndexService = ctx.obj.index()
    service.shard(tenant)  # an unknown tenant fails before the engine starts
    generators = {}  # every model of generator.models (the router chooses), or the one
    try:
        if generate or config.query.rerank.backend == "generator":
            for name, settings in config.generator.configs().items():
                model = resolve_model(settings.model, config.data_dir)
                generators[name] = VllmGenerator(settings.model_copy(update={"model": model}))
                generators[name].start()
        yield QueryPipeline(LocalSearcher(service), generators or None, config.query,
                            route=config.generator.route,
                            min_support=config.generator.check_thresholds())  # fmt: skip
    finally:
        for generator in generators.values():
            generator.shutdown()


@commands.command()
def ask(
    ctx: typer.Context,
    tenant: TenantOpt,
    question: Annotated[str, typer.Argument(help="The question.")],
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Answer length cap.")] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Print the answer as it is written.")
    ] = False,
    user: UserOpt = None,
    groups: GroupsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the tenant's documents, with checked citations. As the operator
    (every document of the tenant), or with --user/--groups as that identity: only the
    documents its access lists give it (README, "Who may see what")."""
    import asyncio

    from serve.query.pipeline import Answer

    live = stream and not as_json
    tokens = max_tokens or ctx.obj.config.generator.max_tokens
    options = _as_identity(user, groups)

    async def work() -> Answer:
        async with _query_pipeline(ctx, tenant) as pipeline:
            async for item in pipeline.stream(tenant, question, max_tokens=tokens,
                                              options=options):  # fmt: skip
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


@commands.command("eval")
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
    user: UserOpt = None,
    groups: GroupsOpt = None,
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
    if url and (user or groups):  # the key is the identity there
        raise typer.BadParameter("with --url, the key's own user and groups apply",
                                 param_hint="--user")  # fmt: skip

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
            evaluator = Evaluator(pipeline, tenant, not retrieval_only, _as_identity(user, groups))
            return await run_all(evaluator)

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
        "answer_support": answer.answer_support,
        "usage": dataclasses.asdict(answer.usage),
        "finish_reason": answer.finish_reason,
        "timings": answer.timings,
    }
