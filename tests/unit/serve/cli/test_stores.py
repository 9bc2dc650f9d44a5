"""`grounded stores` over a data directory built with the hashing fake embedder."""

import functools
import json

import pytest
from typer.testing import CliRunner

from index.config import IndexConfig
from index.pipeline import SourceFile
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.cli import app, common

pytestmark = pytest.mark.unit

FILES = {
    "pumps.md": "# Pumps\n\nThe GX-4200 pump runs at 3000 rpm.",
    "leave.txt": "Employees get 25 days of annual leave.",
    "safety.md": "# Safety\n\nWear goggles near the press.",
}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A data directory with one tenant of three documents; the CLI opens it with the same
    fake embedder (the shard refuses another)."""
    data_dir = tmp_path / "data"
    service = IndexService(IndexConfig(), data_dir, embedder=HashingEmbedder()).start()
    sources = [SourceFile.from_bytes(text.encode(), name) for name, text in FILES.items()]
    assert {r.status for r in service.pipeline("acme").ingest(sources)} == {"added"}
    service.close()
    monkeypatch.setattr(
        common, "IndexService", functools.partial(IndexService, embedder=HashingEmbedder())
    )
    return data_dir


def grounded(data_dir, *args: str, code: int = 0):
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), *args])
    assert result.exit_code == code, result.output
    return result


def as_json(data_dir, *args: str) -> dict:
    return json.loads(grounded(data_dir, *args, "--json").stdout)


def doc_ids(data_dir) -> dict[str, str]:
    documents = as_json(data_dir, "docs", "-t", "acme")["documents"]
    return {d["file_name"]: d["doc_id"] for d in documents}


def test_a_store_is_created_filled_listed_shown_emptied_and_deleted(data_dir):
    ids = doc_ids(data_dir)
    pumps, leave, safety = ids["pumps.md"], ids["leave.txt"], ids["safety.md"]

    created = as_json(data_dir, "stores", "create", "-t", "acme", "manuals", "--file", pumps)
    store = created["vector_store"]
    assert created["tenant"] == "acme"
    assert store["id"].startswith("vs_") and store["name"] == "manuals"
    assert store["file_counts"] == {"in_progress": 0, "completed": 1, "failed": 0,
                                    "cancelled": 0, "total": 1}  # fmt: skip
    store_id = store["id"]

    added = as_json(data_dir, "stores", "add", "-t", "acme", store_id, leave, safety,
                    "--attr", "team=ops", "--attr", "year = 2024")  # fmt: skip
    assert [f["id"] for f in added["files"]] == [leave, safety]
    assert all(f["attributes"] == {"team": "ops", "year": "2024"} for f in added["files"])
    assert {f["file_name"] for f in added["files"]} == {"leave.txt", "safety.md"}

    [listed] = as_json(data_dir, "stores", "list", "-t", "acme")["vector_stores"]
    assert listed["id"] == store_id and listed["file_counts"]["total"] == 3

    shown = as_json(data_dir, "stores", "show", "-t", "acme", store_id)
    assert shown["vector_store"]["file_counts"]["completed"] == 3
    assert [f["id"] for f in shown["files"]] == [pumps, leave, safety]  # attachment order
    assert shown["files"][0]["attributes"] == {}

    removed = as_json(data_dir, "stores", "remove", "-t", "acme", store_id, leave)
    assert removed == {"tenant": "acme", "vector_store_id": store_id, "removed": leave}
    shown = as_json(data_dir, "stores", "show", "-t", "acme", store_id)
    assert [f["id"] for f in shown["files"]] == [pumps, safety]

    deleted = as_json(data_dir, "stores", "delete", "-t", "acme", store_id)
    assert deleted == {"tenant": "acme", "deleted": store_id}
    assert as_json(data_dir, "stores", "list", "-t", "acme")["vector_stores"] == []
    assert set(doc_ids(data_dir).values()) == {pumps, leave, safety}  # documents stay


def test_the_human_output_names_stores_files_and_attributes(data_dir):
    ids = doc_ids(data_dir)
    made = grounded(data_dir, "stores", "create", "-t", "acme", "hr [draft]", "--file",
                    ids["leave.txt"])  # fmt: skip
    store_id = made.stdout.split()[1]
    assert made.stdout == f"created {store_id} ('hr [draft]', 1 files)\n"  # not read as markup

    added = grounded(data_dir, "stores", "add", "-t", "acme", store_id, ids["pumps.md"],
                     "--attr", "kind=manual")  # fmt: skip
    assert added.stdout == (
        f"added {ids['pumps.md']} (pumps.md, completed) to {store_id}; attributes kind=manual\n"
    )

    listed = grounded(data_dir, "stores", "list", "-t", "acme").stdout
    assert store_id in listed  # ids are never wrapped; the other cells fold to the width

    shown = grounded(data_dir, "stores", "show", "-t", "acme", store_id).stdout.splitlines()
    assert shown[0].startswith(f"{store_id}  'hr [draft]'  completed  created ")
    assert shown[1].startswith("files: 2 (2 completed, 0 in progress, 0 failed, 0 cancelled)")
    assert [row.split()[1] for row in shown if "doc-" in row] == [ids["leave.txt"], ids["pumps.md"]]

    removed = grounded(data_dir, "stores", "remove", "-t", "acme", store_id, ids["leave.txt"])
    assert removed.stdout == f"removed {ids['leave.txt']} from {store_id}\n"
    deleted = grounded(data_dir, "stores", "delete", "-t", "acme", store_id)
    assert deleted.stdout == f"deleted {store_id}\n"


@pytest.mark.parametrize(
    "command",
    [("show",), ("delete",), ("add", "doc-x"), ("remove", "doc-x")],
    ids=lambda command: command[0],
)
def test_an_unknown_store_is_one_line_naming_the_list_command(data_dir, command):
    name, *rest = command
    result = grounded(data_dir, "stores", name, "-t", "acme", "vs_nope", *rest, code=1)
    assert result.stdout == ""
    assert result.stderr == (
        "error: no vector store 'vs_nope' in tenant 'acme': "
        "`grounded stores list --tenant acme` lists its stores\n"
    )


def test_a_file_that_is_not_a_member_is_refused_with_the_show_command(data_dir):
    store_id = as_json(data_dir, "stores", "create", "-t", "acme", "empty")["vector_store"]["id"]
    result = grounded(data_dir, "stores", "remove", "-t", "acme", store_id, "doc-x", code=1)
    assert result.stderr == (
        f"error: file 'doc-x' is not in vector store {store_id!r}: "
        f"`grounded stores show --tenant acme {store_id}` lists its files\n"
    )


def test_attaching_an_unknown_document_attaches_nothing(data_dir):
    ids = doc_ids(data_dir)
    store_id = as_json(data_dir, "stores", "create", "-t", "acme", "s")["vector_store"]["id"]
    result = grounded(data_dir, "stores", "add", "-t", "acme", store_id, ids["pumps.md"],
                      "doc-missing", code=1)  # fmt: skip
    assert result.stderr.startswith("error: no file 'doc-missing' in this tenant")
    assert len(result.stderr.splitlines()) == 1
    assert as_json(data_dir, "stores", "show", "-t", "acme", store_id)["files"] == []


def test_an_unknown_tenant_and_a_bad_attribute_are_refused(data_dir):
    unknown = grounded(data_dir, "stores", "list", "-t", "globex", code=1)
    assert unknown.stderr.startswith("error: tenant 'globex' has no documents yet")
    ids = doc_ids(data_dir)
    store_id = as_json(data_dir, "stores", "create", "-t", "acme", "s")["vector_store"]["id"]
    bad = grounded(data_dir, "stores", "add", "-t", "acme", store_id, ids["pumps.md"],
                   "--attr", "novalue", code=2)  # fmt: skip
    assert "'novalue': use KEY=VALUE" in bad.stderr
    assert as_json(data_dir, "stores", "show", "-t", "acme", store_id)["files"] == []


@pytest.mark.parametrize(
    "command",
    [("stores", "list", "-t", "acme"), ("docs", "-t", "acme"), ("ingest", "-t", "acme", ".")],
)
def test_with_several_nodes_the_shard_commands_point_at_the_api(data_dir, monkeypatch, command):
    """With state.url the shards are the Shards replicas' (serve/state/shard_owners.py): a copy in
    this process would miss their writes, and its writes would be lost to the other nodes."""
    monkeypatch.setenv("GROUNDED_STATE__URL", "postgresql://grounded@db.internal:5432/grounded")
    result = grounded(data_dir, *command, code=1)
    assert "shares state between nodes (state.url)" in result.output
    assert "POST /v1/files" in result.output
