"""PowerPoint decks (.pptx) through python-pptx: one section per slide, cited as its page
("slide N" is page N), its title as the heading ("Slide 3: Roadmap"); text frames, tables (as
Markdown tables) and, marked as such, the speaker notes."""

from __future__ import annotations

from index.config import LoaderLimits
from index.errors import FileTooLargeError
from index.loaders.base import DocumentBuilder
from index.loaders.ocr import OcrReader
from index.loaders.ooxml import open_package
from index.loaders.tables import add_table, cell
from index.types import Document

NOTES = "Speaker notes"


class SlidesLoader:
    media_type = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
    extensions = (".pptx",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        from pptx import Presentation

        deck = Presentation(open_package(data, file_name, limits, "PowerPoint"))
        slides = list(deck.slides)
        if len(slides) > limits.max_pages:
            raise FileTooLargeError(
                file_name, f"{len(slides)} slides, more than limits.max_pages ({limits.max_pages})"
            )
        builder = DocumentBuilder(file_name, self.media_type, limits)
        for number, slide in enumerate(slides, start=1):
            title_shape = slide.shapes.title
            title = title_shape.text_frame.text.strip() if title_shape is not None else ""
            path = (f"Slide {number}: {title}" if title else f"Slide {number}",)
            builder.add(path[0], "heading", path, page=number)
            for shape in slide.shapes:
                if shape is title_shape:
                    continue
                if shape.has_table:
                    rows = [[cell(c.text) for c in row.cells] for row in shape.table.rows]
                    add_table(builder, rows, path, page=number)
                elif shape.has_text_frame:
                    lines = [p.text.strip() for p in shape.text_frame.paragraphs if p.text.strip()]
                    if lines:
                        builder.add("\n".join(lines), "paragraph", path, page=number)
            if slide.has_notes_slide:
                notes = slide.notes_slide.notes_text_frame.text.strip()
                if notes:
                    builder.add(f"{NOTES}: {notes}", "quote", (*path, NOTES), page=number)
        return builder.build(page_count=len(slides))
