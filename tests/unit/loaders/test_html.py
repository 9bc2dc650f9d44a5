import pytest

from index.config import LoaderLimits
from index.loaders import load_document

pytestmark = pytest.mark.unit

PAGE = b"""<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style>
<script>var secret = "tracking";</script></head>
<body>
<nav><a href="/">Home</a> Menu</nav>
<header>Site banner</header>
<main>
<h1>Manual</h1>
<p>First <b>bold</b> paragraph.</p>
<div>Loose text in a div<p>Inner paragraph</p></div>
<h2>Errors</h2>
<table><tr><th>Code</th><th>Meaning</th></tr><tr><td>E-1</td><td>Hot</td></tr></table>
<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>
<pre>  x = 1
  y = 2</pre>
<p hidden>hidden text</p>
<p style="display: none">invisible text</p>
</main>
<footer>Copyright</footer>
<script>track()</script>
</body></html>"""


def load():
    return load_document(PAGE, "page.html", LoaderLimits())


def test_scripts_styles_and_navigation_are_dropped():
    text = load().text
    for unwanted in ("tracking", "color:red", "Menu", "Site banner", "Copyright", "track()"):
        assert unwanted not in text
    assert "hidden text" not in text and "invisible text" not in text


def test_main_text_and_heading_paths():
    doc = load()
    by_text = {doc.text[b.start : b.end]: b for b in doc.blocks}
    assert by_text["First bold paragraph."].heading_path == ("Manual",)
    assert by_text["Loose text in a div"].kind == "paragraph"
    assert by_text["Inner paragraph"].heading_path == ("Manual",)
    assert by_text["Code | Meaning\nE-1 | Hot"].heading_path == ("Manual", "Errors")
    assert by_text["Code | Meaning\nE-1 | Hot"].kind == "table"
    assert by_text["- one\n- two\n  - nested"].kind == "list"
    assert by_text["  x = 1\n  y = 2"].kind == "code"


def test_declared_legacy_encoding_is_used():
    html = '<meta charset="windows-1252"><p>Café à Montréal, déjà vu.</p>'.encode("cp1252")
    doc = load_document(html, "fr.html", LoaderLimits())
    assert doc.text == "Café à Montréal, déjà vu."


def test_hostile_nesting_is_refused_not_a_crash():
    from index.errors import MalformedDocumentError

    deep = ("<div>" * 5000 + "deep text" + "</div>" * 5000).encode()
    with pytest.raises(MalformedDocumentError, match=r"deep\.html: unreadable text/html"):
        load_document(deep, "deep.html", LoaderLimits())
