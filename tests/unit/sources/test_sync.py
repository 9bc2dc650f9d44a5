"""A folder source kept in step (index/sources/): one run after each change at the source, and
the tenant's documents, access lists and searches are the source's as it is now."""

from __future__ import annotations

import os
import shutil

import pytest

from index.access import OPERATOR, Reader
from index.errors import ConflictError
from index.pipeline import SourceFile
from index.sources import state
from index.sources.folder import FolderSource
from index.sources.kinds import SourceUnreachableError
from index.sources.rules import AccessRules
from index.sources.state import Declared
from index.sources.sync import SourceShrankError, sync
from serve.query.retrieval import SearchFilter, SearchParams, search_tenant

pytestmark = pytest.mark.unit
TENANT = "acme"
HR = Reader("user:hana", frozenset({"user:hana", "group:hr"}))
ENG = Reader("user:eli", frozenset({"user:eli", "group:eng"}))


@pytest.fixture
def world(fake_service, tmp_path):
    """The tenant's shard, a folder, and a source over it: hr/ for HR, the rest the tenant's."""
    folder = tmp_path / "share"
    (folder / "hr").mkdir(parents=True)
    (folder / "public").mkdir()
    shard = fake_service.shard(TENANT, create=True)
    declared = Declared("share", "folder", str(folder), AccessRules.parse(None, ["hr/**=group:hr"]))
    state.add(shard, declared)
    reads = []

    def run(**kwargs):
        source = FolderSource(folder)
        read = source.read

        def counted(path):
            reads.append(path)
            return read(path)

        source.read = counted
        current = state.get(shard, "share")
        return sync(shard, fake_service.pipeline(TENANT), current, source=source, **kwargs)

    return folder, shard, fake_service, run, reads


def write(path, text: str) -> None:
    path.write_text(text)
    stat = path.stat()  # a later write within the clock's tick still counts as changed
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def found(service, reader: Reader, words: str) -> list[str]:
    params = SearchParams(mode="lexical", search_filter=SearchFilter(readable_by=reader))
    return sorted({hit.file_name for hit, _ in search_tenant(service, TENANT, words, 10, params)})


def docs(shard) -> dict[str, tuple | None]:
    return {d.file_name: d.access for d in shard.list_documents()}


def test_each_change_at_the_source_is_the_tenants_after_one_run(world):
    folder, shard, service, run, reads = world
    write(folder / "hr" / "salaries.md", "# Salaries\n\nThe salary review is in March.")
    write(folder / "public" / "leave.md", "# Leave\n\nAnnual leave is twentyseven days.")
    first = run()
    assert (first.added, first.deleted) == (2, 0)
    assert docs(shard) == {"salaries.md": ("group:hr",), "leave.md": None}
    assert found(service, HR, "salary review") == ["salaries.md"]
    assert found(service, ENG, "salary review") == []

    write(folder / "public" / "leave.md", "# Leave\n\nAnnual leave is thirty days.")  # edited
    edited = run()
    assert edited.changed == 1 and found(service, ENG, "thirty") == ["leave.md"]
    assert found(service, ENG, "twentyseven") == []

    # moved out of hr/: the same bytes at a new path, now the tenant's; nothing embedded again
    shutil.move(folder / "hr" / "salaries.md", folder / "public" / "pay-review.md")
    reads.clear()
    moved = run()
    assert (moved.moved, moved.added, moved.deleted) == (1, 0, 0)
    assert docs(shard) == {"pay-review.md": None, "leave.md": None}
    assert found(service, ENG, "pay review salary") == ["pay-review.md"]  # the new name counts

    # and back into hr/: engineering loses it at once
    shutil.move(folder / "public" / "pay-review.md", folder / "hr" / "pay-review.md")
    run()
    assert found(service, ENG, "salary review") == [] and found(service, HR, "salary") == [
        "pay-review.md"
    ]

    (folder / "public" / "leave.md").unlink()  # deleted at the source
    gone = run()
    assert gone.deleted == 1 and "leave.md" not in docs(shard)
    assert found(service, ENG, "annual leave") == []


def test_a_rule_changed_at_the_source_changes_access_without_reading_a_file(world):
    folder, shard, service, run, reads = world
    write(folder / "hr" / "a.md", "# A\n\nQuarterly bonus figures.")
    run()
    with shard.transaction(write=True) as db:  # the rule now opens hr/ to the tenant
        db.execute("UPDATE sources SET access = ? WHERE name = 'share'",
                   ('{"rules": [["hr/**", null]], "default": null}',))  # fmt: skip
    reads.clear()
    relisted = run()
    assert relisted.access == 1 and reads == []
    assert found(service, ENG, "bonus figures") == ["a.md"]


def test_an_unchanged_rerun_reads_nothing(world):
    folder, _, _, run, reads = world
    for n in range(30):
        write(folder / "public" / f"note{n}.md", f"# Note {n}\n\nMarker{n} text.")
    assert run().added == 30
    reads.clear()
    again = run()
    assert (again.unchanged, again.added, again.changed) == (30, 0, 0) and reads == []


def test_a_bad_file_is_recorded_and_tried_again_only_once_it_changes(world):
    folder, shard, _, run, reads = world
    write(folder / "public" / "broken.pdf", "not a PDF at all")
    write(folder / "public" / "fine.md", "# Fine\n\nA fine file.")
    first = run()
    assert first.added == 1 and first.failed == 1 and first.failures[0][0] == "public/broken.pdf"
    reads.clear()
    assert run().failed == 1 and reads == []  # unchanged: not read again
    (folder / "public" / "broken.pdf").unlink()
    write(folder / "public" / "broken.md", "# Fixed\n\nNow readable.")
    fixed = run()
    assert fixed.added == 1 and sorted(docs(shard)) == ["broken.md", "fine.md"]


def test_an_emptied_or_unmounted_source_deletes_nothing_unless_confirmed(world):
    folder, shard, _, run, _ = world
    for n in range(12):
        write(folder / "public" / f"n{n}.md", f"# N{n}\n\nText {n}.")
    run()
    for n in range(12):
        (folder / "public" / f"n{n}.md").unlink()
    with pytest.raises(SourceShrankError, match="lists 0 files where it held 12"):
        run()
    assert len(docs(shard)) == 12  # nothing deleted
    assert "SourceShrankError" in state.get(shard, "share").last_run["error"]
    shutil.rmtree(folder)  # not mounted: an error, not an empty folder
    with pytest.raises(SourceUnreachableError, match="is not there"):
        run()
    assert len(docs(shard)) == 12
    (folder / "public").mkdir(parents=True)
    assert run(confirm_deletes=True).deleted == 12 and docs(shard) == {}


def test_an_interrupted_run_resumes_and_ingests_each_file_once(world, monkeypatch):
    folder, shard, service, run, reads = world
    for n in range(150):
        write(folder / "public" / f"f{n:03}.md", f"# F{n}\n\nMarker{n} text.")
    pipeline_type = type(service.pipeline(TENANT))
    ingest, results = pipeline_type.ingest, []
    monkeypatch.setattr("index.sources.sync.BATCH_FILES", 64)

    def stopping(self, files, cancelled=None, **options):
        for result in ingest(self, files, cancelled, **options):
            results.append(result)
            yield result
            if len(results) == 100:  # in the second batch
                raise KeyboardInterrupt("the process stops mid-run")

    monkeypatch.setattr(pipeline_type, "ingest", stopping)
    with pytest.raises(KeyboardInterrupt):
        run()
    with shard.transaction() as db:
        (recorded,) = db.execute("SELECT count(*) FROM source_files").fetchone()
    assert recorded == 64 and len(docs(shard)) > 64  # written, not all recorded
    monkeypatch.setattr(pipeline_type, "ingest", ingest)
    reads.clear()
    resumed = run()
    assert len(reads) == 150 - recorded  # what was recorded is not read again
    assert resumed.added + resumed.unchanged == 150 and resumed.changed == 0
    documents = shard.list_documents()
    assert len(documents) == 150 and {d.version for d in documents} == {1}  # each once


def test_documents_the_source_did_not_make_are_never_touched(world):
    folder, shard, service, run, _ = world
    upload = SourceFile.from_bytes(b"# Hand\n\nUploaded by hand.", "hand.md", owner="user:ana")
    list(service.pipeline(TENANT).ingest([upload]))
    write(folder / "public" / "hand.md", "# Hand\n\nThe source's own hand.md.")
    run()
    (folder / "public" / "hand.md").unlink()
    run(confirm_deletes=True)
    assert docs(shard) == {"hand.md": None}  # the upload, not the source's file
    [kept] = shard.list_documents()
    assert kept.owner == "user:ana" and "Uploaded by hand" in shard.document_text(kept.doc_id)


def test_one_run_of_a_source_at_a_time_and_a_dead_runs_claim_is_taken_over(world):
    import json
    import subprocess
    import sys
    import time

    shard = world[1]
    state.claim(shard, "share", 1000.0)
    with pytest.raises(ConflictError, match="being synced"):
        state.claim(shard, "share", 1001.0)
    state.claim(shard, "share", 1000.0 + state.STALE_S + 1)  # silent too long: taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    claimed = json.loads(state._running(time.time()))
    claimed["pid"] = int(dead.stdout)  # a run whose process was killed a moment ago
    with shard.transaction(write=True) as db:
        db.execute("UPDATE sources SET running = ?", (json.dumps(claimed),))
    state.claim(shard, "share", time.time())  # resumed at once


def test_rules_match_paths_as_globs_first_match_wins():
    rules = AccessRules.parse("group:staff", ["hr/**=group:hr", "*.md=tenant", "a?c/*=user:x"])
    assert rules.access("hr/x/y.pdf") == ("group:hr",)
    assert rules.access("hr/readme.md") == ("group:hr",)  # the first rule
    assert rules.access("readme.md") is None and rules.access("docs/readme.md") == ("group:staff",)
    assert rules.access("abc/f.txt") == ("user:x",) and rules.access("abc/d/f.txt") == (
        "group:staff",
    )
    with pytest.raises(Exception, match="glob=access"):
        AccessRules.parse(None, ["hr/**"])
    with pytest.raises(Exception, match="empty"):
        AccessRules.parse(None, ["hr/**="])
    assert OPERATOR.may_read(("group:hr",))


def test_a_link_out_of_the_folder_is_not_followed(world, tmp_path):
    """A symbolic link (to a file or folder outside the source) is not read: a source reads
    only what is in its folder."""
    folder, shard, _, run, reads = world
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "keys.md").write_text("# Keys\n\nThe operator's secret.")
    (folder / "public" / "keys.md").symlink_to(secret / "keys.md")
    (folder / "public" / "more").symlink_to(secret, target_is_directory=True)
    write(folder / "public" / "leave.md", "# Leave\n\nAnnual leave is twentyseven days.")
    assert run().added == 1 and reads == ["public/leave.md"]
    assert docs(shard) == {"leave.md": None}


def test_a_new_file_where_one_moved_away_gets_its_own_document(world):
    """leave.md renamed policy.md keeps its document (whose id came from leave.md's path);
    a new leave.md, in the run that deletes policy.md, is a document of its own."""
    folder, shard, service, run, _ = world
    write(folder / "public" / "leave.md", "# Leave\n\nAnnual leave is twentyseven days.")
    run()
    (folder / "public" / "leave.md").rename(folder / "public" / "policy.md")
    assert run().moved == 1
    write(folder / "public" / "leave.md", "# Leave\n\nAnnual leave is thirty days.")
    (folder / "public" / "policy.md").unlink()
    last = run()
    assert (last.added, last.deleted) == (1, 1)
    assert docs(shard) == {"leave.md": None}
    assert found(service, ENG, "thirty days") == ["leave.md"]
