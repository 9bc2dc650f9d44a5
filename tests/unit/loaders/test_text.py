import pytest

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError, UnsupportedFileError
from index.loaders import load_document

pytestmark = pytest.mark.unit


def test_paragraphs_split_on_blank_lines():
    doc = load_document(b"One line.\nSame para.\n\n\nSecond para.", "a.txt", LoaderLimits())
    assert [doc.text[b.start : b.end] for b in doc.blocks] == [
        "One line.\nSame para.",
        "Second para.",
    ]
    assert doc.text == "One line.\nSame para.\n\nSecond para."


def test_utf8_bom_and_latin1_are_decoded():
    assert load_document("\ufeffÉté".encode(), "a.txt", LoaderLimits()).text == "Été"
    latin = "Les élèves étudient à l'école française.".encode("latin-1")
    assert load_document(latin, "b.txt", LoaderLimits()).text.startswith("Les élèves")


def test_binary_content_is_refused_with_the_file_name():
    with pytest.raises(MalformedDocumentError, match=r"blob\.txt: binary content"):
        load_document(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "blob.txt", LoaderLimits())


def test_unsupported_extension_is_refused_listing_supported_ones():
    with pytest.raises(UnsupportedFileError, match=r"'\.docx'.*\.pdf") as caught:
        load_document(b"PK\x03\x04", "report.docx", LoaderLimits())
    assert caught.value.status == 415


def test_byte_limit_names_the_limit():
    with pytest.raises(FileTooLargeError, match=r"limits\.max_bytes \(10\)") as caught:
        load_document(b"x" * 11, "big.txt", LoaderLimits(max_bytes=10))
    assert caught.value.status == 413


def test_character_limit_names_the_limit():
    with pytest.raises(FileTooLargeError, match=r"limits\.max_chars"):
        load_document(b"word " * 100, "long.txt", LoaderLimits(max_chars=50))


def test_empty_file_gives_an_empty_document():
    doc = load_document(b"  \n\n \t", "empty.txt", LoaderLimits())
    assert doc.text == "" and doc.blocks == ()


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Compte rendu de la réunion d'exploitation, entrepôt de Lille.", "cp1252"),
        ("Привет, как дела? Это тестовый документ на русском языке.", "cp1251"),
        ("Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.", "cp1250"),
    ],
)
def test_legacy_code_pages_are_detected(text, encoding):
    assert load_document(text.encode(encoding), "legacy.txt", LoaderLimits()).text == text
