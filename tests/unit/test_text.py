import unicodedata

import pytest

from index.text import clean_text, collapse_whitespace

pytestmark = pytest.mark.unit


def test_clean_text_normalises_to_nfc():
    decomposed = "Re\u0301sume\u0301"  # e + combining acute
    assert clean_text(decomposed) == "Résumé"
    assert unicodedata.is_normalized("NFC", clean_text(decomposed))


def test_clean_text_removes_controls_and_invisible_characters():
    raw = "pass\u200bword\x00 is\u202e se\u00adcret\x07\ufeff"
    assert clean_text(raw) == "password is secret"


def test_clean_text_normalises_newlines_and_blank_runs():
    assert clean_text("a\r\nb\rc\u2028d\n\n\n\n\ne  \n") == "a\nb\nc\nd\n\ne"


def test_clean_text_keeps_code_indentation_when_asked():
    assert clean_text("\n    indented()\n", keep_indent=True) == "    indented()"
    assert clean_text("\n    indented()\n") == "indented()"


def test_collapse_whitespace_folds_runs():
    assert collapse_whitespace("  a \n\t b\u00a0 c ") == "a b c"
