import pytest

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError
from index.loaders import load_document
from tests.documents import encrypt, make_pdf

pytestmark = pytest.mark.unit

PAGES = [
    [("Intro", "Alpha paragraph on page one."), ("Scope", "Beta paragraph also on page one.")],
    [(None, "Gamma paragraph on page two."), ("Annex", "Delta paragraph on page two.")],
]


def test_text_per_page_keeps_page_numbers():
    doc = load_document(make_pdf(PAGES), "m.pdf", LoaderLimits())
    assert doc.page_count == 2
    pages = {doc.text[b.start : b.end]: b.page for b in doc.blocks}
    assert pages["Alpha paragraph on page one."] == 1
    assert pages["Delta paragraph on page two."] == 2


def test_outline_gives_heading_paths_within_and_across_pages():
    doc = load_document(make_pdf(PAGES), "m.pdf", LoaderLimits())
    paths = {doc.text[b.start : b.end]: b.heading_path for b in doc.blocks}
    assert paths["Alpha paragraph on page one."] == ("Intro",)
    assert paths["Beta paragraph also on page one."] == ("Scope",)
    assert paths["Gamma paragraph on page two."] == ("Scope",)  # section continues
    assert paths["Delta paragraph on page two."] == ("Annex",)


def test_encrypted_pdf_is_refused():
    with pytest.raises(MalformedDocumentError, match=r"locked\.pdf: .*encrypted"):
        load_document(encrypt(make_pdf(PAGES)), "locked.pdf", LoaderLimits())


def test_truncated_pdf_is_refused_as_damaged():
    data = make_pdf(PAGES)
    with pytest.raises(MalformedDocumentError, match=r"cut\.pdf: unreadable or damaged PDF"):
        load_document(data[: len(data) // 3], "cut.pdf", LoaderLimits())


def test_non_pdf_bytes_with_pdf_extension_are_refused():
    with pytest.raises(MalformedDocumentError, match="no %PDF header"):
        load_document(b"<html>not a pdf</html>", "fake.pdf", LoaderLimits())


def test_page_limit_names_the_limit():
    with pytest.raises(FileTooLargeError, match=r"2 pages is more than limits\.max_pages \(1\)"):
        load_document(make_pdf(PAGES), "m.pdf", LoaderLimits(max_pages=1))


def test_lines_wrapped_on_the_page_are_joined_into_their_sentences():
    sentence = (
        "The primary caregiver is entitled to sixteen weeks of parental leave on full pay, "
        "which may be followed by up to thirty-six further weeks of unpaid leave where the "
        "employee asks for it in writing."
    )
    pdf = make_pdf([[("2. Leave for the primary caregiver", sentence)]])
    doc = load_document(pdf, "policy.pdf", LoaderLimits())
    assert sentence in doc.text.split("\n")
    assert "2. Leave for the primary caregiver" in doc.text.split("\n")
