"""One run of a source: the tenant's documents brought in step with what the source holds now.

The source is listed as a stream; a file whose size, modification time and version (an ETag)
are what the last run recorded is not read. Then, in one pass over what changed:

- a new or changed file is ingested through the pipeline (a changed one keeps its document id;
  content that is the same after all only has its recorded time updated);
- a new file whose bytes are those of a file that is gone is that file moved: its document is
  renamed, its access list set from its new path, nothing embedded again;
- a file whose rules now give another access list has only its list changed;
- a file that is gone has its document deleted;
- a file the pipeline refuses (a format, a limit) is recorded with the reason and tried again
  only once it changes; it never stops the run.

Only documents the source made are ever touched (they are its ``source_files`` rows; their
owner is ``source:<name>``): an upload, or another source's file, is not. Progress is recorded
batch by batch, so a run that stops (a crash, a restart) resumes where it was: what it had
ingested is "unchanged" to the next run.

A source that lists nothing, or far fewer files than it held (an unmounted share that shows as
an empty folder, a wrong path), would delete the tenant's documents: such a run stops before
changing anything unless the deletes are confirmed (``confirm_deletes``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from index.access import Access
from index.errors import ConflictError, DocumentNotFoundError
from index.pipeline import IngestPipeline, SourceFile, doc_id_for
from index.sources import state
from index.sources.kinds import Entry, Source
from index.sources.state import Declared
from index.store.rows import access_json, access_of
from index.store.shard import TenantShard

BATCH = 64  # results recorded at a time (what a stopped run does again)
MAX_DELETE_SHARE = 0.5  # of the files a source held: more gone at once needs confirming
FAILURES_KEPT = 20  # in a run's report


class SourceShrankError(ConflictError):
    """The source lists far fewer files than it held: deleting them all needs confirming."""

    code = "source_shrank"


@dataclass
class Run:
    source: str
    added: int = 0
    changed: int = 0
    moved: int = 0
    access: int = 0  # access lists changed alone
    deleted: int = 0
    unchanged: int = 0
    failed: int = 0
    seconds: float = 0.0
    finished_at: float = 0.0  # Unix time
    failures: list[list[str]] = field(default_factory=list)  # [path, reason], the first ones
    error: str | None = None

    def json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Row:
    path: str
    size: int
    mtime_ns: int
    version: str
    sha256: str
    doc_id: str
    access: Access
    error: str | None

    @property
    def stamp(self) -> tuple[int, int, str]:
        return self.size, self.mtime_ns, self.version


def sync(
    shard: TenantShard,
    pipeline: IngestPipeline,
    declared: Declared,
    *,
    confirm_deletes: bool = False,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
    source: Source | None = None,
) -> Run:
    """Run ``declared`` once into ``shard`` (through ``pipeline``, the tenant's); ``progress``
    is told of each file handled after the listing; ``source``: what lists and reads the files
    (by default the one ``declared`` names). SourceUnreachableError or SourceShrankError:
    nothing was changed."""
    started, run = clock(), Run(declared.name)
    source = source or declared.source()
    state.claim(shard, declared.name, started)
    try:
        _run(shard, pipeline, declared, source, run, confirm_deletes,
             progress or (lambda n: None), clock)  # fmt: skip
    except BaseException as exc:  # Ctrl-C too: the claim is given back, the stop recorded
        run.error = f"{type(exc).__name__}: {exc}"
        run.finished_at = clock()
        run.seconds = run.finished_at - started
        state.report(shard, declared.name, run.json())
        raise
    run.finished_at = clock()
    run.seconds = run.finished_at - started
    state.report(shard, declared.name, run.json())
    return run


def due(declared: Declared, now: float) -> float:
    """Seconds until ``declared`` should run again (0: now); inf for an on-demand source."""
    if declared.every_s is None:
        return float("inf")
    if declared.last_run is None:
        return 0.0
    return max(0.0, declared.last_run["finished_at"] + declared.every_s - now)


def _run(shard, pipeline, declared, source, run, confirm_deletes, progress, clock) -> None:
    name, rules = declared.name, declared.rules
    with shard.transaction() as db:
        (previous,) = db.execute(
            "SELECT count(*) FROM source_files WHERE source = ?", (name,)
        ).fetchone()
        (last,) = db.execute(
            "SELECT coalesce(max(seen), 0) FROM source_files WHERE source = ?", (name,)
        ).fetchone()
    this = last + 1
    pending, relisted, listed = [], [], 0  # files to read; access changes alone
    batch: list[Entry] = []

    def look(entries: list[Entry]) -> None:
        """What the last run recorded for these entries; the recorded ones marked seen."""
        with shard.transaction(write=True) as db:
            for entry in entries:
                row = _row(db, name, entry.path)
                if row is not None:
                    db.execute("UPDATE source_files SET seen = ? WHERE source = ? AND path = ?",
                               (this, name, entry.path))  # fmt: skip
                if row is None or row.stamp != (entry.size, entry.mtime_ns, entry.version):
                    pending.append(entry)
                    continue
                if row.error is None and row.access != rules.access(entry):
                    relisted.append((row, rules.access(entry)))
                else:
                    run.unchanged += 1
                    run.failed += row.error is not None

    for entry in source.entries():
        listed += 1
        batch.append(entry)
        if len(batch) >= 512:
            look(batch)
            batch = []
    look(batch)

    with shard.transaction() as db:
        gone = [
            _of(r)
            for r in db.execute(
                f"SELECT {_COLUMNS} FROM source_files WHERE source = ? AND seen < ?", (name, this)
            )
        ]
    if (
        gone
        and not confirm_deletes
        and (listed == 0 or (previous >= 10 and len(gone) > MAX_DELETE_SHARE * previous))
    ):
        raise SourceShrankError(
            f"source {name!r} ({declared.kind}:{declared.location}) lists {listed} files where "
            f"it held {previous}: {len(gone)} documents would be deleted. If the source was "
            "emptied on purpose, run it again with --confirm-deletes; if not, check that it is "
            "mounted and its path is right. Nothing was changed.",
            param="source",
        )

    for row, access in relisted:  # access lists changed alone: nothing read, nothing embedded
        with contextlib.suppress(DocumentNotFoundError):
            shard.set_access(row.doc_id, access)
        kept = (row.path, row.size, row.mtime_ns, row.version, row.sha256, row.doc_id, access,
                None)  # fmt: skip
        _record(shard, name, this, kept)
        run.access += 1
        progress(1)

    by_hash: dict[str, list[_Row]] = {}  # gone files that a new one may be, moved
    for row in gone:
        if row.error is None:
            by_hash.setdefault(row.sha256, []).append(row)
    moved: set[str] = set()

    def recorded(count: int) -> None:
        state.claim_again(shard, name, clock())
        progress(count)

    _ingest(shard, pipeline, declared, source, run, this, pending, by_hash, moved, recorded)

    for row in gone:
        if row.path in moved:
            continue  # its document lives on under its new path
        with contextlib.suppress(DocumentNotFoundError):
            shard.delete_document(row.doc_id)
        with shard.transaction(write=True) as db:
            db.execute("DELETE FROM source_files WHERE source = ? AND path = ?", (name, row.path))
        run.deleted += row.error is None


def _ingest(shard, pipeline, declared, source, run, this, entries, by_hash, moved_from, recorded):
    """The new and changed files, read one at a time as the pipeline takes them (one ingest
    call: the vector index is saved once, at its end); recorded every BATCH results, each
    record after the pipeline's commit of the documents it names."""
    name, rules, tenant = declared.name, declared.rules, shard.tenant
    read = {}

    def files():
        for entry in entries:
            access = rules.access(entry)
            with shard.transaction() as db:
                row = _row(db, name, entry.path)
            doc_id = row.doc_id if row else doc_id_for(f"source:{tenant}:{name}:{entry.path}")
            if entry.size > pipeline.limits.max_bytes:  # not read: refused as an upload is
                reason = (f"{entry.size:,} bytes is more than limits.max_bytes "
                          f"({pipeline.limits.max_bytes:,})")  # fmt: skip
                _record(shard, name, this, refuse(entry, doc_id, access, reason, row))
                continue
            try:
                data = source.read(entry.path)
            except OSError as exc:  # gone or unreadable since it was listed: the next run
                _fail(run, entry.path, f"unreadable ({exc.strerror or exc})")
                continue
            digest = hashlib.sha256(data).hexdigest()
            key = f"{declared.kind}:{declared.location}/{entry.path}"
            moved = by_hash[digest].pop() if row is None and by_hash.get(digest) else None
            if moved is not None:  # the same bytes at a new path: a move or a rename
                moved_from.add(moved.path)
                shard.rename_document(moved.doc_id, _file_name(entry.path), key)
                if moved.access != access:
                    shard.set_access(moved.doc_id, access)
                with shard.transaction(write=True) as db:
                    db.execute("DELETE FROM source_files WHERE source = ? AND path = ?",
                               (name, moved.path))  # fmt: skip
                _record(shard, name, this, (*_stamp(entry), digest, moved.doc_id, access, None))
                run.moved += 1
                continue
            read[key] = (entry, digest, access, row, doc_id)
            yield SourceFile.from_bytes(data, _file_name(entry.path), source=key, doc_id=doc_id,
                                        access=access, owner=f"source:{name}")  # fmt: skip

    def refuse(entry, doc_id, access, reason, row, digest="") -> tuple:
        """A refused file is recorded (tried again once it changes); a previous version's
        document stays, with the file's access list as it is now."""
        _fail(run, entry.path, reason)
        if row is not None and row.error is None and row.access != access:
            with contextlib.suppress(DocumentNotFoundError):
                shard.set_access(doc_id, access)
        return (*_stamp(entry), digest, doc_id, access, reason)

    done = []
    for result in pipeline.ingest(files()):
        entry, digest, access, row, doc_id = read.pop(result.source)
        if result.status == "refused":
            done.append(refuse(entry, doc_id, access, result.reason, row, digest))
        else:
            done.append((*_stamp(entry), digest, doc_id, access, None))
            if result.status == "unchanged":
                run.unchanged += 1
            elif row is None or (row.error is not None and result.status == "added"):
                run.added += 1
            else:
                run.changed += 1
        if len(done) >= BATCH:
            _record(shard, name, this, *done)
            recorded(len(done))
            done = []
    _record(shard, name, this, *done)
    recorded(len(done))


def _fail(run: Run, path: str, reason: str) -> None:
    run.failed += 1
    if len(run.failures) < FAILURES_KEPT:
        run.failures.append([path, reason])


def _stamp(entry: Entry) -> tuple[str, int, int, str]:
    return entry.path, entry.size, entry.mtime_ns, entry.version


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


_COLUMNS = "path, size, mtime_ns, version, sha256, doc_id, access, error"


def _of(row: tuple) -> _Row:
    path, size, mtime_ns, version, sha256, doc_id, access, error = row
    return _Row(path, size, mtime_ns, version, sha256, doc_id, access_of(access), error)


def _row(db, name: str, path: str) -> _Row | None:
    found = db.execute(f"SELECT {_COLUMNS} FROM source_files WHERE source = ? AND path = ?",
                       (name, path)).fetchone()  # fmt: skip
    return _of(found) if found else None


def _record(shard: TenantShard, name: str, this: int, *files: tuple) -> None:
    """What the source gave for ``files`` ((path, size, mtime_ns, version, sha256, doc_id,
    access, error) each), seen by run ``this``."""
    with shard.transaction(write=True) as db:
        for path, size, mtime_ns, version, sha256, doc_id, access, error in files:
            db.execute(
                "INSERT INTO source_files (source, path, size, mtime_ns, version, sha256, doc_id, "
                "access, error, seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, "
                "path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
                "version = excluded.version, sha256 = excluded.sha256, doc_id = excluded.doc_id, "
                "access = excluded.access, error = excluded.error, seen = excluded.seen",
                (name, path, size, mtime_ns, version, sha256, doc_id, access_json(access), error,
                 this),
            )  # fmt: skip
