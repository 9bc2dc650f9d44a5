"""PDF tables (ruled and not), scanned PDF pages and images read by Tesseract, generated here."""

import io
import random

import pytest

from index.config import LoaderLimits, OcrConfig
from index.errors import (
    DocumentRefusedError,
    FileTooLargeError,
    IngestCancelledError,
    MalformedDocumentError,
    OcrUnavailableError,
)
from index.loaders import load_document
from index.loaders.ocr import OCR_MARK, OcrReader
from tests.documents import make_pdf, scan_image, scanned_pdf, table_pdf

pytestmark = pytest.mark.unit
LIMITS = LoaderLimits()
HEADER = ["Model", "Capacity (kg)", "Price (EUR)"]
ROWS = [[f"GX-{i}", str(10 + i), f"{1000 + 7 * i:,}"] for i in range(30)]
CONTRACT = "Le contrat de maintenance numéro 44-A/2024 est conclu pour une durée de trois ans."
ARM = "The GX-4200 collaborative arm handles parts of up to 12 kg near people."


def blocks(document, kind=None):
    return [
        (b.kind, b.heading_path, b.page, document.text[b.start : b.end])
        for b in document.blocks
        if kind is None or b.kind == kind
    ]


@pytest.mark.parametrize("ruled", [True, False], ids=["ruled", "unruled"])
def test_a_pdf_table_is_read_as_markdown_tables_that_repeat_the_header(ruled):
    data = table_pdf(HEADER, ROWS, ruled, "Catalogue for 2025.", "Prices exclude VAT.")
    document = load_document(data, "catalogue.pdf", LIMITS)
    tables = [text for _, _, _, text in blocks(document, "table")]
    assert len(tables) >= 2  # 30 rows do not fit one block
    header = "| Model | Capacity (kg) | Price (EUR) |\n| --- | --- | --- |\n"
    assert all(t.startswith(header) for t in tables)
    body = [line for t in tables for line in t.split("\n")[2:]]
    assert body == [f"| {m} | {c} | {p} |" for m, c, p in ROWS]  # every row once, whole
    texts = [text for kind, _, page, text in blocks(document) if kind == "paragraph"]
    assert texts == ["Catalogue for 2025.", "Prices exclude VAT."]
    assert {b.page for b in document.blocks} == {1}


def test_prose_and_lists_are_not_mistaken_for_tables():
    prose = "The arm must not be used to lift people, in explosive atmospheres or outdoors. " * 6
    steps = "\n".join(f"{n}. Check the {part} before use." for n, part in
                      enumerate(["gripper", "cable", "base", "controller"], start=1))  # fmt: skip
    document = load_document(make_pdf([[("Use", prose), (None, steps)]] * 2), "m.pdf", LIMITS)
    assert not blocks(document, "table")
    assert "Check the cable before use." in document.text


def test_a_scanned_pdf_is_read_by_ocr_page_by_page_and_marked():
    document = load_document(scanned_pdf([[CONTRACT], [ARM]]), "scan.pdf", LIMITS)
    assert document.page_count == 2
    read = {page: text for _, _, page, text in blocks(document)}
    assert "44-A/2024" in read[1] and "trois ans" in read[1]
    assert "GX-4200" in read[2] and "12 kg" in read[2]
    assert {b.heading_path for b in document.blocks} == {(OCR_MARK,)}


def test_a_pdf_with_a_text_layer_is_not_sent_to_ocr(monkeypatch):
    monkeypatch.setattr(OcrReader, "read", lambda *a: pytest.fail("OCR of a text page"))
    load_document(make_pdf([[(None, ARM)]]), "text.pdf", LIMITS)


@pytest.mark.parametrize("format", ["PNG", "JPEG", "TIFF"])
def test_an_image_is_read_by_ocr(format):
    out = io.BytesIO()
    scan_image([ARM]).save(out, format=format)
    document = load_document(out.getvalue(), f"photo.{format.lower()}", LIMITS)
    ((_, path, page, text),) = blocks(document)
    assert "GX-4200" in text and path == (OCR_MARK,) and page == 1


def test_each_frame_of_a_tiff_is_a_page():
    out = io.BytesIO()
    first, second = scan_image([CONTRACT]), scan_image([ARM])
    first.save(out, format="TIFF", save_all=True, append_images=[second])
    document = load_document(out.getvalue(), "fax.tiff", LIMITS)
    assert document.page_count == 2
    assert [page for *_, page, _ in blocks(document)] == [1, 2]


def test_a_deleted_file_stops_being_read_between_pages():
    asked = []

    def cancelled():  # the file is deleted once its first page has been read
        asked.append(1)
        return len(asked) > 1

    reader = OcrReader(OcrConfig(), cancelled)
    with pytest.raises(IngestCancelledError, match="deleted") as stopped:
        load_document(scanned_pdf([[CONTRACT], [ARM], [ARM]]), "scan.pdf", LIMITS, reader)
    assert stopped.value.status == 409
    assert len(asked) == 2  # page 1 asked once before its process; page 2 stopped before its own


def test_a_page_being_read_is_killed_when_its_file_is_deleted(monkeypatch):
    import index.loaders.ocr as ocr

    started = []
    popen = ocr.subprocess.Popen

    def record(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(ocr.subprocess, "Popen", record)
    monkeypatch.setattr(ocr, "POLL_S", 0.01)  # a 300-dpi page takes Tesseract far longer
    reader = OcrReader(OcrConfig(), lambda: bool(started))
    with pytest.raises(IngestCancelledError):
        reader.read(scan_image([CONTRACT, ARM] * 8), "scan.png", "page 1")
    assert started[0].returncode == -9  # killed, and waited for (no zombie)


# A page's process that stops itself before Tesseract starts gets no CPU at all, as a
# SCHED_IDLE process does where no core is ever idle (measured: two busy processes on this
# 2-core machine kept `chrt --idle 0 tesseract` from running for 30 s; at nice 19 it finished).
_STOPPED = ("sh", "-c", 'kill -STOP $$; exec "$@"', "sh")


def test_a_page_that_gets_no_cpu_is_read_again_at_the_lowest_normal_priority(monkeypatch, caplog):
    import index.loaders.ocr as ocr

    started = []
    popen = ocr.subprocess.Popen

    def record(command, *args, **kwargs):
        started.append(popen(command, *args, **kwargs))
        started[-1].command = command
        return started[-1]

    monkeypatch.setattr(ocr.subprocess, "Popen", record)
    monkeypatch.setattr(ocr, "POLL_S", 0.05)
    monkeypatch.setattr(ocr, "_PRIORITIES", (_STOPPED, ocr._NICE))
    reader = OcrReader(OcrConfig(idle_wait_s=0.5, page_timeout_s=2))
    text = reader.read(scan_image([ARM]), "scan.png", "page 1")
    assert "12 kg" in text
    assert len(started) == 2
    assert started[0].command[: len(_STOPPED)] == list(_STOPPED)
    assert started[1].command[: len(ocr._NICE)] == list(ocr._NICE)
    assert started[0].returncode == -9  # the starved process was killed and waited for
    assert "page 1 got less than 1 % of a core over 0.5 s" in caplog.text


def test_a_page_is_read_whole_however_late_tesseract_starts_reading_it(monkeypatch):
    """A page larger than a pipe's buffer (64 KiB), whose Tesseract starts reading only after
    the first poll: through a pipe, the rest of the page was never sent (communicate() sends
    no more input after a timeout) and the page waited until its deadline."""
    import index.loaders.ocr as ocr

    monkeypatch.setattr(ocr, "POLL_S", 0.05)
    monkeypatch.setattr(ocr, "_PRIORITIES", (("sh", "-c", 'sleep 0.5; exec "$@"', "sh"),))
    image = scan_image([ARM] * 20, dpi=300)  # 175 KB as PNG
    text = OcrReader(OcrConfig(page_timeout_s=3)).read(image, "late.png", "page 1")
    assert text.count("12 kg") >= 18


def test_a_page_that_never_gets_a_cpu_fails_its_file_with_the_reason(monkeypatch):
    import index.loaders.ocr as ocr

    monkeypatch.setattr(ocr, "POLL_S", 0.05)
    monkeypatch.setattr(ocr, "_PRIORITIES", (_STOPPED,))
    out = io.BytesIO()
    scan_image([ARM]).save(out, format="PNG")
    with pytest.raises(MalformedDocumentError, match=r"waited more than 1 s for a CPU") as failed:
        load_document(out.getvalue(), "busy.png", LIMITS, OcrConfig(page_timeout_s=0.1))
    assert "too busy" in failed.value.message


def test_ocr_is_refused_with_the_reason_where_it_cannot_run(monkeypatch):
    out = io.BytesIO()
    scan_image([ARM]).save(out, format="PNG")
    with pytest.raises(OcrUnavailableError, match=r"index\.ocr\.enabled is false") as refused:
        load_document(out.getvalue(), "a.png", LIMITS, OcrConfig(enabled=False))
    assert refused.value.status == 503
    with pytest.raises(OcrUnavailableError, match="language pack"):
        load_document(out.getvalue(), "a.png", LIMITS, OcrConfig(languages=("xyz",)))
    import index.loaders.ocr as ocr

    monkeypatch.setattr(ocr.shutil, "which", lambda name: None)
    with pytest.raises(OcrUnavailableError, match="apt-get install tesseract-ocr"):
        load_document(scanned_pdf([[ARM]]), "scan.pdf", LIMITS)


def test_scans_over_the_limits_are_refused_naming_them():
    with pytest.raises(FileTooLargeError, match=r"limits\.max_ocr_pages"):
        load_document(scanned_pdf([[ARM]] * 3), "s.pdf", LoaderLimits(max_ocr_pages=2))
    out = io.BytesIO()
    scan_image([ARM], dpi=100).save(out, format="PNG")
    with pytest.raises(FileTooLargeError, match=r"limits\.max_image_pixels"):
        load_document(out.getvalue(), "big.png", LoaderLimits(max_image_pixels=500_000))
    for side in (12_000, 40_000):  # over our limit; over Pillow's own too
        with pytest.raises(FileTooLargeError, match=r"limits\.max_image_pixels"):
            load_document(png_header(side, side), "bomb.png", LIMITS)


def png_header(width: int, height: int) -> bytes:
    """The start of a PNG that claims ``width`` x ``height`` pixels (what a bomb shows first)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0"))


def test_a_file_that_is_not_the_image_its_name_says_is_refused():
    with pytest.raises(MalformedDocumentError, match="not a PNG, JPEG or TIFF"):
        load_document(b"%PDF-1.7 not an image", "scan.png", LIMITS)
    gif = io.BytesIO()
    scan_image([ARM], dpi=50).save(gif, format="GIF")
    with pytest.raises(MalformedDocumentError, match="GIF"):
        load_document(gif.getvalue(), "scan.png", LIMITS)


@pytest.mark.parametrize("format", ["PNG", "JPEG", "TIFF"])
def test_corrupted_images_are_refused_with_a_message_never_a_crash(format, monkeypatch):
    """200 damaged copies per format (bytes flipped or cut short, seeded): each is decoded or
    refused with a DocumentRefusedError naming the file. What a damaged image decodes to is
    not read by Tesseract here (the tests above read real scans): 200 OCR runs per format
    would cost half a minute and test Tesseract, not the decoding."""
    from PIL import Image, ImageDraw

    monkeypatch.setattr(OcrReader, "read", lambda self, image, *where: f"{image.size}")

    image = Image.new("L", (360, 60), 255)
    ImageDraw.Draw(image).text((10, 20), "GX-4200 lifts 12 kg", fill=0)
    out = io.BytesIO()
    image.save(out, format=format)
    rng, original, name = random.Random(20261205), out.getvalue(), f"a.{format.lower()}"
    outcomes = {"read": 0, "refused": 0}
    for _ in range(200):
        data = bytearray(original)
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data = data[: rng.randrange(len(data))]
        try:
            load_document(bytes(data), name, LoaderLimits(max_image_pixels=100_000))
            outcomes["read"] += 1
        except DocumentRefusedError as refused:
            assert refused.message.startswith(name) and len(refused.message) > len(name) + 5
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50, outcomes


def test_a_page_over_its_cpu_time_fails_its_file_with_the_reason(monkeypatch):
    """A dense 300-dpi page takes Tesseract about 3 s of CPU here; one second is its limit.
    Read at the normal priority: on a host whose cores are busy (the other test worker's
    appliance) the idle priority gets no CPU, and the page would fail for its wait instead."""
    import index.loaders.ocr as ocr

    monkeypatch.setattr(ocr, "_PRIORITIES", (("nice", "-n", "0"),))
    out = io.BytesIO()
    scan_image([ARM * 4] * 12, dpi=300).save(out, format="PNG")
    with pytest.raises(MalformedDocumentError, match=r"page_timeout_s \(0\.5 s of CPU\)"):
        load_document(out.getvalue(), "dense.png", LIMITS, OcrConfig(page_timeout_s=0.5))
