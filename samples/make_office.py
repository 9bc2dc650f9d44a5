"""Regenerate the Office and scanned samples of tenant initech (committed; run only after
editing the text below).

    .venv/bin/python samples/make_office.py

python-docx, python-pptx and openpyxl write the Office files; the scan is drawn by Pillow with
Debian's DejaVu Sans (fonts-dejavu-core) and wrapped in a PDF by fpdf2, as a scanner would.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent / "corpus" / "initech"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def fleet_policy(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Initech vehicle fleet policy", level=0)
    document.add_heading("Company cars", level=1)
    document.add_paragraph(
        "Employees in sales roles may book a company car for customer visits. The car is "
        "returned to the depot it was taken from, with at least a quarter of a tank."
    )
    document.add_paragraph(
        "The fuel card covers up to 400 EUR per month; receipts are filed within 30 days."
    )
    document.add_heading("Electric vans", level=1)
    document.add_paragraph("Each depot has its own electric vans, charged overnight.")
    table = document.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Van", "Depot", "Range (km)"), strict=True):
        cell.text = text
    for van in [("EV-01", "Rotterdam", "240"), ("EV-02", "Rotterdam", "310"),
                ("EV-03", "Antwerp", "280"), ("EV-04", "Lille", "195")]:  # fmt: skip
        for cell, text in zip(table.add_row().cells, van, strict=True):
            cell.text = text
    document.add_heading("Accidents", level=1)
    for step in ["Make the place safe and call the emergency services if anyone is hurt.",
                 "Fill in the joint accident report with the other driver.",
                 "Send the report to fleet@initech.example within 48 hours."]:  # fmt: skip
        document.add_paragraph(step, style="List Number")
    document.save(path)


def quarterly_review(path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[0])
    title.shapes.title.text = "Initech: third quarter 2026"
    title.placeholders[1].text = "Operations review"
    for heading, text, notes in [
        ("Deliveries", "On-time delivery reached 96.4 % in the third quarter, up from 93.1 %.",
         "Most late deliveries were on the Antwerp route."),
        ("Warehouses", "Rotterdam handled 41,200 pallets; Antwerp 18,900.", ""),
        ("Next steps", "A third depot, in Lyon, opens in March 2027.",
         "The Lyon lease is signed; hiring starts in January."),
    ]:  # fmt: skip
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = heading
        slide.placeholders[1].text_frame.text = text
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(path)


def warehouse_stock(path: Path) -> None:
    from openpyxl import Workbook

    items = [
        ("W-100", "Pallet wrap, 500 mm", 320, 100), ("W-220", "Cardboard box, large", 1450, 500),
        ("W-221", "Cardboard box, small", 2100, 500), ("W-310", "Packing tape", 860, 200),
        ("W-415", "Shipping labels, roll", 95, 120), ("W-502", "Hand truck", 12, 4),
        ("W-610", "Stretch film dispenser", 7, 3), ("W-733", "Corner protectors", 3400, 1000),
    ]  # fmt: skip
    book = Workbook()
    for warehouse, factor in (("Rotterdam", 1.0), ("Antwerp", 0.5)):
        sheet = book.create_sheet(warehouse)
        sheet.append(["SKU", "Item", "In stock", "Reorder level"])
        for sku, item, stock, reorder in items:
            sheet.append([sku, item, int(stock * factor), reorder])
    del book["Sheet"]
    book.save(path)


def delivery_note_scan(path: Path) -> None:
    from tests.documents import scanned_pdf

    path.write_bytes(
        scanned_pdf([[
            "INITECH LOGISTICS - DELIVERY NOTE DN-20931",
            "Delivered to: Rotterdam warehouse, Dock 4. Date: 3 November 2026.",
            "14 pallets of cardboard boxes (large), 2 pallets of packing tape.",
            "Received in good condition by M. de Vries at 10:40.",
        ]])
    )  # fmt: skip


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    fleet_policy(HERE / "fleet-policy.docx")
    quarterly_review(HERE / "quarterly-review.pptx")
    warehouse_stock(HERE / "warehouse-stock.xlsx")
    delivery_note_scan(HERE / "delivery-note-scan.pdf")
    for made in sorted(HERE.iterdir()):
        print(made, made.stat().st_size)
