"""Word, PowerPoint, Excel, CSV and e-mail, generated here with the libraries that write them."""

import io
import zipfile
from email.message import EmailMessage

import pytest

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError, UnsupportedFileError
from index.loaders import load_document

pytestmark = pytest.mark.unit
LIMITS = LoaderLimits()


def blocks(document):
    return [
        (b.kind, b.heading_path, b.page, document.text[b.start : b.end]) for b in document.blocks
    ]


def word_file() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Maintenance contract", level=1)
    document.add_paragraph("The contract, reference 44-A/2024, covers the dock doors.")
    document.add_heading("Term", level=2)
    document.add_paragraph("It runs for three years.")
    document.add_paragraph("Doors", style="List Bullet")
    document.add_paragraph("Levellers", style="List Bullet")
    table = document.add_table(rows=3, cols=2)
    for row, values in zip(table.rows, [("Model", "Capacity"), ("GX-1", "40 kg"),
                                        ("GX-2", "80 kg")], strict=True):  # fmt: skip
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_word_headings_lists_and_tables_keep_their_structure():
    document = load_document(word_file(), "contract.docx", LIMITS)
    found = blocks(document)
    assert ("heading", ("Maintenance contract", "Term"), None, "Term") in found
    assert (
        "paragraph",
        ("Maintenance contract", "Term"),
        None,
        "It runs for three years.",
    ) in found
    assert ("list", ("Maintenance contract", "Term"), None, "- Doors\n- Levellers") in found
    [table] = [text for kind, _, _, text in found if kind == "table"]
    assert table.splitlines() == ["| Model | Capacity |", "| --- | --- |", "| GX-1 | 40 kg |",
                                  "| GX-2 | 80 kg |"]  # fmt: skip


def deck_file() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Roadmap"
    first.placeholders[1].text_frame.text = "Ship GX-5 in March."
    first.notes_slide.notes_text_frame.text = "Say the date twice."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Prices"
    shape = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1))
    for (row, col), value in {(0, 0): "Model", (0, 1): "Price", (1, 0): "GX-5",
                              (1, 1): "1,200 EUR"}.items():  # fmt: skip
        shape.table.cell(row, col).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_each_slide_is_a_page_titled_by_its_title_with_notes_marked():
    document = load_document(deck_file(), "roadmap.pptx", LIMITS)
    found = blocks(document)
    assert ("paragraph", ("Slide 1: Roadmap",), 1, "Ship GX-5 in March.") in found
    assert ("quote", ("Slide 1: Roadmap", "Speaker notes"), 1,
            "Speaker notes: Say the date twice.") in found  # fmt: skip
    [table] = [b for b in found if b[0] == "table"]
    assert table[1:3] == (("Slide 2: Prices",), 2) and "| GX-5 | 1,200 EUR |" in table[3]
    assert document.page_count == 2


def workbook_file(rows: int = 3) -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Capacity"
    sheet.append(["Model", "Capacity (kg)", "Price"])
    for i in range(rows):
        sheet.append([f"GX-{i}", 40 + i, 1000.0 + i])
    book.create_sheet("Empty")
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_a_sheets_rows_name_their_columns_and_blocks_their_row_numbers():
    document = load_document(workbook_file(rows=60), "models.xlsx", LIMITS)
    tables = [(path, text) for kind, path, _, text in blocks(document) if kind == "table"]
    assert len(tables) > 1  # cut into blocks of whole rows
    assert tables[0][0] == ("Capacity", "rows 2-" + tables[0][0][1].split("-")[1])
    assert tables[0][1].splitlines()[0] == "Model: GX-0; Capacity (kg): 40; Price: 1000."
    for _, text in tables:
        assert all(line.startswith("Model: GX-") for line in text.splitlines())
    assert tables[-1][0][1].endswith("-61")  # the sheet's own row numbers: header in row 1


def test_csv_rows_read_like_a_sheet():
    data = b"Model;Capacity\nGX-1;40 kg\nGX-2;80 kg\n"
    document = load_document(data, "models.csv", LIMITS)
    [(_, path, _, text)] = [b for b in blocks(document) if b[0] == "table"]
    assert path == ("rows 2-3",) and text.splitlines()[1] == "Model: GX-2; Capacity: 80 kg."


def test_too_many_rows_are_refused_naming_the_limit():
    with pytest.raises(FileTooLargeError, match=r"limits\.max_rows"):
        load_document(workbook_file(rows=30), "big.xlsx", LoaderLimits(max_rows=10))


def mail_file() -> bytes:
    message = EmailMessage()
    message["Subject"] = "Dock door visit"
    message["From"] = "Nordlift <service@nordlift.example>"
    message["To"] = "ops@globex.example"
    message["Date"] = "Tue, 12 Mar 2024 09:30:00 +0100"
    message.set_content("The technician comes on Thursday at 9:30.\n\nBring the badge.")
    message.add_attachment("Door 4: spring replaced.", filename="report.txt")
    message.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="a.pdf")
    return bytes(message)


def test_an_email_gives_its_subject_sender_date_body_and_text_attachments():
    document = load_document(mail_file(), "visit.eml", LIMITS)
    found = blocks(document)
    assert found[0] == ("heading", ("Dock door visit",), None, "Dock door visit")
    assert "From: Nordlift <service@nordlift.example>" in found[1][3]
    assert "Date: Tue, 12 Mar 2024 09:30:00 +0100" in found[1][3]
    assert ("paragraph", ("Dock door visit",), None,
            "The technician comes on Thursday at 9:30.") in found  # fmt: skip
    assert ("paragraph", ("Dock door visit", "Attachment: report.txt"), None,
            "Door 4: spring replaced.") in found  # fmt: skip
    assert "a.pdf (application/pdf)" in found[-1][3]  # named, with why it was not read


def zipped(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "limits", "error", "says"),
    [
        (b"%PDF-1.7 ...", LIMITS, MalformedDocumentError, "it is a PDF"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100), LIMITS, UnsupportedFileError,
         "password-protected or pre-2007"),
        (zipped({"word/document.xml": bytes(2_000_000)}), LoaderLimits(max_unzipped_bytes=10**6),
         FileTooLargeError, "limits.max_unzipped_bytes"),
        (zipped({f"x{i}": b"" for i in range(20)}), LoaderLimits(max_zip_entries=10),
         FileTooLargeError, "limits.max_zip_entries"),
        (zipped({"word/vbaProject.bin": b"x"}), LIMITS, UnsupportedFileError, "macros"),
        (b"PK\x03\x04 not really", LIMITS, MalformedDocumentError, "damaged"),
    ],
)  # fmt: skip
def test_a_hostile_or_mistyped_office_file_is_refused_with_the_reason(data, limits, error, says):
    with pytest.raises(error, match=says):
        load_document(data, "notes.docx", limits)


@pytest.mark.parametrize(
    ("name", "make"), [("a.docx", word_file), ("a.pptx", deck_file), ("a.xlsx", workbook_file)]
)
def test_corrupted_office_files_are_refused_with_a_message_never_a_crash(name, make):
    """200 damaged copies per format (bytes flipped, cut short, or parts of the archive
    dropped, seeded): each reads or is refused with a DocumentRefusedError naming the file."""
    import random

    from index.errors import DocumentRefusedError

    rng, original = random.Random(20261204), make()
    outcomes = {"read": 0, "refused": 0}
    for _ in range(200):
        data = bytearray(original)
        how = rng.randrange(3)
        if how == 0:  # flipped bytes
            for _ in range(rng.randint(1, 40)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == 1:  # cut short
            data = data[: rng.randrange(len(data))]
        else:  # an archive missing some of its parts
            with zipfile.ZipFile(io.BytesIO(original)) as archive:
                kept = {
                    i.filename: archive.read(i) for i in archive.infolist() if rng.random() > 0.3
                }
            data = bytearray(zipped(kept))
        try:
            load_document(bytes(data), name, LIMITS)
            outcomes["read"] += 1
        except DocumentRefusedError as refused:
            assert refused.message.startswith(name) and len(refused.message) > len(name) + 5
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50, outcomes  # the damage was real
