import asyncio
import json

import pytest

from index.errors import InvalidRequestError
from index.pipeline import SourceFile
from serve.eval.run import (
    EvalQuestion,
    Evaluator,
    QuestionResult,
    load_questions,
    markdown_report,
    summarize,
)
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.retrieval import LocalSearcher
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.unit

FILES = {
    "leave.txt": "Annual leave is 27 days per calendar year for every employee.",
    "pump.txt": "The pump needs oil every month and a new filter every year.",
}


@pytest.fixture
def service(fake_service):
    sources = [SourceFile.from_bytes(t.encode(), n) for n, t in FILES.items()]
    list(fake_service.pipeline("acme").ingest(sources))
    return fake_service


def write(tmp_path, *lines):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_questions_are_validated_line_by_line(tmp_path):
    good = json.dumps({"question": "annual leave?", "relevant_files": ["leave.txt"]})
    loaded = load_questions(write(tmp_path, good, "", json.dumps({"question": "x", "id": "b"})))
    assert [q.id for q in loaded] == ["q1", "b"]
    with pytest.raises(InvalidRequestError, match=r"q\.jsonl:2: not a valid question"):
        load_questions(write(tmp_path, good, "{not json"))
    with pytest.raises(InvalidRequestError, match="question: String should have at least"):
        load_questions(write(tmp_path, json.dumps({"question": ""})))
    with pytest.raises(InvalidRequestError, match="cannot have relevant documents"):
        load_questions(
            write(
                tmp_path,
                json.dumps({"question": "q", "answerable": False, "relevant_files": ["a"]}),
            )
        )
    with pytest.raises(InvalidRequestError, match="holds no questions"):
        load_questions(write(tmp_path, ""))
    with pytest.raises(InvalidRequestError, match="cannot read questions file"):
        load_questions(tmp_path / "missing.jsonl")


def test_evaluator_measures_retrieval_answers_and_abstentions(service):
    generator = ScriptedGenerator("Annual leave is 27 days per calendar year [1] [5].")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.0))
    evaluator = Evaluator(pipeline, "acme")
    answerable = EvalQuestion(
        question="annual leave days", id="a", relevant_files=["leave.txt"],
        answer_contains=["27 days"],
    )  # fmt: skip
    result = asyncio.run(evaluator.evaluate(answerable))
    assert result.ranked[0] == "leave.txt"
    assert result.retrieval["recall@1"] == 1.0 and result.retrieval["mrr@10"] == 1.0
    assert result.abstained is False and result.matched is True
    assert result.citations == 1
    assert result.model_citations == 2 and result.model_citations_invalid == 1  # the [5]
    assert result.supported_share == 1.0

    strict = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.99))
    unanswerable = EvalQuestion(question="world cup winner", id="u", answerable=False)
    missed = asyncio.run(Evaluator(strict, "acme").evaluate(unanswerable))
    assert missed.abstained is True and missed.retrieval == {} and missed.citations == 0


def test_retrieval_only_evaluation_never_calls_the_generator(service):
    generator = ScriptedGenerator("unused")
    evaluator = Evaluator(
        QueryPipeline(LocalSearcher(service), generator, QueryConfig()), "acme", answers=False
    )
    question = EvalQuestion(question="pump oil filter", relevant_files=["pump.txt"])
    result = asyncio.run(evaluator.evaluate(question))
    assert result.retrieval["recall@5"] == 1.0 and result.answer is None
    assert generator.calls == []


def test_summary_by_hand():
    results = [
        QuestionResult("1", "q", True, {"recall@1": 1.0, "recall@5": 1.0, "recall@10": 1.0,
                                        "mrr@10": 1.0, "ndcg@10": 1.0},
                       abstained=False, citations=2, model_citations=1, inferred_citations=1,
                       supported_share=1.0, matched=True, timings={"total": 2.0}),
        QuestionResult("2", "q", True, {"recall@1": 0.0, "recall@5": 1.0, "recall@10": 1.0,
                                        "mrr@10": 0.5, "ndcg@10": 0.63},
                       abstained=True, matched=False, timings={"total": 1.0}),
        QuestionResult("3", "q", False, abstained=True, timings={"total": 0.5}),
        QuestionResult("4", "q", False, abstained=False, citations=1, model_citations=2,
                       model_citations_invalid=1, supported_share=0.0, timings={"total": 4.0}),
    ]  # fmt: skip
    summary = summarize(results)
    assert summary["recall@1"] == 0.5 and summary["mrr@10"] == 0.75
    assert summary["abstention_accuracy"] == 0.5  # 1 of 2 unanswerable
    assert summary["false_abstention_rate"] == 0.5  # 1 of 2 answerable
    assert summary["decision_accuracy"] == 0.5  # questions 1 and 3 decided right
    assert summary["citation_validity"] == pytest.approx(2 / 3)  # 3 written, 1 invalid
    assert summary["model_citations"] == 3
    assert summary["inferred_citation_share"] == pytest.approx(1 / 3)
    assert summary["faithfulness_proxy"] == 0.5
    assert summary["answer_match"] == 0.5
    assert summary["total_s_p50"] == 1.0 and summary["total_s_p95"] == 4.0
    report = markdown_report("Eval", summary, results, "grounded eval")
    assert "| recall@1 | 0.500 |" in report and report.count("\n| ") >= 4 + len(summary)


def test_an_evaluation_as_an_identity_never_ranks_what_it_may_not_read(service):
    from index.access import Reader
    from serve.query.pipeline import QueryOptions
    from serve.query.retrieval import SearchFilter

    shard = service.shard("acme")
    [leave] = [d.doc_id for d in shard.list_documents() if d.file_name == "leave.txt"]
    shard.set_access(leave, ("group:hr",))
    generator = ScriptedGenerator("Annual leave is 27 days per calendar year [1].")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.0))
    question = EvalQuestion(question="annual leave days", id="a", relevant_files=["leave.txt"])
    for readers, ranked in ((frozenset({"group:sales"}), False), (frozenset({"group:hr"}), True)):
        options = QueryOptions(search_filter=SearchFilter(readable_by=Reader("user:u", readers)))
        result = asyncio.run(Evaluator(pipeline, "acme", True, options).evaluate(question))
        assert ("leave.txt" in result.ranked) is ranked
        assert result.retrieval["recall@10"] == (1.0 if ranked else 0.0)
