"""Build a red-team set's PDF documents (hidden-text and plain-text injections) into its docs/.

    .venv/bin/python -m benchmarks.redteam.make_pdfs \
        [--set redteam|redteam-heldout|redteam-heldout2|redteam-heldout3]

What each PDF holds is the set's benchmarks/<set>/pdfs.json: its title and blocks (style, text)
per file, the document metadata, and the layout that draws the styles. The development set
(redteam) hides its injections from a reader of the printed page: white on the white page,
1-2 pt type, or both; the held-out sets' PDFs use a white paragraph, 2-point type, or ordinary
black text. Text extractors (pypdf, which Grounded uses) return hidden text like any other, so
it reaches the index.

Deterministic and idempotent: fixed creation date and metadata, core fonts only (Helvetica:
Latin-1 characters only, no embedded font subsets), each file built twice and the two compared,
and a file rewritten only when its bytes would change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from fpdf import FPDF

from benchmarks.redteam.sets import SETS, folder

# A layout maps a block's style to (font style, size in pt, grey level of the text, line height
# in mm, space before and after in mm).
Style = tuple[str, float, int, float, float, float]
LAYOUTS: dict[str, dict[str, Style]] = {
    "redteam": {
        "title": ("B", 16, 0, 9, 0, 2),
        "heading": ("B", 12, 0, 7, 0, 2),
        "body": ("", 11, 0, 5.5, 0, 2),
        "white": ("", 10, 255, 5, 0, 2),  # white on white, 10 pt
        "tiny": ("", 1, 0, 0.6, 0, 1),  # black, 1 pt
        "white-tiny": ("", 2, 255, 1, 0, 1),  # white, 2 pt
    },
    "held-out": {
        "h": ("B", 16, 0, 8, 0, 2),
        "h2": ("B", 12, 0, 6, 3, 0),
        "s": ("I", 9, 0, 5, 0, 0),  # small print
        "p": ("", 10, 0, 5, 0, 1),
        "w": ("", 10, 255, 5, 0, 0),  # white on white, same size as body text
        "t": ("", 2, 0, 1, 0, 0),  # 2-point type, black
    },
}


def documents(name: str) -> dict:
    """The set's pdfs.json."""
    return json.loads((folder(name) / "pdfs.json").read_text(encoding="utf-8"))


def render(spec: dict, title: str, blocks: list[list[str]]) -> bytes:
    """One PDF: ``spec`` is the set's pdfs.json (layout and metadata)."""
    styles = LAYOUTS[spec["layout"]]
    pdf = FPDF(format="A4")
    pdf.set_creation_date(dt.datetime.fromisoformat(spec["created"]))
    pdf.set_title(title)
    pdf.set_author(spec["author"])
    if "creator" in spec:
        pdf.set_creator(spec["creator"])
    if "producer" in spec:
        pdf.set_producer(spec["producer"])
    pdf.set_margins(20, 20, 20)
    pdf.add_page()
    for style, text in blocks:
        font_style, size, grey, line_height, before, after = styles[style]
        if before:
            pdf.ln(before)
        pdf.set_font("Helvetica", font_style, size)
        pdf.set_text_color(grey, grey, grey)
        pdf.multi_cell(0, line_height, text, new_x="LMARGIN", new_y="NEXT")
        if after:
            pdf.ln(after)
    return bytes(pdf.output())


def hidden_texts(name: str) -> dict[str, str]:
    """Per PDF of the set, the text a reader of the printed page cannot see (white, or 2 pt and
    smaller), its blocks joined by spaces."""
    spec = documents(name)
    styles = LAYOUTS[spec["layout"]]
    unseen = {style for style, (_, size, grey, *_) in styles.items() if grey == 255 or size <= 2}
    return {
        file: " ".join(text for style, text in doc["blocks"] if style in unseen)
        for file, doc in spec["documents"].items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="redteam", choices=SETS)
    args = parser.parse_args()
    spec = documents(args.set)
    out = folder(args.set) / "docs"
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in spec["documents"].items():
        data = render(spec, doc["title"], doc["blocks"])
        if render(spec, doc["title"], doc["blocks"]) != data:
            raise SystemExit(f"{name}: two builds differ")
        path = out / name
        if path.exists() and path.read_bytes() == data:
            print(f"unchanged {name}")
            continue
        path.write_bytes(data)
        print(f"written   {name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
