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

A run only reads until it writes: what it decides is a ``Batch`` of writes (JSON actions and
the bytes of the files to ingest) that ``apply`` makes, the documents and the source's records
together. One node applies each batch as it comes; with several nodes the appliance logs it
first, and a new owner replays it with the same ``apply`` (serve/shards/sources.py).

Only documents the source made are ever touched (they are its ``source_files`` rows; their
owner is ``source:<name>``): an upload, or another source's file, is not. A batch is applied
as it is decided (up to BATCH_FILES files or BATCH_BYTES), so a run that stops (a crash, a
restart) resumes where it was: what it had ingested is "unchanged" to the next run.

A source that lists nothing, or far fewer files than it held (an unmounted share that shows as
an empty folder, a wrong path), would delete the tenant's documents: such a run stops before
changing anything unless the deletes are confirmed (``confirm_deletes``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from index.access import Access
from index.errors import ConflictError, DocumentNotFoundError
from index.pipeline import IngestPipeline, SourceFile, doc_id_for
from index.sources import state
from index.sources.kinds import Entry, Source
from index.sources.state import Declared
from index.store.rows import access_json, access_of
from index.store.shard import TenantShard

BATCH_FILES = 256  # files decided, then applied together (what a stopped run does again)
BATCH_BYTES = 16 << 20  # or this much content to ingest
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

    def fail(self, path: str, reason: str) -> None:
        self.failed += 1
        if len(self.failures) < FAILURES_KEPT:
            self.failures.append([path, reason])


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


@dataclass
class Batch:
    """Writes a run decided, applied together by ``apply``: ``actions`` (JSON: ``do`` is
    ingest, move, access, refuse or delete), the bytes of the files it ingests in the order
    of its ingest actions, and at a run's end its ``report``."""

    source: str
    actions: list[dict] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)
    report: dict | None = None

    def full(self) -> bool:
        return len(self.actions) >= BATCH_FILES or sum(map(len, self.blobs)) >= BATCH_BYTES

    def meta(self) -> dict:
        """As the write log keeps it (the blobs apart, as its data)."""
        return {"source": self.source, "actions": self.actions, "report": self.report,
                "sizes": [len(b) for b in self.blobs]}  # fmt: skip

    @classmethod
    def logged(cls, meta: dict, data: bytes) -> Batch:
        blobs, at = [], 0
        for size in meta["sizes"]:
            blobs.append(data[at : at + size])
            at += size
        return cls(meta["source"], meta["actions"], blobs, meta["report"])


def sync(
    shard: TenantShard,
    pipeline: IngestPipeline,
    declared: Declared,
    *,
    confirm_deletes: bool = False,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.time,
    source: Source | None = None,
    commit: Callable[[Batch], list[str]] | None = None,
) -> Run:
    """Run ``declared`` once into ``shard`` (through ``pipeline``, the tenant's); ``progress``
    is told of each file handled after the listing; ``source``: what lists and reads the files
    (by default the one ``declared`` names); ``commit``: how a batch is applied (by default
    ``apply`` here, one at a time under the source's claim in the shard; the appliance's
    several nodes log it first, and keep their own claim). SourceUnreachableError or
    SourceShrankError: nothing was changed."""
    started, run = clock(), Run(declared.name)
    source = source or declared.source()
    if commit is None:
        state.claim(shard, declared.name, started)

        def commit(batch: Batch) -> list[str]:
            state.claim_again(shard, declared.name, clock())
            return apply(shard, pipeline, batch)

    try:
        _run(shard, declared, source, run, confirm_deletes, pipeline.limits.max_bytes,
             progress or (lambda n: None), commit)  # fmt: skip
    except BaseException as exc:  # Ctrl-C too: the claim is given back, the stop recorded
        run.error = f"{type(exc).__name__}: {exc}"
        _finish(run, started, clock, commit)
        raise
    _finish(run, started, clock, commit)
    return run


def _finish(run: Run, started: float, clock, commit) -> None:
    run.finished_at = clock()
    run.seconds = run.finished_at - started
    commit(Batch(run.source, report=run.json()))


def due(declared: Declared, now: float) -> float:
    """Seconds until ``declared`` should run again (0: now); inf for an on-demand source."""
    if declared.every_s is None:
        return float("inf")
    if declared.last_run is None:
        return 0.0
    return max(0.0, declared.last_run["finished_at"] + declared.every_s - now)


def _run(shard, declared, source, run, confirm_deletes, limit, progress, commit) -> None:
    name, rules = declared.name, declared.rules
    pending, relisted, listed = [], [], set()  # files to read; access changes alone

    for entries in _chunks(source.entries(), 512):
        with shard.transaction() as db:
            for entry in entries:
                listed.add(_key(entry.path))
                row = _row(db, name, entry.path)
                if row is None or row.stamp != (entry.size, entry.mtime_ns, entry.version):
                    pending.append(entry)
                elif row.error is None and row.access != rules.access(entry):
                    relisted.append((row, rules.access(entry)))
                else:
                    run.unchanged += 1
                    run.failed += row.error is not None

    held, gone = 0, []  # the rows streamed, only those gone kept
    with shard.transaction() as db:
        for found in db.execute(f"SELECT {_COLUMNS} FROM source_files WHERE source = ?", (name,)):
            held += 1
            if _key(found[0]) not in listed:
                gone.append(_of(found))
    if (
        gone
        and not confirm_deletes
        and (not listed or (held >= 10 and len(gone) > MAX_DELETE_SHARE * held))
    ):
        raise SourceShrankError(
            f"source {name!r} ({declared.kind}:{declared.location}) lists {len(listed)} files "
            f"where it held {held}: {len(gone)} documents would be deleted. If the source "
            "was emptied on purpose, run it again with --confirm-deletes; if not, check that it "
            "is mounted and its path is right. Nothing was changed.",
            param="source",
        )
    del listed

    batch = Batch(name)

    def decided(action: dict, blob: bytes | None = None) -> None:
        nonlocal batch
        batch.actions.append(action)
        if blob is not None:
            batch.blobs.append(blob)
        if batch.full():
            _count(run, batch, commit(batch))
            progress(len(batch.actions))
            batch = Batch(name)

    for row, access in relisted:  # access lists changed alone: nothing read, nothing embedded
        decided(_action("access", row.path, row.stamp, row.sha256, row.doc_id, access))
    by_hash: dict[str, list[_Row]] = {}  # gone files that a new one may be, moved
    for row in gone:
        if row.error is None:
            by_hash.setdefault(row.sha256, []).append(row)
    moved: set[str] = set()
    for entry in pending:
        _decide(shard, declared, source, run, entry, limit, by_hash, moved, decided)
    for row in gone:
        if row.path not in moved:  # else its document lives on under its new path
            decided({**_action("delete", row.path, row.stamp, row.sha256, row.doc_id, None),
                     "counted": row.error is None})  # fmt: skip
    _count(run, batch, commit(batch))
    progress(len(batch.actions))


def _decide(shard, declared, source, run, entry, limit, by_hash, moved, decided) -> None:
    """What to do with a new or changed file: read it (unless it is over the size limit),
    then a move of a gone file with its bytes, or an ingest."""
    name, access, stamp = declared.name, declared.rules.access(entry), _stamp(entry)
    with shard.transaction() as db:
        row = _row(db, name, entry.path)
        doc_id = row.doc_id if row else _new_doc_id(db, shard.tenant, name, entry.path)
    if entry.size > limit:  # not read: refused as an upload is
        reason = f"{entry.size:,} bytes is more than limits.max_bytes ({limit:,})"
        decided({**_action("refuse", entry.path, stamp, "", doc_id, access), "reason": reason})
        return
    try:
        data = source.read(entry.path)
    except OSError as exc:  # gone or unreadable since it was listed: the next run tries again
        run.fail(entry.path, f"unreadable ({exc.strerror or exc})")
        return
    digest = hashlib.sha256(data).hexdigest()
    key = f"{declared.kind}:{declared.location}/{entry.path}"
    if row is None and by_hash.get(digest):  # the same bytes at a new path: moved or renamed
        was = by_hash[digest].pop()
        moved.add(was.path)
        decided({**_action("move", entry.path, stamp, digest, was.doc_id, access),
                 "from": was.path, "key": key})  # fmt: skip
        return
    decided({**_action("ingest", entry.path, stamp, digest, doc_id, access), "key": key}, data)


def apply(shard: TenantShard, pipeline: IngestPipeline, batch: Batch) -> list[str]:
    """Make ``batch``'s writes (a run's, or the write log's on a new owner: the same
    outcome); each action's outcome (added, changed, unchanged, moved, access, deleted,
    failed: <reason>, or "" for a delete of a refused file)."""
    name = batch.source
    if batch.report is not None:  # a run's end: the vector index saved once for its batches
        shard.flush()
        state.report(shard, name, batch.report)
    ingests = [a for a in batch.actions if a["do"] == "ingest"]
    with shard.transaction() as db:
        before = {a["path"]: _row(db, name, a["path"]) for a in batch.actions}
    results = {}
    if ingests:
        files = (SourceFile.from_bytes(blob, _file_name(a["path"]), source=a["key"],
                                       doc_id=a["doc_id"], access=access_of_json(a["access"]),
                                       owner=f"source:{name}")
                 for a, blob in zip(ingests, batch.blobs, strict=True))  # fmt: skip
        results = {r.source: r for r in pipeline.ingest(files, flush=False)}
    outcomes, records, forgotten = [], [], []
    for action in batch.actions:
        do, path, doc_id = action["do"], action["path"], action["doc_id"]
        access, row = access_of_json(action["access"]), before[path]
        record = (path, *action["stamp"], action["sha256"], doc_id, access, None)
        if do == "ingest" and results[action["key"]].status == "refused":
            do, action = "refuse", {**action, "reason": results[action["key"]].reason}
        if do == "refuse":
            if row is not None and row.error is None and row.access != access:
                _quietly(shard.set_access, doc_id, access)  # its previous version stays
            outcomes.append(f"failed: {action['reason']}")
            records.append((*record[:-1], action["reason"]))
        elif do == "ingest":
            status = results[action["key"]].status
            added = row is None or (row.error is not None and status == "added")
            outcomes.append("unchanged" if status == "unchanged" else
                            "added" if added else "changed")  # fmt: skip
            records.append(record)
        elif do == "move":
            _quietly(shard.rename_document, doc_id, _file_name(path), action["key"])
            _quietly(shard.set_access, doc_id, access)
            forgotten.append(action["from"])
            outcomes.append("moved")
            records.append(record)
        elif do == "access":
            _quietly(shard.set_access, doc_id, access)
            outcomes.append("access")
            records.append(record)
        elif do == "delete":
            _quietly(shard.delete_document, doc_id)
            forgotten.append(path)
            outcomes.append("deleted" if action["counted"] else "")
    with shard.transaction(write=True) as db:
        db.executemany("DELETE FROM source_files WHERE source = ? AND path = ?",
                       [(name, path) for path in forgotten])  # fmt: skip
        _record(db, name, records)
    return outcomes


def _count(run: Run, batch: Batch, outcomes: list[str]) -> None:
    for action, outcome in zip(batch.actions, outcomes, strict=True):
        if outcome.startswith("failed: "):
            run.fail(action["path"], outcome.removeprefix("failed: "))
        elif outcome:
            setattr(run, outcome, getattr(run, outcome) + 1)


def _quietly(change: Callable, doc_id: str, *args) -> None:
    """A change to a source's document that someone deleted meanwhile: nothing to change."""
    with contextlib.suppress(DocumentNotFoundError):
        change(doc_id, *args)


def _new_doc_id(db, tenant: str, name: str, path: str) -> str:
    """A new file's document id: from its path, unless a document of the source already
    has that id (a file moved away from this path keeps its own)."""
    base, n = f"source:{tenant}:{name}:{path}", 1
    doc_id = doc_id_for(base)
    while db.execute("SELECT 1 FROM source_files WHERE source = ? AND doc_id = ?",
                     (name, doc_id)).fetchone():  # fmt: skip
        n += 1
        doc_id = doc_id_for(f"{base}:{n}")
    return doc_id


def _action(do: str, path: str, stamp, sha256: str, doc_id: str, access: Access) -> dict:
    return {"do": do, "path": path, "stamp": list(stamp), "sha256": sha256, "doc_id": doc_id,
            "access": None if access is None else list(access)}  # fmt: skip


def access_of_json(value: list | None) -> Access:
    return None if value is None else tuple(value)


def _chunks(entries: Iterator[Entry], size: int) -> Iterator[list[Entry]]:
    chunk = []
    for entry in entries:
        chunk.append(entry)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    yield chunk


def _key(path: str) -> int:
    """A listed path, in 8 bytes (a run keeps every listed path's key, not the path)."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big")


def _stamp(entry: Entry) -> tuple[int, int, str]:
    return entry.size, entry.mtime_ns, entry.version


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


def _record(db, name: str, files: list[tuple]) -> None:
    """What the source gave for ``files`` ((path, size, mtime_ns, version, sha256, doc_id,
    access, error) each)."""
    db.executemany(
        "INSERT INTO source_files (source, path, size, mtime_ns, version, sha256, doc_id, "
        "access, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, path) DO "
        "UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, version = "
        "excluded.version, sha256 = excluded.sha256, doc_id = excluded.doc_id, access = "
        "excluded.access, error = excluded.error",
        [(name, path, size, mtime_ns, version, sha256, doc_id, access_json(access), error)
         for path, size, mtime_ns, version, sha256, doc_id, access, error in files],
    )  # fmt: skip
