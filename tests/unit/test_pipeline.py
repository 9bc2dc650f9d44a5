import sqlite3

import pytest

from index.config import IndexConfig, LoaderLimits
from index.pipeline import SourceFile, discover
from index.service import IndexService
from index.testing import HashingEmbedder
from tests.documents import encrypt, make_pdf

pytestmark = pytest.mark.unit


def counts(service: IndexService, tenant: str) -> tuple[int, int, int]:
    db = sqlite3.connect(service.shard(tenant).directory / "shard.sqlite3")
    return tuple(
        db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("documents", "chunks", "chunks_fts")
    )


def test_statuses_for_added_replaced_unchanged_and_refused(fake_service):
    pipeline = fake_service.pipeline("acme")
    list(pipeline.ingest([SourceFile.from_bytes(b"v1 text", "a.txt")]))
    results = list(
        pipeline.ingest([
            SourceFile.from_bytes(b"v2 text", "a.txt"),
            SourceFile.from_bytes(b"other text", "b.txt"),
            SourceFile.from_bytes(b"v2 text", "a.txt"),
            SourceFile.from_bytes(b"\x00\x01binary", "c.txt"),
            SourceFile.from_bytes(b"", "d.txt"),
        ])
    )  # fmt: skip
    by_name = {(r.file_name, r.status) for r in results}
    assert ("c.txt", "refused") in by_name and ("d.txt", "refused") in by_name
    assert ("b.txt", "added") in by_name
    assert ("a.txt", "replaced") in by_name
    refusal = next(r for r in results if r.file_name == "d.txt")
    assert "no extractable text" in refusal.reason


def test_a_file_read_by_an_older_loader_is_read_again_though_its_bytes_are_unchanged(
    fake_service, monkeypatch
):
    pipeline = fake_service.pipeline("acme")
    list(pipeline.ingest([SourceFile.from_bytes(b"v1 text", "a.txt")]))
    monkeypatch.setattr("index.pipeline.LOADER_VERSION", "a later one")
    [again] = pipeline.ingest([SourceFile.from_bytes(b"v1 text", "a.txt")])
    [third] = pipeline.ingest([SourceFile.from_bytes(b"v1 text", "a.txt")])
    assert (again.status, again.version) == ("replaced", 2)
    assert (third.status, third.version) == ("unchanged", 2)
    assert counts(fake_service, "acme") == (1, 1, 1)


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("locked.pdf", encrypt(make_pdf([[("H", "text")]])), "encrypted"),
        ("cut.pdf", make_pdf([[("H", "text")]])[:200], "damaged"),
        ("image.gif", b"GIF89a", "unsupported file type"),
        ("cut.png", b"\x89PNG\r\n", "not a PNG, JPEG or TIFF image"),
        ("long.txt", b"word. " * 5000, "limits.max_chunks"),
    ],
)
def test_refused_file_leaves_no_rows_and_keeps_other_documents(tmp_path, name, data, reason):
    config = IndexConfig(limits=LoaderLimits(max_chunks=5))
    service = IndexService(config, tmp_path, embedder=HashingEmbedder()).start()
    pipeline = service.pipeline("acme")
    list(pipeline.ingest([SourceFile.from_bytes(b"kept document", "kept.txt")]))
    before = counts(service, "acme")
    (result,) = list(pipeline.ingest([SourceFile.from_bytes(data, name)]))
    assert result.status == "refused" and reason in result.reason
    assert counts(service, "acme") == before == (1, 1, 1)
    assert service.shard("acme").search_lexical("kept", 5)[0].file_name == "kept.txt"
    service.close()


def test_a_refusal_of_a_known_document_keeps_its_previous_version(fake_service):
    pipeline = fake_service.pipeline("acme")
    list(pipeline.ingest([SourceFile.from_bytes(b"good version", "a.txt", source="s")]))
    (result,) = pipeline.ingest([SourceFile.from_bytes(b"\x00bad", "a.txt", source="s")])
    assert result.status == "refused"
    assert fake_service.shard("acme").search_lexical("good", 5)[0].text == "good version"


def test_discover_expands_folders_and_reports_missing_paths(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text("# A")
    (tmp_path / "docs" / "sub" / "b.txt").write_text("B")
    (tmp_path / "docs" / "image.gif").write_bytes(b"GIF89a")
    (tmp_path / "docs" / ".hidden.txt").write_text("secret")
    (tmp_path / "explicit.gif").write_bytes(b"GIF89a")
    files, missing = discover(
        [tmp_path / "docs", tmp_path / "docs" / "a.md", tmp_path / "explicit.gif", tmp_path / "no"]
    )
    assert sorted(f.file_name for f in files) == ["a.md", "b.txt", "explicit.gif"]
    assert [(m.file_name, m.status, m.reason) for m in missing] == [
        ("no", "refused", "no such file")
    ]


def test_batches_write_every_document_once(fake_service):
    pipeline = fake_service.pipeline("acme")
    pipeline.batch_chunks = 3
    sources = [SourceFile.from_bytes(f"doc number {i}".encode(), f"{i}.txt") for i in range(10)]
    results = list(pipeline.ingest(sources))
    assert [r.status for r in results] == ["added"] * 10
    assert counts(fake_service, "acme") == (10, 10, 10)


def test_a_scan_deleted_while_it_is_read_stops_and_leaves_nothing(fake_service):
    from tests.documents import scanned_pdf

    pipeline = fake_service.pipeline("acme")
    pages = [["The first page of the delivery note."], ["The second page."]] * 2
    asked = []

    def cancelled(doc_id):
        asked.append(doc_id)
        return len(asked) > 1  # deleted once the first page has been read

    files = [SourceFile.from_bytes(b"kept text", "kept.txt"),
             SourceFile.from_bytes(scanned_pdf(pages), "note.pdf", doc_id="note")]  # fmt: skip
    results = {r.file_name: r for r in pipeline.ingest(files, cancelled)}
    kept, stopped = results["kept.txt"], results["note.pdf"]
    assert kept.status == "added"
    assert (stopped.status, stopped.refusal_status) == ("refused", 409)
    assert "deleted while it was being ingested" in stopped.reason
    assert set(asked) == {"note"} and len(asked) == 2  # not one page more
    assert counts(fake_service, "acme") == (1, 1, 1)
