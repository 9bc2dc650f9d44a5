"""Sources a person can read (issue 68): after the answer, each cited source as a line of the
message text, with its file, page or slide, section and the verified quote, in the question's
language. Chat windows (Open WebUI, LibreChat) show the message text and not the annotations
or the ``grounded`` extension, where the sources travel otherwise.

Asked for per request (``sources_in_text``, an extension field) or by default for a key made
for a chat window (`grounded keys create --sources-in-text`). The text is appended after the
answer, so the annotations' spans stay where they were; a "not found" answer lists nothing. A
quote is shown only when it was verified against the source (never a paraphrase in quotes).
"""

from __future__ import annotations

from serve.query.language import detect_language
from serve.query.pipeline import Answer

# language -> (heading, page, slide, quote marks)
WORDS = {
    "en": ("Sources:", "page", "slide", ("“", "”")),
    "fr": ("Sources :", "page", "diapositive", ("« ", " »")),
    "de": ("Quellen:", "Seite", "Folie", ("„", "“")),
    "es": ("Fuentes:", "página", "diapositiva", ("«", "»")),
    "it": ("Fonti:", "pagina", "diapositiva", ("«", "»")),
    "nl": ("Bronnen:", "pagina", "dia", ("“", "”")),
    "pt": ("Fontes:", "página", "diapositivo", ("“", "”")),
    "ru": ("Источники:", "стр.", "слайд", ("«", "»")),
}
SLIDES = (".pptx",)


def sources_text(answer: Answer, question: str) -> str:
    """What follows the answer's text: a blank line, the heading, a Markdown list item per
    cited source; "" for an abstention or an answer that cites nothing."""
    if answer.abstained or not answer.cited:
        return ""
    heading, page, slide, (opening, closing) = WORDS.get(detect_language(question), WORDS["en"])
    lines = ["", "", heading]
    for citation in answer.cited:
        hit = citation.source.hit
        place = hit.file_name
        if hit.page:
            place += f", {slide if hit.file_name.lower().endswith(SLIDES) else page} {hit.page}"
        if hit.heading_path:
            place += f" ({' > '.join(hit.heading_path)})"
        verified = citation.quote and citation.verified
        quoted = f": {opening}{citation.quote}{closing}" if verified else ""
        lines.append(f"- [{citation.source.number}] {place}{quoted}")
    return "\n".join(lines)
