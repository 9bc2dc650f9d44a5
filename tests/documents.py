"""Documents built in memory for tests: PDFs (fpdf2 writes them, pypdf encrypts them), scans
(Pillow draws them), Office files and e-mail (the libraries that write those formats)."""

from __future__ import annotations

import io

from fpdf import FPDF
from pypdf import PdfReader, PdfWriter


def make_pdf(pages: list[list[tuple[str | None, str]]]) -> bytes:
    """One list per page of (outline heading or None, paragraph text)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for page in pages:
        pdf.add_page()
        for heading, text in page:
            if heading:
                pdf.start_section(heading)
                pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
            pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
    return bytes(pdf.output())


def encrypt(data: bytes, password: str = "s3cret") -> bytes:
    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(data)).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password + "-owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def table_pdf(
    header: list[str], rows: list[list[str]], ruled: bool, before: str = "", after: str = ""
) -> bytes:
    """One page: a paragraph, a table (with or without ruling lines), a paragraph."""
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    if before:
        pdf.multi_cell(0, 5, before, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(4)
    with pdf.table(borders_layout="ALL" if ruled else "NONE", text_align="LEFT") as table:
        for values in [header, *rows]:
            row = table.row()
            for value in values:
                row.cell(value)
    if after:
        pdf.ln(4)
        pdf.multi_cell(0, 5, after, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # Debian's fonts-dejavu-core


def scan_image(paragraphs: list[str], dpi: int = 200, point_size: int = 11):
    """A clean scan of an A4 page at ``dpi``: black text on white, no text layer."""
    import textwrap

    from PIL import Image, ImageDraw, ImageFont

    width, height = int(8.27 * dpi), int(11.69 * dpi)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(FONT, int(point_size * dpi / 72))
    line_height = int(point_size * 1.5 * dpi / 72)
    y = margin = dpi  # one inch
    for paragraph in paragraphs:
        for line in textwrap.wrap(paragraph, width=80):
            draw.text((margin, y), line, fill=0, font=font)
            y += line_height
        y += line_height
    return image


def scanned_pdf(pages: list[list[str]], dpi: int = 200) -> bytes:
    """A PDF whose pages are only scans (images), as a scanner writes them."""
    pdf = FPDF()
    for paragraphs in pages:
        pdf.add_page()
        pdf.image(scan_image(paragraphs, dpi), x=0, y=0, w=pdf.w, h=pdf.h)
    return bytes(pdf.output())


def format_files() -> dict[str, bytes]:
    """One fact per format, in files written by the libraries that write them: Word,
    PowerPoint, Excel, CSV, e-mail, a scanned PDF, a PDF table without rules and a photo."""
    import io
    from email.message import EmailMessage

    import docx
    from openpyxl import Workbook
    from pptx import Presentation

    def saved(document) -> bytes:
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    word = docx.Document()
    word.add_heading("Osprey site lease", level=1)
    word.add_paragraph("The Osprey site lease, reference LX-8812, runs until 2031.")
    deck = Presentation()
    for title, text in [("Agenda", "Budget review."),
                        ("Roadmap", "The Falcon release ships in September 2027.")]:  # fmt: skip
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = text
    book = Workbook()
    book.active.title = "Capacity"
    book.active.append(["Model", "Capacity (kg)"])
    for i in range(60):
        book.active.append([f"GX-{i}", 40 + i])
    mail = EmailMessage()
    mail["Subject"], mail["From"] = "Dock door visit", "service@nordlift.example"
    mail.set_content("The technician comes on Thursday at 9:30 to replace the spring.")
    photo = io.BytesIO()
    scan_image(["The fire drill is on 14 May at 11:00; meet at assembly point C."]).save(
        photo, format="PNG"
    )
    png = photo.getvalue()
    return {
        "lease.docx": saved(word),
        "roadmap.pptx": saved(deck),
        "capacity.xlsx": saved(book),
        "depots.csv": b"Depot,Manager\nNorth,Ines Laurent\nSouth,Karl Berg\n",
        "visit.eml": bytes(mail),
        "delivery-scan.pdf": scanned_pdf([["Delivery note DN-77120: 9 pallets of tape."]]),
        "prices.pdf": table_pdf(
            ["Model", "Price (EUR)"],
            [[f"TR-{i}", str(300 + 11 * i)] for i in range(20)],
            ruled=False,
        ),
        "whiteboard.png": png,
    }
