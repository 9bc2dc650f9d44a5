"""What an organisation brings on its first day: Word, PowerPoint, Excel, CSV, e-mail, scanned
PDFs and PDF tables. Are their facts answered and cited with their place, how well is a scan
read, and how fast does each format ingest?

    .venv/bin/python -m benchmarks.formats [--part ocr|throughput|answers|all] [--seed N]
                                           [--config configs/cpu.yaml]

- ``ocr``: clean 200-dpi scans rendered here (DejaVu Sans 11 pt, as tests/pdfs.py draws them)
  of Wikipedia summaries in English and French (``make bench``'s data package), read back
  through the PDF loader: character accuracy (1 - edit distance / reference length, spaces
  collapsed) and pages per second.
- ``throughput``: one larger generated file per format, loaded (parse only) and ingested
  (parse, chunk, MiniLM embedding, shard write) with the default index settings.
- ``answers``: generated files with seeded facts, uploaded through ``POST /v1/files`` to a
  started appliance (the config's models, a temporary data directory), one question per fact
  through the chat API. A question counts as answered when the answer holds the fact's value
  and cites the file, and as placed when a citation of that file carries the page or slide
  (PDF, deck) or the sheet's row range (spreadsheet, CSV).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private, local benchmark cluster
ROOT = Path(__file__).resolve().parent.parent

from index.config import LoaderLimits  # noqa: E402
from index.loaders import load_document  # noqa: E402
from tests.documents import scanned_pdf, table_pdf  # noqa: E402

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
CITIES = ["Oslo", "Lisbon", "Vienna", "Dublin", "Prague", "Tallinn", "Zagreb", "Riga"]
COLOURS = ["red", "blue", "green", "grey", "white"]


@dataclass(frozen=True)
class Fact:
    question: str
    file_name: str
    value: str  # what a right answer says
    page: int | None = None  # where a citation must point (page or slide), if anywhere
    rows: bool = False  # a citation must name a row range (sheets, CSV)


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def word_file(rng: random.Random) -> tuple[bytes, list[Fact]]:
    import docx

    hours = rng.randint(3, 9)
    rates = {city: rng.randint(40, 180) for city in CITIES}
    document = docx.Document()
    document.add_heading("Travel policy", level=1)
    document.add_heading("Trains", level=2)
    document.add_paragraph(
        "Employees travelling by train book second class. A journey longer than "
        f"{hours} hours may be booked in first class."
    )
    document.add_heading("Daily allowances", level=2)
    document.add_paragraph("The daily allowance covers meals and local transport.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "City", "Daily allowance (EUR)"
    for city, rate in rates.items():
        cells = table.add_row().cells
        cells[0].text, cells[1].text = city, str(rate)
    name = "travel-policy.docx"
    oslo, riga = rates["Oslo"], rates["Riga"]
    return saved(document), [
        Fact("From how many hours may a train journey be booked in first class?", name,
             str(hours)),
        Fact("What is the daily allowance in Oslo?", name, str(oslo)),
        Fact("How much is the daily allowance for a trip to Riga?", name, str(riga)),
    ]  # fmt: skip


def deck_file(rng: random.Random) -> tuple[bytes, list[Fact]]:
    from pptx import Presentation
    from pptx.util import Inches

    rate, people, month = rng.randint(900, 989) / 10, rng.randint(12, 60), rng.choice(
        ["February", "March", "April", "May", "June"])  # fmt: skip
    deck = Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[0])
    title.shapes.title.text = "Third quarter review"
    deliveries = deck.slides.add_slide(deck.slide_layouts[1])
    deliveries.shapes.title.text = "Deliveries"
    deliveries.placeholders[
        1
    ].text_frame.text = f"On-time delivery reached {rate} % in the third quarter."
    teams = deck.slides.add_slide(deck.slide_layouts[5])
    teams.shapes.title.text = "Headcount"
    shape = teams.shapes.add_table(4, 2, Inches(1), Inches(2), Inches(6), Inches(2))
    for row, values in enumerate([("Team", "People"), ("Dispatch", str(people)),
                                  ("Customer care", "9"), ("Fleet", "14")]):  # fmt: skip
        for column, value in enumerate(values):
            shape.table.cell(row, column).text = value
    plans = deck.slides.add_slide(deck.slide_layouts[1])
    plans.shapes.title.text = "Next steps"
    plans.placeholders[1].text_frame.text = "A second depot in France."
    plans.notes_slide.notes_text_frame.text = f"The Lyon depot opens in {month} 2027."
    name = "quarterly-review.pptx"
    return saved(deck), [
        Fact("What was the on-time delivery rate in the third quarter?", name, str(rate), 2),
        Fact("How many people work in the Dispatch team?", name, str(people), 3),
        Fact("When does the Lyon depot open?", name, month, 4),
    ]


def stock_rows(rng: random.Random, count: int) -> list[tuple[str, str, str, int]]:
    items = ["pallet wrap", "cardboard box", "tape roll", "label printer", "hand truck"]
    return [(f"S-{1000 + 7 * i}", rng.choice(items), rng.choice(CITIES), rng.randint(1, 999))
            for i in range(count)]  # fmt: skip


def workbook_file(rng: random.Random, count: int = 80) -> tuple[bytes, list[Fact]]:
    from openpyxl import Workbook

    rows = stock_rows(rng, count)
    book = Workbook()
    sheet = book.active
    sheet.title = "Stock"
    sheet.append(["SKU", "Item", "Warehouse", "Quantity"])
    for row in rows:
        sheet.append(list(row))
    name = "stock.xlsx"
    picked = rng.sample(rows, 3)
    return saved(book), [
        Fact(f"How many units of SKU {sku} are in stock?", name, str(quantity), rows=True)
        for sku, _, _, quantity in picked
    ]


def csv_file(rng: random.Random, count: int = 50) -> tuple[bytes, list[Fact]]:
    first = ["Ines", "Karl", "Mia", "Omar", "Lena", "Piet", "Sara", "Tomas"]
    last = ["Laurent", "Berg", "Novak", "Haddad", "Costa", "Visser", "Moreau", "Kowalski"]
    rows = [(f"Supplier {i:02d}", rng.choice(CITIES), f"{rng.choice(first)} {rng.choice(last)}",
             rng.choice([15, 30, 45, 60, 90])) for i in range(1, count + 1)]  # fmt: skip
    text = "Supplier,City,Contact,Payment terms (days)\n" + "".join(
        f"{s},{c},{p},{d}\n" for s, c, p, d in rows
    )
    name = "suppliers.csv"
    a, b, c = rng.sample(rows, 3)
    return text.encode(), [
        Fact(f"Who is the contact at {a[0]}?", name, a[2], rows=True),
        Fact(f"What are the payment terms of {b[0]}?", name, str(b[3]), rows=True),
        Fact(f"In which city is {c[0]}?", name, c[1], rows=True),
    ]


def mail_file(rng: random.Random) -> tuple[bytes, list[Fact]]:
    day, hour = rng.choice(WEEKDAYS), f"{rng.randint(8, 15)}:{rng.choice(['00', '30'])}"
    room = f"B{rng.randint(100, 499)}"
    mail = EmailMessage()
    mail["Subject"] = "Audit visit"
    mail["From"] = "Nadia Petrov <audit@verity.example>"
    mail["To"] = "operations@initech.example"
    mail["Date"] = "Mon, 02 Nov 2026 09:12:00 +0100"
    mail.set_content(
        f"Hello,\n\nThe auditor arrives on {day} at {hour}. Please book meeting room {room} "
        "for the whole day and have the stock ledger ready.\n\nBest regards,\nNadia Petrov"
    )
    name = "audit-visit.eml"
    return bytes(mail), [
        Fact("On which day does the auditor arrive?", name, day),
        Fact("Which meeting room should be booked for the audit?", name, room),
        Fact("Who wrote the e-mail about the audit visit?", name, "Nadia Petrov"),
    ]


def scan_file(rng: random.Random) -> tuple[bytes, list[Fact]]:
    notes = [(rng.randint(20000, 29999), rng.randint(3, 40), rng.choice(CITIES))
             for _ in range(3)]  # fmt: skip
    pages = [[f"Delivery note DN-{number}",
              f"{pallets} pallets of packaging material were delivered to the {city} "
              "warehouse. The driver waited 20 minutes at the gate.",
              "Received in good condition."] for number, pallets, city in notes]  # fmt: skip
    name = "delivery-notes-scan.pdf"
    return scanned_pdf(pages), [
        Fact(f"How many pallets were delivered with delivery note DN-{number}?", name,
             str(pallets), page)
        for page, (number, pallets, _) in enumerate(notes, start=1)
    ]  # fmt: skip


def table_files(rng: random.Random, lookups: int = 10) -> dict[str, tuple[bytes, list[Fact]]]:
    """A ruled and an unruled price list; ``lookups`` cell questions on each."""
    files = {}
    for name, ruled, prefix in [("price-list.pdf", True, "GX"), ("spec-sheet.pdf", False, "TR")]:
        rows = [[f"{prefix}-{10 + 3 * i}", str(rng.randint(20, 400)), f"{rng.randint(500, 9999):,}",
                 rng.choice(COLOURS)] for i in range(25)]  # fmt: skip
        data = table_pdf(["Model", "Capacity (kg)", "Price (EUR)", "Colour"], rows, ruled,
                         "Models available in 2027.", "Prices exclude VAT.")  # fmt: skip
        facts = []
        for model, capacity, price, colour in rng.sample(rows, lookups):
            column, value = rng.choice([("capacity", capacity), ("price", price),
                                        ("colour", colour)])  # fmt: skip
            facts.append(Fact(f"What is the {column} of model {model}?", name, value, 1))
        files[name] = (data, facts)
    return files


DEVELOPMENT, HELD_OUT = 20261205, 7


def corpus(seed: int = DEVELOPMENT) -> dict[str, tuple[bytes, list[Fact]]]:
    rng = random.Random(seed)
    files = {}
    for make in (word_file, deck_file, workbook_file, csv_file, mail_file, scan_file):
        data, facts = make(rng)
        files[facts[0].file_name] = (data, facts)
    return {**files, **table_files(rng)}


# --- OCR ---------------------------------------------------------------------------------


def edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def ocr_accuracy(pages_per_language: int = 5) -> None:
    from benchmarks.wiki import articles

    print("== OCR: clean 200-dpi scans, DejaVu Sans 11 pt, through the PDF loader")
    for language in ("en", "fr"):
        # one summary per page, as long as fits it (35 lines of 80 characters)
        texts = [a["extract"] for a in articles(language) if 1200 < len(a["extract"]) < 2600]
        pages = [[text] for text in texts[:pages_per_language]]
        began = time.perf_counter()
        document = load_document(scanned_pdf(pages), "scan.pdf", LoaderLimits())
        seconds = time.perf_counter() - began
        read = " ".join(document.text.split())
        reference = " ".join(" ".join(p for page in pages for p in page).split())
        errors = edit_distance(reference, read)
        print(f"{language}: {len(pages)} pages, {len(reference):,} characters, {errors} edits, "
              f"character accuracy {1 - errors / len(reference):.4f}, "
              f"{len(pages) / seconds:.2f} pages/s")  # fmt: skip


# --- Throughput ----------------------------------------------------------------------------


def large_files(rng: random.Random) -> dict[str, tuple[bytes, str]]:
    """One larger file per format, with what its size is counted in."""
    import docx
    from openpyxl import Workbook
    from pptx import Presentation

    from benchmarks.wiki import articles

    prose = [a["extract"] for a in articles("en")[:400]]
    word = docx.Document()
    for number, text in enumerate(prose[:200]):
        if number % 10 == 0:
            word.add_heading(f"Part {number // 10 + 1}", level=1)
        word.add_paragraph(text)
    deck = Presentation()
    for number, text in enumerate(prose[200:300]):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide {number + 1}"
        slide.placeholders[1].text_frame.text = text
    book = Workbook()
    book.active.append(["SKU", "Item", "Warehouse", "Quantity"])
    rows = stock_rows(rng, 5000)
    for row in rows:
        book.active.append(list(row))
    csv = "SKU,Item,Warehouse,Quantity\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows)
    mail = EmailMessage()
    mail["Subject"], mail["From"] = "Digest", "news@initech.example"
    mail.set_content("\n\n".join(prose[300:350]))
    table_rows = [[f"GX-{i}", str(rng.randint(20, 400)), f"{rng.randint(500, 9999):,}",
                   rng.choice(COLOURS)] for i in range(250)]  # fmt: skip
    tables = table_pdf(["Model", "Capacity (kg)", "Price (EUR)", "Colour"], table_rows, True)
    return {
        "large.docx": (saved(word), "200 paragraphs"),
        "large.pptx": (saved(deck), "100 slides"),
        "large.xlsx": (saved(book), "5,000 rows"),
        "large.csv": (csv.encode(), "5,000 rows"),
        "large.eml": (bytes(mail), "50 paragraphs"),
        "large-tables.pdf": (tables, "250 table rows"),
        "large-scan.pdf": (scanned_pdf([[p] for p in prose[350:360]]), "10 scanned pages"),
    }


def throughput(config) -> None:
    from index.pipeline import SourceFile
    from index.service import IndexService

    files = large_files(random.Random(7))
    print("== Ingestion throughput (one file per format; parse alone, then the whole ingestion)")
    with tempfile.TemporaryDirectory(prefix="grounded-formats-") as tmp:
        service = IndexService(config.index, Path(tmp)).start()
        service.pipeline("warmup")  # the embedder loaded before any clock starts
        list(service.pipeline("warmup").ingest([SourceFile.from_bytes(b"warm up", "w.txt")]))
        for name, (data, size) in files.items():
            began = time.perf_counter()
            document = load_document(data, name, config.index.limits, config.index.ocr)
            parsed = time.perf_counter() - began
            began = time.perf_counter()
            (result,) = list(
                service.pipeline("formats").ingest([SourceFile.from_bytes(data, name)])
            )
            total = time.perf_counter() - began
            print(f"{name:18} {size:17} {len(data) / 1024:8.0f} KiB {len(document.text):9,} chars"
                  f"  parse {parsed:6.2f} s  ingest {total:6.2f} s ({result.status}, "
                  f"{result.chunks} chunks)")  # fmt: skip
        service.close()


# --- Answers through the chat API ----------------------------------------------------------


def normalised(text: str) -> str:
    return re.sub(r"(?<=\d)[,\s](?=\d{3}\b)", "", text.casefold())


def answers(config, seed: int) -> None:
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up

    files = corpus(seed)
    _, key = KeyStore(config.data_dir).create("formats")
    running = up.start(config, dashboard=False)
    results: list[tuple[Fact, bool, bool, bool, str]] = []
    try:
        client = openai.OpenAI(base_url=running.api_url, api_key=key, timeout=600,
                               max_retries=0)  # fmt: skip
        for name, (data, _) in files.items():
            uploaded = client.files.create(file=(name, data), purpose="assistants")
            while uploaded.status not in ("processed", "error"):
                time.sleep(1)
                uploaded = client.files.retrieve(uploaded.id)
            print(f"uploaded {name}: {uploaded.status}")
        for facts in [f for _, f in files.values()]:
            for fact in facts:
                completion = client.chat.completions.create(
                    model="grounded", max_tokens=160,
                    messages=[{"role": "user", "content": fact.question}],
                )  # fmt: skip
                text = completion.choices[0].message.content or ""
                cited = [c for c in completion.model_extra["grounded"]["citations"]
                         if c["filename"] == fact.file_name]  # fmt: skip
                right = normalised(fact.value) in normalised(text)
                placed = any(
                    (fact.page is None or c.get("page") == fact.page)
                    and (not fact.rows or any("rows" in h for h in c.get("heading_path") or []))
                    for c in cited
                )
                results.append((fact, right, bool(cited), placed, text))
                mark = "ok " if right and cited and placed else "MISS"
                print(f"{mark} {fact.file_name:24} {fact.question} -> {text[:120]!r}")
    finally:
        running.stop()
    print("\n== Per format: answered right and cited / placed (slide, page or rows)")
    kinds = {"price-list.pdf": "PDF table, ruled", "spec-sheet.pdf": "PDF table, unruled",
             "delivery-notes-scan.pdf": "scanned PDF"}  # fmt: skip
    groups: dict[str, list] = {}
    for result in results:
        name = result[0].file_name
        groups.setdefault(kinds.get(name, Path(name).suffix), []).append(result)
    for kind, group in [*groups.items(), ("all", results)]:
        right = sum(r[1] and r[2] for r in group)
        placed = sum(r[1] and r[2] and r[3] for r in group)
        print(f"{kind:20} {right}/{len(group)} right and cited, {placed}/{len(group)} placed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--part", choices=["ocr", "throughput", "answers", "all"], default="all")
    parser.add_argument(
        "--seed",
        type=int,
        default=HELD_OUT,
        help=f"the facts' seed: {DEVELOPMENT} (development: mechanisms were chosen on it) or "
        f"{HELD_OUT} (held out: reported)",
    )
    args = parser.parse_args()
    from serve.config import load_config

    if args.part in ("ocr", "all"):
        ocr_accuracy()
    with tempfile.TemporaryDirectory(prefix="grounded-formats-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        (data / "models").symlink_to(ROOT / "data" / "models")
        config = load_config(Path(args.config), data_dir=data)
        if args.part in ("throughput", "all"):
            throughput(config)
        if args.part in ("answers", "all"):
            answers(config, args.seed)


if __name__ == "__main__":
    main()
