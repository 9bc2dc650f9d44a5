"""HTML via BeautifulSoup: the page's title, main text and headings; scripts, styles and
navigation dropped."""

from __future__ import annotations

from bs4 import BeautifulSoup, Comment, NavigableString, Tag
from bs4.dammit import EncodingDetector

from index.config import LoaderLimits
from index.loaders.base import DocumentBuilder
from index.loaders.ocr import OcrReader
from index.loaders.tables import add_table, cell
from index.loaders.text import decode_text
from index.text import collapse_whitespace
from index.types import Document

# Never content: code, styling, chrome around the page, and controls.
_DROPPED = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "select",
    "svg",
    "canvas",
    "iframe",
    "object",
    "embed",
    "head",
    "title",  # the page's title is read apart (_page_title)
)
_NEVER_SHOWN = ("svg", "template", "noscript", "script", "style")  # a <title> or <h1> in these
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_PARAGRAPHS = ("p", "dt", "dd", "figcaption", "caption", "address", "summary")
_LISTS = ("ul", "ol")


def _is_hidden(tag: Tag) -> bool:
    style = str(tag.get("style", "")).replace(" ", "").lower()
    return (
        tag.has_attr("hidden")
        or tag.get("aria-hidden") == "true"
        or tag.get("role") in ("navigation", "banner", "contentinfo", "search")
        or "display:none" in style
    )


def fragment_text(html: str) -> str:
    """Visible text of an HTML fragment (raw HTML inside Markdown, say)."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(_DROPPED):
        tag.decompose()
    return soup.get_text(" ")


def _page_title(soup: BeautifulSoup) -> str:
    """What names the page: its <title>, else its first <h1> (often in a <header>, which is
    dropped with the rest of the page's chrome). "Prices" under a clinic's name is the clinic's
    price list: without the name, neither a reader of the chunk nor the judge can tell."""

    def named(name: str):  # the first such tag that a browser could show as the page's
        return soup.find(lambda tag: tag.name == name and not tag.find_parent(_NEVER_SHOWN))

    for tag in (named("title"), named("h1")):
        text = collapse_whitespace(tag.get_text(" ")) if tag else ""
        if text:
            return text
    return ""


class HtmlLoader:
    media_type = "text/html"
    extensions = (".html", ".htm", ".xhtml")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        declared = EncodingDetector.find_declared_encoding(data, is_html=True)
        soup = BeautifulSoup(decode_text(data, file_name, declared), "html.parser")
        for tag in soup.find_all(_is_hidden):
            tag.decompose()
        title = _page_title(soup)
        for tag in soup.find_all(_DROPPED):
            tag.decompose()
        root = soup.find("main") or soup.find("article") or soup.find("body") or soup
        walker = _Walker(DocumentBuilder(file_name, self.media_type, limits))
        first = root.find("h1")
        if title and (first is None or collapse_whitespace(first.get_text(" ")) != title):
            walker.headings = [(0, title)]  # above every heading of the page
            walker.builder.add(title, "heading", walker.path())
        walker.walk(root)
        walker.flush()
        return walker.builder.build()


class _Walker:
    """Depth-first walk that emits one block per paragraph-like element."""

    def __init__(self, builder: DocumentBuilder) -> None:
        self.builder = builder
        self.headings: list[tuple[int, str]] = []
        self.loose: list[str] = []

    def path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self.headings)

    def flush(self) -> None:
        """Text found directly inside containers (not in a <p>) becomes its own paragraph."""
        text = collapse_whitespace(" ".join(self.loose))
        self.loose = []
        if text:
            self.builder.add(text, "paragraph", self.path())

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, Comment) or not isinstance(child, NavigableString | Tag):
                continue
            if isinstance(child, NavigableString):
                if type(child) is NavigableString:  # not a Doctype, CData, processing instr.
                    self.loose.append(str(child))
                continue
            if child.name in _HEADINGS:
                self.flush()
                level = _HEADINGS[child.name]
                title = collapse_whitespace(child.get_text(" "))
                if title:
                    self.headings = [h for h in self.headings if h[0] < level] + [(level, title)]
                    self.builder.add(title, "heading", self.path())
            elif child.name == "pre":
                self.flush()
                self.builder.add(child.get_text(), "code", self.path())
            elif child.name in _PARAGRAPHS:
                self.flush()
                self.builder.add(collapse_whitespace(child.get_text(" ")), "paragraph", self.path())
            elif child.name in _LISTS:
                self.flush()
                self._list(child)
            elif child.name == "table":
                self.flush()
                self._table(child)
            elif child.name == "br":
                self.loose.append("\n")
            elif child.name in (
                "blockquote",
                "div",
                "section",
                "article",
                "main",
                "body",
                "figure",
                "details",
                "li",
                "dl",
                "center",
                "fieldset",
            ):
                self.flush()
                self.walk(child)
                self.flush()
            else:  # inline element: part of the surrounding text
                self.loose.append(child.get_text(" "))

    def _list(self, node: Tag) -> None:
        items = []
        for item in node.find_all("li"):
            own = [s for s in item.find_all(string=True) if s.find_parent("li") is item]
            depth = len(item.find_parents(_LISTS)) - len(node.find_parents(_LISTS)) - 1
            text = collapse_whitespace(" ".join(own))
            if text:
                items.append("  " * depth + "- " + text)
        self.builder.add("\n".join(items), "list", self.path())

    def _table(self, node: Tag) -> None:
        rows = []
        for tr in node.find_all("tr"):
            cells = [cell(c.get_text(" ")) for c in tr.find_all(("td", "th"))]
            if any(cells):
                rows.append(cells)
        add_table(self.builder, rows, self.path())
