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
    with pytest.raises(UnsupportedFileError, match=r"'\.odt'.*\.pdf") as caught:
        load_document(b"PK\x03\x04", "report.odt", LoaderLimits())
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


WRAPPED = b"""BRIGHTMOOR LIBRARY
Loan rules, 2025

An adult cardholder can borrow up to 12 items at a time, of which no more than four may be
DVDs or games. Books are lent for three weeks; DVDs and games for one week, and the loan can
be renewed twice online.

Highlights
----------
* The default connection timeout is now 90 seconds (it was 30 seconds before). Slow links
  kept timing out during the initial handshake. The value can still be set per target with
  the --connect-timeout option.
* Parallel pushes now default to 16 workers.

agent: Your contract runs for eighteen months, after which it rolls monthly and you can go.
customer: And how much is it?
"""


def test_hard_wrapped_lines_are_joined_into_their_sentences():
    doc = load_document(WRAPPED, "rules.txt", LoaderLimits())
    lines = doc.text.split("\n")
    assert (
        "An adult cardholder can borrow up to 12 items at a time, of which no more than four "
        "may be DVDs or games. Books are lent for three weeks; DVDs and games for one week, and "
        "the loan can be renewed twice online." in lines
    )
    assert (
        "* The default connection timeout is now 90 seconds (it was 30 seconds before). Slow "
        "links kept timing out during the initial handshake. The value can still be set per "
        "target with the --connect-timeout option." in lines
    )


def test_titles_items_underlines_and_records_keep_their_own_lines():
    doc = load_document(WRAPPED, "rules.txt", LoaderLimits())
    lines = doc.text.split("\n")
    for line in (
        "BRIGHTMOOR LIBRARY",
        "Loan rules, 2025",
        "Highlights",
        "----------",
        "* Parallel pushes now default to 16 workers.",
        "customer: And how much is it?",
    ):
        assert line in lines


def test_a_line_longer_than_the_measure_is_not_a_wrapped_one():
    rows = "\n".join(f"Item {n} of the price list,{n}.00,20 min,labour only" for n in range(9))
    long_row = "__note__,0.00,," + "x" * 150
    text = f"{rows}\n{long_row}\nBike fit,70.00,1.5 hr,by appointment only\n"
    doc = load_document(text.encode(), "prices.txt", LoaderLimits())
    assert "Bike fit,70.00,1.5 hr,by appointment only" in doc.text.split("\n")


def test_short_lines_are_never_joined():
    address = b"Fernhill Library\nHigh Street 4\nfernhill\n"
    assert load_document(address, "a.txt", LoaderLimits()).text == address.decode().strip()
