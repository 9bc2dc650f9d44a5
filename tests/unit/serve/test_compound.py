import pytest

from index.types import SearchHit
from serve.query.compound import SPLITS, answered_apart, question_parts, two_part_note

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("Quel est le numéro du contrat de maintenance et sa durée ?",
         ("Quel est le numéro du contrat de maintenance ?", "sa durée ?")),
        ("Who invented PCR, and in what year?", ("Who invented PCR?", "in what year?")),
        ("Qui a découvert l'osmium, et en quelle année ?",
         ("Qui a découvert l'osmium ?", "en quelle année ?")),
        # "When and where" asks about one subject; the second "and who" starts a question.
        ("When and where was the Rosetta Stone found, and who found it?",
         ("When and where was the Rosetta Stone found?", "who found it?")),
    ],
)  # fmt: skip
def test_a_question_that_asks_two_things_is_split_into_them(question, parts):
    assert question_parts(question) == parts


@pytest.mark.parametrize(
    "question",
    [
        "Who founded Marks and Spencer?",  # "and" joins names, not questions
        "En quelle année et dans quelle ville est né Hipparque ?",  # one subject
        "Combien de jours de télétravail par semaine sont autorisés ?",
        "What does the pump need, and",  # nothing after the conjunction
        "Wer hat PCR erfunden und wann?",  # no table for German: never split
    ],
)
def test_a_question_that_asks_one_thing_is_not_split(question):
    assert question_parts(question) == ()


@pytest.mark.parametrize(
    ("language", "opener"),
    [(language, word) for language, split in SPLITS.items()
     for word in (*split.question_words, *split.possessives)],
)  # fmt: skip
def test_every_opener_in_the_table_starts_a_second_question(language, opener):
    split = SPLITS[language]
    first = "Who built the north bridge" if language == "en" else "Qui a construit le pont nord"
    question = f"{first} {split.conjunction} {opener} x ?"
    parts = question_parts(question, language)
    assert parts and parts[0].startswith(first) and parts[1] == f"{opener} x ?"


def test_the_note_after_a_two_part_question_is_in_its_language():
    assert two_part_note("Qui a découvert l'osmium, et en quelle année ?").startswith("Cette")
    assert two_part_note("Who discovered osmium, and in which year?").startswith("This")
    assert two_part_note("Who discovered osmium?") == ""


def hit(chunk_id: str, whole: float, first: float) -> SearchHit:
    return SearchHit(chunk_id, "d", "f.txt", (), None, 0, 1, "x", 0.5,
                     rerank_score=max(whole, first), part_scores=(whole, first))  # fmt: skip


def test_two_quotes_only_where_another_passage_answers_the_first_part_best():
    # The contract: Article 3 is the whole question's best (its term), Article 1 the first
    # part's (its number).
    assert answered_apart([hit("article-3", 3.1, -4.0), hit("article-1", -0.4, 1.6)])
    # One article best for both: one quote serves.
    assert not answered_apart([hit("rubik", 6.0, 7.0), hit("other", 0.1, 0.2)])
    assert not answered_apart([hit("only", 1.0, 2.0)])
    plain = SearchHit("c", "d", "f.txt", (), None, 0, 1, "x", 0.5, rerank_score=2.0)
    assert not answered_apart([plain, plain])  # not a compound question: no part scores
