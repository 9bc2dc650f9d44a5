"""The per-language amount and price tables of serve/query/amounts.py, entry by entry: each
question form asks, each stated word answers, and an answer without one does not."""

import pytest

from serve.query.amounts import AMOUNTS, amount_missing, asks_amount, numbers_in

pytestmark = pytest.mark.unit

NO_AMOUNT = {"en": "It depends on the season.", "fr": "Cela dépend de la saison."}


def cases(field: str):
    return [(language, phrase) for language, rules in AMOUNTS.items()
            for phrase in getattr(rules, field)]  # fmt: skip


@pytest.mark.parametrize(("language", "phrase"), cases("asks_amount"))
def test_each_amount_question_form_asks_for_one(language, phrase):
    question = f"{phrase.capitalize()} does the service take?"
    assert asks_amount(question)
    assert amount_missing(question, NO_AMOUNT[language])
    for opener in AMOUNTS[language].openers:
        assert asks_amount(f"{opener.capitalize()} {phrase} is it open?"), opener
    assert not asks_amount(f"Tell me {phrase} it is.")  # only at the question's start


@pytest.mark.parametrize(("language", "word"), cases("states_amount"))
def test_each_amount_word_answers_an_amount_question(language, word):
    question = {"en": "How long does it take?", "fr": "Combien de temps faut-il ?"}[language]
    assert not amount_missing(question, f"It takes {word.upper()} [1].")
    assert amount_missing(question, f"It takes {word}ish")  # a word, not a part of one


@pytest.mark.parametrize(("language", "phrase"), cases("asks_price"))
def test_each_price_question_form_asks_a_price(language, phrase):
    rules = AMOUNTS[language]
    named = rules.price_words[0] if rules.price_words else ""
    question = f"{phrase.capitalize()} the ticket {named}?"
    assert amount_missing(question, "une heure et demie")  # an amount, not a price
    assert not amount_missing(question, "12 [1]") and not amount_missing(question, "free")


@pytest.mark.parametrize(("language", "word"), cases("states_price"))
def test_each_price_word_answers_a_price_question(language, word):
    question = "Quelle est la cotisation ?"  # a price, and not an amount in words
    assert not amount_missing(question, f"En {word.upper()}.")
    assert amount_missing(question, f"En {word}isme.")


def test_an_english_price_question_names_what_is_paid():
    assert not amount_missing("How much does it matter?", "une heure et demie")
    assert amount_missing("How much does the ticket cost?", "une heure et demie")


def test_numbers_are_read_one_way_however_written():
    assert numbers_in("117,000 and 12 000 at 9h30") == {"117000", "12000", "9", "9.30"}
    assert numbers_in("9:30am") == numbers_in("09.30 am") == {"9", "9.30"}
