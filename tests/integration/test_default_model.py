"""The shipped CPU config with its real default model (qwen2.5-1.5b) on the sample corpus: a
correct answer with a citation of the right document that passes the answer check, a correct
abstention, and the same answer withheld by the check against a source that does not state it.

The answer check's threshold is this model's own: qwen2.5-0.5b gives its right answer here about
0.34 and a source that does not state it 0.35 (no signal), so this test needs the 1.5B model.
The model is fetched into the repository's data directory the first time
(`grounded models fetch qwen2.5-1.5b`); later runs reuse it.
"""

from __future__ import annotations

import asyncio

import pytest

from index.loaders.ocr import OCR_MARK
from index.pipeline import SourceFile, discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import MODELS, fetch, models_dir
from serve.query.check import AnswerCheck
from serve.query.gate import NOT_FOUND
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.prompt import Source
from serve.query.retrieval import LocalSearcher
from tests.conftest import CORPUS, REPO, with_judge
from tests.documents import format_files

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def model_folder():
    data_dir = REPO / "data"
    name = "qwen2.5-1.5b"
    folder = models_dir(data_dir) / name
    if not (folder / "config.json").is_file():
        fetch(name, data_dir)
    assert MODELS[name].gguf_sha256  # fetched only after its hash matched
    return folder


@pytest.fixture(scope="module")
def engine(model_folder):
    """One engine for the module's tests (starting the 1.5B model costs tens of seconds), on
    one event loop, which its background tasks live on: ``run(coroutine)`` runs on it."""
    config = load_config(REPO / "configs" / "cpu.yaml")
    generator_config = config.generator.model_copy(update={"model": str(model_folder)})
    loop = asyncio.new_event_loop()

    async def start():
        return VllmGenerator(generator_config).start()

    generator = loop.run_until_complete(start())
    try:
        yield generator, loop.run_until_complete
    finally:
        generator.shutdown()
        pending = asyncio.all_tasks(loop)  # the engine's output handler, after its shutdown
        for task in pending:
            task.cancel()
        if pending:  # gather() of nothing needs a current loop, which `asyncio.run` unset
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


async def ask_at_once(pipeline, asks, max_tokens):
    """{question: answer} for (tenant, question) pairs asked together, as concurrent users
    are: the engine batches their generation (on 2 cores about twice as fast as in turn)."""
    answers = await asyncio.gather(
        *(pipeline.answer(tenant, q, max_tokens=max_tokens) for tenant, q in asks)
    )
    return {q: answer for (_, q), answer in zip(asks, answers, strict=True)}


@pytest.fixture(scope="module")
def demo(engine, tmp_path_factory, minilm):
    """Every `make demo` question asked at once over the sample corpus, as serve/ops/demo.py asks
    them, with the shipped config: (config, pipeline, {question: answer}). Asked once for the
    module's tests (each answer of the 1.5B model costs seconds of both cores)."""
    from serve.ops.demo import QUESTIONS

    data_dir = tmp_path_factory.mktemp("demo")
    config = with_judge(load_config(REPO / "configs" / "cpu.yaml", data_dir=data_dir))
    service = IndexService(config.index, data_dir, embedder=minilm).start()
    for tenant in QUESTIONS:
        files, _ = discover([CORPUS / tenant])
        list(service.pipeline(tenant).ingest(files))
    generator, run = engine
    asks = [(tenant, q) for tenant, questions in QUESTIONS.items() for q in questions]
    pipeline = QueryPipeline(LocalSearcher(service), generator, config.query)
    answers = run(ask_at_once(pipeline, asks, max_tokens=160))  # as serve/ops/demo.py asks
    yield config, pipeline, answers
    service.close()


LEAVE = "How many days of annual leave do employees get, and how many can be carried over?"
ABSENT = "Who won the 1998 football world cup?"


def test_default_model_answers_with_a_citation_and_abstains(engine, demo):
    config, pipeline, answers = demo
    generator, run = engine
    query = config.query
    assert query.min_answer_support is not None  # the shipped check
    leave, absent = answers[LEAVE], answers[ABSENT]
    assert not leave.abstained and "27" in leave.text, leave.text
    cited = {c.source.hit.file_name for c in leave.cited}
    assert "employee-handbook.md" in cited, (leave.text, cited)
    assert all(c.support >= 0.5 for c in leave.cited)
    if query.answer_format == "quoted":  # the shipped default: a checked quote
        (cited,) = leave.cited
        assert cited.verified and cited.quote and cited.quote in cited.source.hit.text
        assert leave.text.endswith(f"[{cited.source.number}]")
    assert absent.abstained and absent.text == NOT_FOUND["en"] and absent.cited == ()
    assert leave.answer_support >= query.min_answer_support  # the check ran, and passed

    # The check itself: the same answer against the source that states it and one that does not
    question = "How many days of paid annual leave do employees get per year?"

    async def supports():
        check = AnswerCheck(generator, query.min_answer_support)
        own = next(s for s in leave.sources if "27" in s.hit.text)
        hits = await pipeline.retrieve("acme", "GX-4200 safety", QueryOptions(top_k=5, gate=False))
        other = Source(own.number, next(h for h in hits if "27" not in h.text))
        return [await check.support(check.prompt(question, "27 days", source), "test")
                for source in (own, other)]  # fmt: skip

    own_support, other_support = run(supports())
    assert own_support >= query.min_answer_support > other_support, (own_support, other_support)


# What each `make demo` question must be answered with (any one of the alternatives of every
# group), or None: "not found". A question added to the demo needs its line here.
DEMO_ANSWERS = {
    "How many days of annual leave do employees get, and how many can be carried over?":
        [("27",), ("5", "five")],
    "What power supply does the GX-4200 controller need?": [("200",), ("240",)],
    "Combien de jours de télétravail par semaine sont autorisés ?": [("deux", "2")],
    "Who won the 1998 football world cup?": None,
    "Quel est le numéro du contrat de maintenance et sa durée ?":
        [("44-A/2024",), ("trois ans", "3 ans")],
    "How many large cardboard boxes are in stock in Rotterdam?": [("1450", "1,450")],
    "When does the Lyon depot open?": [("March 2027",)],
    "How many pallets of cardboard boxes came with delivery note DN-20931?": [("14",)],
}  # fmt: skip


# Demo questions that qwen2.5-1.5b answers wrongly on some runs, which the answer check then
# withholds ("not found"): asked alone after a run that left its prompt cached, the stock
# question was answered with the delivery note's 14 pallets (P(yes) 0.53, the CI failure of
# 0c00b1f); batched, 1450 from the workbook (0.76): `python -m benchmarks.experiments.demo_flip`.
# A second try without the cited source was measured and not adopted
# (benchmarks/results/answer-check.md, "A second try").
AT_THE_MODELS_LIMIT = {"How many large cardboard boxes are in stock in Rotterdam?"}


def test_every_demo_question_is_answered_right_and_cited(demo):
    from serve.ops.demo import QUESTIONS

    assert {q for questions in QUESTIONS.values() for q in questions} == set(DEMO_ANSWERS)
    config, _, answers = demo
    for question, expected in DEMO_ANSWERS.items():
        answer = answers[question]
        if expected is None:
            assert answer.abstained and answer.cited == (), (question, answer.text)
            continue
        support = answer.answer_support  # None: the gate or the model said "not found"
        if answer.abstained and question in AT_THE_MODELS_LIMIT:  # never a wrong answer
            assert support is not None and support < config.query.min_answer_support
            continue
        text = answer.text.casefold()
        assert not answer.abstained, (question, answer.text, support)
        assert all(any(a.casefold() in text for a in group) for group in expected), answer.text
        assert answer.cited and all(c.verified for c in answer.cited), (question, answer.cited)
        assert text.endswith("]")  # the citation marker, after a verified quote


# question: (the file it is answered from, what the answer says, where the citation points)
OFFICE_QUESTIONS = {
    "Until which year does the Osprey site lease run?": ("lease.docx", "2031", None),
    "When does the Falcon release ship?": ("roadmap.pptx", "2027", 2),
    "What is the capacity of model GX-42?": ("capacity.xlsx", "82", None),
    "Who manages the South depot?": ("depots.csv", "Karl Berg", None),
    "When does the dock door technician come?": ("visit.eml", "Thursday", None),
    "How many pallets came with delivery note DN-77120?": ("delivery-scan.pdf", "9", 1),
    "What is the price of model TR-7?": ("prices.pdf", "377", 1),
    "Where do we meet for the fire drill?": ("whiteboard.png", "assembly point C", 1),
}


def test_every_format_is_answered_and_cited_with_its_place(engine, tmp_path, minilm):
    config = with_judge(load_config(REPO / "configs" / "cpu.yaml", data_dir=tmp_path))
    service = IndexService(config.index, tmp_path, embedder=minilm).start()
    sources = [SourceFile.from_bytes(data, name) for name, data in format_files().items()]
    results = list(service.pipeline("office").ingest(sources))
    assert all(r.status == "added" for r in results), results
    generator, run = engine

    pipeline = QueryPipeline(LocalSearcher(service), generator, config.query)
    answers = run(ask_at_once(pipeline, [("office", q) for q in OFFICE_QUESTIONS], 80))
    service.close()
    for question, (file_name, says, page) in OFFICE_QUESTIONS.items():
        answer = answers[question]
        assert says in answer.text, (question, answer.text)
        [cited] = [c for c in answer.cited if c.source.hit.file_name == file_name]
        assert cited.verified, (question, cited)
        if page is not None:
            assert cited.source.hit.page == page  # the slide, or the PDF's or image's page
        if file_name in ("delivery-scan.pdf", "whiteboard.png"):
            assert cited.source.hit.heading_path[-1] == OCR_MARK
        if file_name == "capacity.xlsx":
            assert cited.source.hit.heading_path[0] == "Capacity"
            assert cited.source.hit.heading_path[1].startswith("rows ")
