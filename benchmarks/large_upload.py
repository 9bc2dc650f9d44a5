"""A large PDF uploaded while another tenant asks questions: how long until it is searchable,
and what the other tenant sees meanwhile.

    .venv/bin/python -m benchmarks.large_upload [--pages 300] [--scan] [--config configs/cpu.yaml]

Builds a PDF of ``--pages`` pages of Wikipedia summaries (fpdf2; the text of ``make bench``'s
data package), starts the appliance (the config's resources, a temporary data directory, the
repository's fetched models, loopback only), uploads the sample corpus for tenant acme, then
uploads the PDF for tenant bigco into a vector store with the SDK's ``upload_and_poll``
(the upload is answered "uploaded" after ``serve.upload_wait_s`` and ingested on: the vector
store file is ``in_progress`` until ``completed``). Meanwhile acme asks its questions one after
another. Reported: the PDF's size, the time until the file was answered, and until it was
completed; acme's answers before and during the ingestion (count, errors, latency).
``--scan``: the PDF's pages are clean 200-dpi scans of the same text (tests/documents.py), so
its ingestion is OCR (index/loaders/ocr.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private, local benchmark cluster
ROOT = Path(__file__).resolve().parent.parent

from benchmarks.prefix_cache import QUESTIONS  # noqa: E402
from serve.config import load_config  # noqa: E402


def build_pdf(pages: int, path: Path) -> int:
    """About ``pages`` pages of Wikipedia summaries, one article after another."""
    from fpdf import FPDF

    from benchmarks.wiki import articles

    pdf = FPDF()
    pdf.set_auto_page_break(True, margin=15)
    pdf.add_page()
    for article in articles("en"):
        if pdf.page_no() >= pages:
            break
        pdf.set_font("Helvetica", "B", 13)
        title = article["title"].encode("latin-1", "replace").decode("latin-1")
        pdf.multi_cell(0, 7, title, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        text = article["extract"].encode("latin-1", "replace").decode("latin-1")
        pdf.multi_cell(0, 5, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    pdf.output(str(path))
    return pdf.page_no()


def build_scan(pages: int, path: Path) -> int:
    """``pages`` scanned pages, each one Wikipedia summary drawn at 200 dpi."""
    from benchmarks.wiki import articles
    from tests.documents import scanned_pdf

    texts = [a["extract"] for a in articles("en") if 1200 < len(a["extract"]) < 2600]
    path.write_bytes(scanned_pdf([[text] for text in texts[:pages]]))
    return pages


def ask_until(client, stop: threading.Event, latencies: list, errors: list) -> None:
    """acme's questions, one after another, until ``stop``."""
    import openai

    for number in range(10_000):
        if stop.is_set():
            return
        question = QUESTIONS[number % len(QUESTIONS)]
        began = time.perf_counter()
        try:
            client.chat.completions.create(
                model="grounded", messages=[{"role": "user", "content": question}],
                max_tokens=64,
            )  # fmt: skip
            latencies.append(time.perf_counter() - began)
        except openai.APIError as exc:
            errors.append(repr(exc))


def summary(latencies: list[float]) -> str:
    if not latencies:
        return "none"
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{len(ordered)} answered, p50 {statistics.median(ordered):.1f} s, p95 {p95:.1f} s"


def run(config, pdf: Path, pages: int) -> None:
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up

    keys = KeyStore(config.data_dir)
    acme_key, bigco_key = keys.create("acme")[1], keys.create("bigco")[1]
    running = up.start(config, dashboard=False)
    try:
        acme = openai.OpenAI(base_url=running.api_url, api_key=acme_key, timeout=600,
                             max_retries=0)  # fmt: skip
        bigco = openai.OpenAI(base_url=running.api_url, api_key=bigco_key, timeout=600,
                              max_retries=0)  # fmt: skip
        for path in sorted((ROOT / "samples" / "corpus" / "acme").iterdir()):
            acme.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        before: list[float] = []
        ask_until(acme, _after(60), before, [])
        store = bigco.vector_stores.create(name="archive")
        stop, during, errors = threading.Event(), [], []
        asker = threading.Thread(target=ask_until, args=(acme, stop, during, errors))
        asker.start()
        began = time.perf_counter()
        uploaded = bigco.files.create(file=(pdf.name, pdf.read_bytes()), purpose="assistants")
        answered_s = time.perf_counter() - began
        member = bigco.vector_stores.files.create_and_poll(
            file_id=uploaded.id, vector_store_id=store.id, poll_interval_ms=1000
        )
        completed_s = time.perf_counter() - began
        stop.set()
        asker.join()
        found = bigco.files.retrieve(uploaded.id)
        chunks = (found.model_extra or {}).get("grounded", {}).get("chunk_count")
        hits = bigco.vector_stores.search(store.id, query="history of the city")
    finally:
        running.stop()
    print(f"PDF: {pages} pages, {pdf.stat().st_size / 2**20:.1f} MiB, {chunks} chunks")
    print(f"upload answered in {answered_s:.1f} s with status {uploaded.status!r}; "
          f"vector store file {member.status!r} after {completed_s:.1f} s; "
          f"search in the store: {len(hits.data)} results")  # fmt: skip
    print(f"acme before the upload (60 s): {summary(before)}")
    print(f"acme during the ingestion: {summary(during)}, {len(errors)} errors {errors[:3]}")


def _after(seconds: float) -> threading.Event:
    """An event that is set ``seconds`` from now."""
    event = threading.Event()
    threading.Timer(seconds, event.set).start()
    return event


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--scan", action="store_true", help="scanned pages, read by OCR")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grounded-large-") as tmp:
        pdf = Path(tmp) / "archive.pdf"
        pages = (build_scan if args.scan else build_pdf)(args.pages, pdf)
        config = load_config(Path(args.config), data_dir=Path(tmp) / "data")
        (Path(tmp) / "data").mkdir()
        (Path(tmp) / "data" / "models").symlink_to(ROOT / "data" / "models")
        run(config, pdf, pages)


if __name__ == "__main__":
    main()
