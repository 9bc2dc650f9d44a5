"""Folder sources (index/sources/, issue 66): a source's first run against `grounded ingest` on
the same files, an unchanged re-run of a large folder (time, content read, peak memory), and a
first run killed midway (SIGKILL) then resumed. The hashing test embedder, so that the figures
are the sync's own work and not the model's (with a real embedder the ratio is nearer 1).

    .venv/bin/python -m benchmarks.source_sync [--files 100000] [--compare 10000] [--resume 10000]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from index.config import IndexConfig
from index.pipeline import discover
from index.service import IndexService
from index.sources import state
from index.sources.rules import AccessRules
from index.sources.state import Declared
from index.sources.sync import sync
from index.testing import HashingEmbedder

WORDS = ["leave", "travel", "expense", "policy", "approval", "manager", "budget", "claim",
         "receipt", "hotel", "train", "meal"]  # fmt: skip


def make_folder(root: Path, files: int) -> Path:
    for n in range(files):
        folder = root / f"d{n // 1000:03}"
        if n % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        words = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(30))
        (folder / f"f{n:06}.txt").write_text(f"Note {n}. {words}. Marker{n}.")
    return root


def service(data: Path) -> IndexService:
    return IndexService(IndexConfig(), data, embedder=HashingEmbedder()).start()


def source_run(data: Path, tenant: str, folder: Path, **kwargs):
    svc = service(data)
    shard = svc.shard(tenant, create=True)
    if not any(d.name == "s" for d in state.listed(shard)):
        state.add(shard, Declared("s", "folder", str(folder), AccessRules()))
    started = time.perf_counter()
    run = sync(shard, svc.pipeline(tenant), state.get(shard, "s"), **kwargs)
    seconds = time.perf_counter() - started
    svc.close()
    return run, seconds


def compare(root: Path, files: int) -> None:
    folder = make_folder(root / f"compare-{files}", files)
    svc = service(root / "data-ingest")
    started = time.perf_counter()
    found, _ = discover([folder])
    results = list(svc.pipeline("t").ingest(found))
    ingest_s = time.perf_counter() - started
    svc.close()
    run, sync_s = source_run(root / "data-sync", "t", folder)
    assert run.added == len(results) == files, (run, len(results))
    print(f"| first run of {files:,} files | `grounded ingest`'s pipeline {ingest_s:.1f} s "
          f"({files / ingest_s:.0f} files/s) | source run {sync_s:.1f} s ({files / sync_s:.0f} "
          f"files/s) | source/ingest throughput {ingest_s / sync_s:.2f} |", flush=True)  # fmt: skip


def scale(root: Path, files: int) -> None:
    folder = make_folder(root / f"scale-{files}", files)
    first, first_s = source_run(root / "data-scale", "t", folder)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    again, again_s = source_run(root / "data-scale", "t", folder)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert first.added == files and again.unchanged == files and again.added == 0
    print(f"| {files:,} files | first run {first_s:.0f} s | unchanged re-run {again_s:.1f} s, "
          f"0 files read | peak RSS {before / 1024:.0f} MiB before the re-run, "
          f"{after / 1024:.0f} MiB after |", flush=True)  # fmt: skip


def resume(root: Path, files: int) -> None:
    folder = make_folder(root / f"resume-{files}", files)
    data = root / "data-resume"
    killer = subprocess.Popen([sys.executable, "-m", "benchmarks.source_sync", "--child",
                               str(data), str(folder)])  # fmt: skip
    time.sleep(2)
    svc = service(data)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # until about a third is recorded
        with svc.shard("t", create=True).transaction() as db:
            (done,) = db.execute("SELECT count(*) FROM source_files").fetchone()
        if done >= files // 3:
            break
        time.sleep(0.2)
    os.kill(killer.pid, signal.SIGKILL)
    killer.wait()
    with svc.shard("t").transaction() as db:  # what the killed run had recorded
        (done,) = db.execute("SELECT count(*) FROM source_files").fetchone()
    svc.close()
    run, seconds = source_run(data, "t", folder)
    svc = service(data)
    documents = svc.shard("t").list_documents()
    svc.close()
    twice = sum(d.version > 1 for d in documents)
    print(f"| {files:,} files, the first run SIGKILLed with {done:,} recorded | resumed in "
          f"{seconds:.0f} s: {run.added:,} added, {run.unchanged:,} unchanged ({done:,} recorded, "
          f"not read; {run.unchanged - done:,} ingested before the kill but not recorded: read, "
          f"not embedded again), {run.changed} changed | {len(documents):,} documents, "
          f"{twice} ingested twice |", flush=True)  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # the run that resume() kills
        data, folder = Path(sys.argv[2]), Path(sys.argv[3])
        source_run(data, "t", folder)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--compare", type=int, default=10_000)
    parser.add_argument("--resume", type=int, default=10_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="grounded-sources-"))
    if args.compare:
        compare(root, args.compare)
    if args.resume:
        resume(root, args.resume)
    if args.files:
        scale(root, args.files)


if __name__ == "__main__":
    main()
