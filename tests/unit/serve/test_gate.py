import pytest

from index.types import SearchHit
from serve.query.gate import NOT_FOUND, EvidenceGate, is_not_found, not_found_message
from serve.query.language import detect_language

pytestmark = pytest.mark.unit


def hit(dense=None, bm25=None) -> SearchHit:
    return SearchHit("c", "d", "f.txt", (), None, 0, 1, "x", dense, bm25)


def test_gate_passes_on_dense_or_strong_lexical_evidence():
    gate = EvidenceGate(min_dense_score=0.4, min_bm25_score=5.0)
    assert gate.passes(hit(dense=0.4))
    assert not gate.passes(hit(dense=0.39))
    assert gate.passes(hit(dense=0.1, bm25=5.0))
    assert not gate.passes(hit(bm25=4.9))
    assert gate.filter([hit(dense=0.9), hit(dense=0.1)]) == [hit(dense=0.9)]


def test_lexical_evidence_alone_is_off_by_default():
    assert not EvidenceGate().passes(hit(bm25=100.0))


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("How many days of annual leave do we get?", "en"),
        ("Combien de jours de télétravail par semaine ?", "fr"),
        ("Сколько дней отпуска положено сотрудникам?", "ru"),
        ("E-310", "en"),  # too short to tell: English
        ("", "en"),
    ],
)
def test_language_of_the_question(question, language):
    assert detect_language(question) == language


def test_abstention_speaks_the_questions_language():
    assert not_found_message("Quel est le délai d'intervention ?") == NOT_FOUND["fr"]
    assert not_found_message("What is the warranty?") == "Not found in the sources."


@pytest.mark.parametrize(
    ("answer", "abstained"),
    [
        ("Not found in the sources.", True),
        ("[1] Not found in the sources.", True),
        ("Introuvable dans les sources.", True),
        ("I am sorry: not found in the sources.", True),
        ("Leave is 27 days [1].", False),
        ("The value was not found in the sources' appendix but the table gives 27 days.", False),
        ("Martin Luther on indulgences is not found in the sources.", True),
        ("La durée de la garantie est introuvable dans les sources.", True),
        ("Leave is 27 days [1]. The carry-over rule is not found in the sources.", False),
    ],
)
def test_model_abstention_is_recognised(answer, abstained):
    assert is_not_found(answer) is abstained
