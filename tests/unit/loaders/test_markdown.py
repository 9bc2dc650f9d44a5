import pytest

from index.config import LoaderLimits
from index.loaders import load_document

pytestmark = pytest.mark.unit

SOURCE = b"""# Guide

Intro **bold** and a [link](http://example.com).

## Install

- first step
- second step

```python
def main():
    return 1
```

### Deep

| a | b |
|---|---|
| 1 | 2 |

# Other

Last paragraph.

<div class="note">Raw <b>HTML</b> note</div>

<script>alert("x")</script>
<!-- a comment -->
"""


def load():
    return load_document(SOURCE, "guide.md", LoaderLimits())


def test_headings_give_each_block_its_path():
    doc = load()
    paths = {doc.text[b.start : b.end]: b.heading_path for b in doc.blocks}
    assert paths["Intro bold and a link."] == ("Guide",)
    assert paths["- first step\n- second step"] == ("Guide", "Install")
    assert paths["Last paragraph."] == ("Other",)
    assert paths["| a | b |\n| --- | --- |\n| 1 | 2 |"] == ("Guide", "Install", "Deep")


def test_code_blocks_are_kept_whole_as_code():
    doc = load()
    code = [b for b in doc.blocks if b.kind == "code"]
    assert len(code) == 1
    assert doc.text[code[0].start : code[0].end] == "def main():\n    return 1"


def test_markup_and_link_targets_are_dropped():
    doc = load()
    assert "**" not in doc.text
    assert "example.com" not in doc.text
    assert doc.media_type == "text/markdown"


def test_block_offsets_slice_the_text():
    doc = load()
    for block in doc.blocks:
        piece = doc.text[block.start : block.end]
        assert piece == piece.strip() and piece


def test_raw_html_blocks_keep_only_their_visible_text():
    text = load().text
    assert "Raw HTML note" in text
    assert "<div" not in text and "alert" not in text and "comment" not in text


def test_a_paragraph_wrapped_in_the_source_is_one_line_and_a_hard_break_stays():
    source = (
        b"An adult cardholder can borrow up to **12 items at a time**, of which no more\n"
        b"than four may be DVDs.\n\n"
        b"- Items can be returned to any library in the\n  county network.\n\n"
        b"Fernhill Library  \nHigh Street 4\n"
    )
    doc = load_document(source, "rules.md", LoaderLimits())
    assert doc.text.split("\n\n") == [
        "An adult cardholder can borrow up to 12 items at a time, of which no more than four "
        "may be DVDs.",
        "- Items can be returned to any library in the county network.",
        "Fernhill Library\nHigh Street 4",
    ]
