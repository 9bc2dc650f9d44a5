"""Small PDFs built in memory for tests (fpdf2 writes them, pypdf encrypts them)."""

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
