import pytest

from index.config import LoaderLimits
from index.loaders import load_document

pytestmark = pytest.mark.unit

PAGE = b"""<!DOCTYPE html><html><head><title>Pump handbook - ACME</title><style>p{color:red}</style>
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
    assert doc.text.startswith("Pump handbook - ACME\n\nManual\n\n")  # the page's title first
    assert by_text["First bold paragraph."].heading_path == ("Pump handbook - ACME", "Manual")
    assert by_text["Loose text in a div"].kind == "paragraph"
    assert by_text["Inner paragraph"].heading_path == ("Pump handbook - ACME", "Manual")
    assert by_text["| Code | Meaning |\n| --- | --- |\n| E-1 | Hot |"].heading_path == (
        "Pump handbook - ACME",
        "Manual",
        "Errors",
    )
    assert by_text["| Code | Meaning |\n| --- | --- |\n| E-1 | Hot |"].kind == "table"
    assert by_text["- one\n- two\n  - nested"].kind == "list"
    assert by_text["  x = 1\n  y = 2"].kind == "code"


def test_the_name_in_a_dropped_header_is_kept_as_the_title():
    page = b"""<body><header><h1>Pinecrest Veterinary Clinic</h1><p>Home | Contact</p></header>
    <main><h2>Our prices</h2><p>Rabies vaccination: 62 pounds.</p></main></body>"""
    doc = load_document(page, "prices.html", LoaderLimits())
    assert doc.text == "Pinecrest Veterinary Clinic\n\nOur prices\n\nRabies vaccination: 62 pounds."
    assert doc.blocks[-1].heading_path == ("Pinecrest Veterinary Clinic", "Our prices")


def test_a_title_that_is_the_pages_first_heading_is_not_repeated():
    page = b"<title>Returns</title><svg><title>icon</title></svg><h1>Returns</h1><p>30 days.</p>"
    assert load_document(page, "r.html", LoaderLimits()).text == "Returns\n\n30 days."
    untitled = b"<svg><title>icon</title></svg><p>30 days.</p>"
    assert load_document(untitled, "r.html", LoaderLimits()).text == "30 days."
    never_shown = (
        b"<template><h1>Draft</h1></template><noscript><h1>No JS</h1></noscript><p>30 days.</p>"
    )
    assert load_document(never_shown, "r.html", LoaderLimits()).text == "30 days."


def test_declared_legacy_encoding_is_used():
    html = '<meta charset="windows-1252"><p>Café à Montréal, déjà vu.</p>'.encode("cp1252")
    doc = load_document(html, "fr.html", LoaderLimits())
    assert doc.text == "Café à Montréal, déjà vu."


def test_hostile_nesting_is_refused_not_a_crash():
    from index.errors import MalformedDocumentError

    deep = ("<div>" * 5000 + "deep text" + "</div>" * 5000).encode()
    with pytest.raises(MalformedDocumentError, match=r"deep\.html: unreadable text/html"):
        load_document(deep, "deep.html", LoaderLimits())
