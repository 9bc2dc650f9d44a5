import pytest
from hypothesis import given
from hypothesis import strategies as st

from index.types import SearchHit
from serve.query.citations import (
    CitationFilter,
    check_citations,
    split_sentences,
    support,
    supported_share,
)
from serve.query.prompt import canonical_order

pytestmark = pytest.mark.unit

LEAVE = "Every employee receives 27 days of paid annual leave per calendar year."
SICK = "Report sick leave to your manager before 09:30 on the first day."


def hit(chunk_id, text="text", file_name="a.md", start=0) -> SearchHit:
    return SearchHit(chunk_id, f"doc-{file_name}", file_name, (), None, start, start + 4, text)


SOURCES = canonical_order([hit("a", LEAVE), hit("b", SICK, start=90)])


def test_citations_outside_the_prompt_are_removed_and_counted():
    checked = check_citations("Leave is 27 days [1]. Sick leave [7]. Both [2, 9][1].", SOURCES)
    assert checked.text == "Leave is 27 days [1]. Sick leave. Both [2][1]."
    assert checked.invalid_removed == 2
    assert [c.source.number for c in checked.cited] == [1, 2]


def test_answer_without_citations_cites_nothing():
    checked = check_citations("Not found in the sources.", SOURCES)
    assert checked.cited == () and checked.invalid_removed == 0
    assert checked.statements[0].numbers == () and checked.statements[0].support == 0.0


def test_each_citation_carries_the_sentences_that_cite_it_and_their_support():
    text = "Employees receive 27 days of annual leave [1]. Report sickness before 09:30 [2]."
    checked = check_citations(text, SOURCES)
    first, second = checked.cited
    assert first.sentences == ("Employees receive 27 days of annual leave.",)
    assert second.sentences == ("Report sickness before 09:30.",)
    # 27, days, annual, leave of {employees, receive, 27, days, annual, leave}: no stemming
    assert first.support == pytest.approx(4 / 6)
    assert [s.numbers for s in checked.statements] == [(1,), (2,)]


def test_a_sentence_the_cited_chunk_does_not_support_scores_low():
    checked = check_citations("The moon is made of green cheese [1].", SOURCES)
    assert checked.statements[0].support == 0.0
    assert supported_share(checked.statements) == 0.0


def test_support_counts_content_words_and_numbers():
    assert support("27 days of leave", LEAVE) == 1.0  # "of" is too short to count
    assert support("42 weeks", LEAVE) == 0.0
    assert support("", LEAVE) == 0.0


def test_citations_after_the_full_stop_belong_to_the_sentence_before():
    assert split_sentences("Leave is 27 days. [1] Sick leave starts at 09:30.\nDone [2].") == [
        "Leave is 27 days. [1]",
        "Sick leave starts at 09:30.",
        "Done [2].",
    ]


def test_uncited_statements_count_as_unsupported():
    checked = check_citations("The sky is blue today. Leave is 27 days [1].", SOURCES)
    assert supported_share(checked.statements) == 0.5
    assert supported_share(()) == 1.0


def test_a_faithful_sentence_without_a_marker_gets_an_inferred_citation():
    text = "Every employee receives 27 days of paid annual leave. Sick leave [2]."
    checked = check_citations(text, SOURCES)
    assert checked.text == text  # the model's text is not rewritten
    first = checked.statements[0]
    assert first.numbers == (1,) and first.inferred and first.support == 1.0
    leave, sick = checked.cited
    assert leave.source.number == 1 and leave.inferred
    assert sick.source.number == 2 and not sick.inferred
    # An inferred citation was chosen by the same overlap: it never counts as supported.
    assert supported_share(checked.statements[:1]) == 0.0
    assert checked.written == 1


def test_weak_or_short_uncited_sentences_are_not_attributed():
    checked = check_citations("Leave matters. Holidays are planned with managers.", SOURCES)
    assert checked.cited == ()
    assert all(s.numbers == () for s in checked.statements)


def test_streamed_citations_are_held_until_checked():
    citations = CitationFilter(SOURCES)
    assert citations.feed("Leave is 27 days") == "Leave is 27 days"
    assert citations.feed(" [") == ""  # could be a citation: held
    assert citations.feed("7") == ""
    assert citations.feed("]. Sick [2") == ". Sick"
    assert citations.feed("].") == " [2]."
    assert citations.flush() == ""
    assert citations.invalid_removed == 1


@given(
    st.lists(st.sampled_from(["Leave", " ", "[", "1", "2", "7", "]", ",", ".", "\n", "x"])),
    st.data(),
)
def test_streamed_text_equals_the_checked_answer_however_it_is_split(pieces, data):
    text = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    citations = CitationFilter(SOURCES)
    streamed = "".join(citations.feed(d) for d in deltas) + citations.flush()
    checked = check_citations(text, SOURCES)
    assert streamed == checked.text
    assert citations.invalid_removed == checked.invalid_removed
