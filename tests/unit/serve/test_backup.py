import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from index.access import OPERATOR
from index.config import IndexConfig
from index.errors import DocumentNotFoundError
from index.pipeline import SourceFile
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.accounting.budgets import BudgetsConfig, Ledger
from serve.cli import app
from serve.identity.keys import KeyStore
from serve.ops.backup import MANIFEST, BackupError, backup, restore
from tests.conftest import REPO

pytestmark = pytest.mark.unit

DOCUMENTS = {
    "acme": {
        "pumps.md": "# Pumps\n\nThe GX-4200 pump runs at 3000 rpm.\n\n## Care\n\nOil the seals.",
        "leave.txt": "Employees get 25 days of annual leave.\n\nCarry-over ends in March.",
        "safety.md": "# Safety\n\nWear wrist seals and goggles near the press.",
    },
    "globex": {
        "turbines.txt": "Turbine blades are inspected every 400 hours.",
        "badges.md": "# Badges\n\nVisitors sign in at the front desk and wear a badge.",
    },
}
QUERIES = ("pump rpm", "annual leave", "wrist seals", "turbine inspection", "visitor badge")


def ingest(service: IndexService, tenant: str, files: dict[str, str]) -> None:
    sources = [SourceFile.from_bytes(text.encode(), name) for name, text in files.items()]
    assert {r.status for r in service.pipeline(tenant).ingest(sources)} == {"added"}


def populate(service: IndexService) -> tuple[Path, str]:
    """Two tenants, a key and a usage record; returns the data dir and the key's secret."""
    for tenant, files in DOCUMENTS.items():
        ingest(service, tenant, files)
    data_dir = service.tenants.data_dir
    _, secret = KeyStore(data_dir).create("acme", name="ops")
    ledger = Ledger(data_dir, BudgetsConfig())
    ledger.record("acme", "key_x", "answered", prompt=120, completion=30)
    ledger.close()
    return data_dir, secret


def searches(service: IndexService) -> dict:
    """Every document, and the dense and lexical hits (ids and scores) of each query."""
    found = {}
    for tenant in DOCUMENTS:
        shard = service.shard(tenant)
        found[tenant, "docs"] = shard.list_documents()
        for query in QUERIES:
            vector = service.embedder.embed_queries([query])
            found[tenant, query] = (shard.search_dense(vector, 5), shard.search_lexical(query, 5))
    return found


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def open_service(data_dir: Path) -> IndexService:
    return IndexService(IndexConfig(), data_dir, embedder=HashingEmbedder()).start()


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the writer"
        time.sleep(0.005)


def test_a_backup_taken_while_a_writer_ingests_holds_every_acknowledged_document(
    fake_service, tmp_path
):
    data_dir, _ = populate(fake_service)
    acknowledged: list[str] = []
    stop, failures = threading.Event(), []

    def writer() -> None:
        pipeline, number = fake_service.pipeline("acme"), 0
        try:
            while not stop.is_set():
                name = f"live-{number}.txt"
                source = SourceFile.from_bytes(f"live note {number} on gearbox oil".encode(), name)
                [result] = pipeline.ingest([source])
                assert result.status == "added"
                acknowledged.append(name)  # only once its transaction has committed
                number += 1
        except BaseException as exc:
            failures.append(exc)

    def interleave(_entry) -> None:  # more documents commit between the files being copied
        wanted = len(acknowledged) + 2
        wait_for(lambda: len(acknowledged) >= wanted)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(acknowledged) >= 3)
        before = set(acknowledged)
        # Committed rows still in the WAL: a copy of shard.sqlite3 alone would miss them.
        assert (data_dir / "tenants" / "acme" / "shard.sqlite3-wal").stat().st_size > 0
        manifest = backup(data_dir, tmp_path / "backup", progress=interleave)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures and not thread.is_alive()
    assert len(acknowledged) > len(before) + 2  # the writer kept going during the backup

    for entry in manifest.files:
        if entry.kind == "sqlite":
            db = sqlite3.connect(tmp_path / "backup" / entry.path)
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            db.close()
    restored = restore(tmp_path / "backup", tmp_path / "restored").data_dir
    service = open_service(restored)
    try:
        shard = service.shard("acme")
        names = {r.file_name for r in shard.list_documents()}
        assert set(DOCUMENTS["acme"]) | before <= names
        assert names <= set(DOCUMENTS["acme"]) | set(acknowledged)
        assert all(r.chunk_count > 0 for r in shard.list_documents())  # no half-written one
        summary = {t.tenant: t for t in manifest.tenants}
        assert summary["acme"].documents == len(names)
        stats = shard.stats()
        assert stats.vectors == stats.chunks == summary["acme"].chunks  # FAISS rebuilt
        newest = max(before, key=lambda n: int(n[5:-4]))
        vector = service.embedder.embed_queries([f"live note {newest[5:-4]} on gearbox oil"])
        assert shard.search_dense(vector, 1)[0].file_name == newest
    finally:
        service.close()


def test_a_restored_data_dir_searches_authenticates_and_accounts_as_before(fake_service, tmp_path):
    data_dir, secret = populate(fake_service)
    expected = searches(fake_service)
    manifest = backup(data_dir, tmp_path / "backup", models={"generator": "qwen2.5-0.5b"})
    assert [t.tenant for t in manifest.tenants] == ["acme", "globex"]
    assert manifest.models == {"generator": "qwen2.5-0.5b"}
    assert not list((tmp_path / "backup").rglob("*.faiss"))  # derived: rebuilt on open

    result = restore(tmp_path / "backup", tmp_path / "restored")
    assert result.replaced is None
    service = open_service(result.data_dir)
    try:
        assert searches(service) == expected
    finally:
        service.close()
    key = KeyStore(result.data_dir).authenticate(f"Bearer {secret}")
    assert (key.tenant, key.name) == ("acme", "ops")
    ledger = Ledger(result.data_dir, BudgetsConfig())
    [row] = ledger.usage()
    ledger.close()
    assert (row.tenant, row.answered, row.prompt_tokens, row.completion_tokens) == (
        "acme", 1, 120, 30,
    )  # fmt: skip


def test_vector_stores_and_stored_responses_come_back_with_a_restore(fake_service, tmp_path):
    """With the access lists, the stored responses' owners and the audit trail."""
    from index.store.collections import VectorStoreCatalog
    from serve.identity.audit import AuditConfig, AuditEntry, AuditLog
    from serve.state.response_store import ResponseStore

    data_dir, _ = populate(fake_service)
    shard = fake_service.shard("acme")
    [doc] = shard.list_documents()[:1]
    shard.set_access(doc.doc_id, ("group:hr",))
    store = VectorStoreCatalog(shard, OPERATOR).create_store(name="hr", file_ids=[doc.doc_id])
    answer = {"id": "resp_1", "created_at": 1, "output": []}
    ResponseStore(data_dir).save("acme", answer, [], [("user", "Leave?"), ("assistant", "27")],
                                 "user:hana")  # fmt: skip
    AuditLog(data_dir, AuditConfig()).append(AuditEntry("acme", "user:hana", "k", (), "files"))
    backup(data_dir, tmp_path / "backup")
    restored = restore(tmp_path / "backup", tmp_path / "restored").data_dir
    service = open_service(restored)
    try:
        again = VectorStoreCatalog(service.shard("acme"), OPERATOR).get_store(store.id)
        assert again.name == "hr" and again.file_counts.completed == 1
        assert service.shard("acme").get_document(doc.doc_id).access == ("group:hr",)
    finally:
        service.close()
    assert ResponseStore(restored).read("acme", None, "resp_1", "body")[0] == answer
    with pytest.raises(DocumentNotFoundError):  # still hana's alone
        ResponseStore(restored).read("acme", "key:other", "resp_1", "body")[0]
    assert [e["identity"] for e in AuditLog(restored, AuditConfig()).entries()] == ["user:hana"]
    history, _ = ResponseStore(restored).read("acme", None, "resp_1", "history")
    assert history == [["user", "Leave?"], ["assistant", "27"]]


def test_backup_refuses_a_destination_that_is_not_empty(fake_service, tmp_path):
    data_dir, _ = populate(fake_service)
    dest = tmp_path / "backup"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(BackupError, match="already exists and is not empty: give a new folder"):
        backup(data_dir, dest)
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]
    (dest / "notes.txt").unlink()
    backup(data_dir, dest)  # an existing empty folder is fine
    assert (dest / MANIFEST).is_file()


def test_backup_of_a_data_dir_without_state_says_what_to_check(tmp_path):
    with pytest.raises(BackupError, match=r"nothing to back up .* check --data-dir"):
        backup(tmp_path / "empty", tmp_path / "backup")
    assert not (tmp_path / "backup").exists()


def _set_manifest(backup_dir: Path, change) -> None:
    path = backup_dir / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _rehash(backup_dir: Path, relative: str) -> None:
    """Make the manifest agree with a file changed on purpose (to reach the later checks)."""
    digest = hashlib.sha256((backup_dir / relative).read_bytes()).hexdigest()

    def change(manifest):
        for entry in manifest["files"]:
            if entry["path"] == relative:
                entry["sha256"] = digest

    _set_manifest(backup_dir, change)


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_pages(backup_dir: Path) -> None:
    shard = backup_dir / "tenants" / "acme" / "shard.sqlite3"
    data = bytearray(shard.read_bytes())
    data[4096 * 2 : 4096 * 4] = b"\x07" * 8192  # two b-tree pages, the header left intact
    shard.write_bytes(bytes(data))
    _rehash(backup_dir, "tenants/acme/shard.sqlite3")


def _stale_lexical_index(backup_dir: Path) -> None:
    """A chunk deleted behind FTS5's back: SQLite's own check passes, FTS5's does not."""
    db = sqlite3.connect(backup_dir / "tenants" / "acme" / "shard.sqlite3")
    db.execute("DROP TRIGGER chunks_fts_delete")
    db.execute("DELETE FROM chunks WHERE id = (SELECT min(id) FROM chunks)")
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.commit()
    db.close()
    _rehash(backup_dir, "tenants/acme/shard.sqlite3")


def _bad_keys(backup_dir: Path) -> None:
    (backup_dir / "keys.sqlite").write_bytes(b"not a database at all" * 100)
    _rehash(backup_dir, "keys.sqlite")


def _outside(backup_dir: Path) -> None:
    def change(manifest):
        manifest["files"][0]["path"] = "../escaped.sqlite3"

    _set_manifest(backup_dir, change)


BAD_BACKUPS = {
    "no manifest (unfinished)": (
        lambda b: (b / MANIFEST).unlink(),
        "has no grounded-backup.json: it is not a Grounded backup, or the backup",
    ),
    "manifest not JSON": (lambda b: (b / MANIFEST).write_text("{"), "is not readable JSON"),
    "not a backup manifest": (
        lambda b: (b / MANIFEST).write_text('{"format": "other"}'),
        "is not a Grounded backup manifest",
    ),
    "newer format": (
        lambda b: _set_manifest(b, lambda m: m.update(format_version=2)),
        "format version 2, and this Grounded reads version 1: restore it with the Grounded",
    ),
    "malformed manifest": (
        lambda b: _set_manifest(b, lambda m: m.pop("files")),
        "is malformed \\(files: ",
    ),
    "path outside the data dir": (_outside, "unexpected file '../escaped.sqlite3'"),
    "tampered shard": (
        lambda b: _flip_byte(b / "tenants" / "acme" / "shard.sqlite3", 5000),
        "tenants/acme/shard.sqlite3 in .* does not match its checksum in the manifest",
    ),
    "missing file": (lambda b: (b / "usage.sqlite").unlink(), "usage.sqlite is missing from"),
    "damaged database, checksum matching": (_damage_pages, "acme/shard.sqlite3 .* is damaged"),
    "stale lexical index, checksum matching": (
        _stale_lexical_index,
        "acme/shard.sqlite3 .* is damaged or not a SQLite database",
    ),
    "unreadable keys, checksum matching": (_bad_keys, "keys.sqlite in .* not a SQLite database"),
}


@pytest.mark.parametrize("case", BAD_BACKUPS, ids=list(BAD_BACKUPS))
def test_a_bad_backup_is_refused_with_what_was_wrong_and_nothing_is_written(
    fake_service, tmp_path, case
):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    damage, message = BAD_BACKUPS[case]
    damage(tmp_path / "backup")
    target = tmp_path / "fresh"
    with pytest.raises(BackupError, match=message):
        restore(tmp_path / "backup", target)
    assert not target.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".fresh")]


def test_a_missing_backup_folder_is_refused(tmp_path):
    with pytest.raises(BackupError, match=r"no backup folder at .*nowhere: give the folder"):
        restore(tmp_path / "nowhere", tmp_path / "data")


def test_restore_refuses_to_replace_existing_state_without_force(fake_service, tmp_path):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    before = file_hashes(data_dir)
    with pytest.raises(BackupError, match=r"already holds 2 tenant shard.*add --force"):
        restore(tmp_path / "backup", data_dir)
    assert file_hashes(data_dir) == before


def _existing(tmp_path: Path) -> Path:
    """A data dir with other state than the backup's, and a fetched model."""
    other = open_service(tmp_path / "existing")
    ingest(other, "initech", {"tps.txt": "Cover sheets go on every TPS report."})
    other.close()
    KeyStore(tmp_path / "existing").create("initech")
    model = tmp_path / "existing" / "models" / "qwen2.5-0.5b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    return tmp_path / "existing"


def test_a_failed_forced_restore_leaves_the_existing_data_dir_untouched(fake_service, tmp_path):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    _flip_byte(tmp_path / "backup" / "keys.sqlite", 10)
    existing = _existing(tmp_path)
    before = file_hashes(existing)
    with pytest.raises(BackupError, match=r"keys.sqlite in .* does not match its checksum"):
        restore(tmp_path / "backup", existing, force=True)
    assert file_hashes(existing) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "data", "existing"]


def test_a_restore_that_fails_at_the_swap_puts_everything_back(fake_service, tmp_path, monkeypatch):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    existing = _existing(tmp_path)
    before = file_hashes(existing)
    rename = os.rename

    def failing_rename(source, target):
        if Path(target) == existing and ".restore-" in Path(source).name:
            raise OSError(28, "No space left on device")
        rename(source, target)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError, match="No space left"):
        restore(tmp_path / "backup", existing, force=True)
    monkeypatch.undo()
    assert file_hashes(existing) == before  # models/ moved back too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "data", "existing"]


def test_a_forced_restore_keeps_models_and_the_replaced_state_beside_it(fake_service, tmp_path):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    existing = _existing(tmp_path)
    old_state = file_hashes(existing)
    result = restore(tmp_path / "backup", existing, force=True)
    assert result.data_dir == existing.resolve()
    assert sorted(p.name for p in (existing / "tenants").iterdir()) == ["acme", "globex"]
    assert (existing / "models" / "qwen2.5-0.5b" / "config.json").is_file()
    assert result.replaced is not None and result.replaced.parent == existing.parent
    kept = file_hashes(result.replaced)
    assert kept == {k: v for k, v in old_state.items() if not k.startswith("models/")}
    assert "tenants/initech/shard.sqlite3" in kept


def test_a_data_dir_holding_only_fetched_models_is_restored_into_without_force(
    fake_service, tmp_path
):
    data_dir, _ = populate(fake_service)
    backup(data_dir, tmp_path / "backup")
    model = tmp_path / "machine" / "models" / "qwen2.5-0.5b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    result = restore(tmp_path / "backup", tmp_path / "machine")
    assert result.replaced is None
    assert (model / "config.json").is_file()
    assert (tmp_path / "machine" / "tenants" / "acme" / "shard.sqlite3").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "data", "machine"]


def test_the_cli_backs_up_restores_and_refuses_with_one_line_errors(fake_service, tmp_path):
    data_dir, _ = populate(fake_service)
    (data_dir / "models" / "qwen2.5-0.5b").mkdir(parents=True)
    (data_dir / "models" / "qwen2.5-0.5b" / "config.json").write_text("{}")
    runner, dest, fresh = CliRunner(), tmp_path / "backup", tmp_path / "fresh"

    made = runner.invoke(app, ["--data-dir", str(data_dir), "backup", str(dest)])
    assert made.exit_code == 0, made.output
    assert "acme (3 documents), globex (2 documents)" in made.stdout
    assert not (dest / "models").exists()

    again = runner.invoke(app, ["--data-dir", str(data_dir), "backup", str(dest)])
    assert again.exit_code == 1
    assert "error:" in again.stderr and "is not empty: give a new folder" in again.stderr

    done = runner.invoke(app, ["--data-dir", str(fresh), "restore", str(dest), "--json"])
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    assert [t["tenant"] for t in payload["tenants"]] == ["acme", "globex"]
    assert payload["models"]["generator"] == "qwen2.5-0.5b" and payload["replaced"] is None

    refused = runner.invoke(app, ["--data-dir", str(fresh), "restore", str(dest)])
    assert refused.exit_code == 1 and "add --force" in refused.stderr
    forced = runner.invoke(app, ["--data-dir", str(fresh), "restore", str(dest), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "the previous state is kept in" in forced.stderr


def test_the_backup_names_every_embedder_the_config_uses(tmp_path):
    from serve.config import load_config
    from serve.ops.backup import models_in_use

    config = load_config(REPO / "configs" / "cpu.yaml", data_dir=tmp_path)
    models = models_in_use(config)
    assert models["embedder"] == "all-MiniLM-L6-v2"
    assert models["embedder multilingual"] == "multilingual-e5-small"  # as `models fetch` knows it
    assert models["reranker"] == "ms-marco-minilm-l12"


def test_an_earlier_versions_key_file_is_backed_up_restored_and_then_imported(tmp_path):
    """A data directory whose keys are still in keys.json (not yet opened by this version):
    backed up as a file (checked to parse), restored, and imported when first opened."""
    old = tmp_path / "old"
    old.mkdir()
    key, secret = KeyStore(tmp_path / "made").create("acme", ["query"], name="ci")
    body = {"keys": [{**dataclasses.asdict(key), "scopes": list(key.scopes)}]}
    (old / "keys.json").write_text(json.dumps(body))
    manifest = backup(old, tmp_path / "backup")
    assert [(f.path, f.kind) for f in manifest.files] == [("keys.json", "file")]
    restored = restore(tmp_path / "backup", tmp_path / "restored").data_dir
    assert KeyStore(restored).authenticate(f"Bearer {secret}") == key
    assert (restored / "keys.json.imported").exists()
    (old / "keys.json").write_text('{"not": "keys"}')
    with pytest.raises(BackupError, match=r"keys.json of .* not a readable key file"):
        backup(old, tmp_path / "again")
