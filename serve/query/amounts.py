"""Numbers in answers, and questions that ask for one: the rules grounded answers are held to
(serve/query/quotes.py). An answer's numbers must be in its sources (``numbers_in``), however
they are written; a question that asks how many, what time or what price is not answered by
words without one (``amount_missing``).

The words are in ``AMOUNTS``, one table per language that a reader can scan and a test
enumerates; every language's rules apply to every question (a French question may be answered
"free", an English one "gratuit").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from serve.query.language import either


@dataclass(frozen=True, slots=True)
class AmountRules:
    """How one language asks for an amount (a quantity, a time, a date) or a price, and the
    words an answer states one with (digits always do; for a price, currency signs too).

    A question asks when it opens (after an optional preposition from ``openers``: "By what
    time", "Depuis quelle année") with one of ``asks_amount``; it asks a price when it opens
    with one of ``asks_price`` and, where ``price_words`` is not empty, later names one."""

    openers: tuple[str, ...]
    asks_amount: tuple[str, ...]
    states_amount: tuple[str, ...]
    asks_price: tuple[str, ...]
    price_words: tuple[str, ...]
    states_price: tuple[str, ...]


def phrases(*parts: tuple[str, ...]) -> tuple[str, ...]:
    """Every phrase made of one choice from each part, in order ("" leaves a part out)."""
    return tuple(" ".join(w for w in words if w) for words in product(*parts))


# fmt: off
_EN_UNITS = ("second", "minute", "hour", "day", "week", "fortnight", "month", "year", "decade",
             "century")
_FR_UNITS = ("seconde", "minute", "heure", "journée", "jour", "semaine", "quinzaine", "mois",
             "an", "année", "décennie", "siècle", "fois")
AMOUNTS = {
    "en": AmountRules(
        openers=("by", "at", "in", "for", "from", "since", "until"),
        asks_amount=(
            *phrases(("how",), ("much", "many", "long", "old", "far", "tall", "high", "big",
                                "large", "deep", "wide", "heavy")),
            *phrases(("what", "which"), ("time", "temperature", "percentage", "year", "age")),
        ),
        states_amount=(
            "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
            "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
            "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
            "eighty", "ninety", "hundred", "hundreds", "thousand", "thousands", "million",
            "millions", "billion", "billions", "trillion", "trillions", "dozen", "dozens", "half",
            "once", "twice", *phrases(("a", "an"), _EN_UNITS), "noon", "midnight", "free",
            "nothing", "none", "no charge",
        ),
        asks_price=phrases(("how much",), ("does", "do", "did", "is", "are", "was", "were",
                                           "will", "would", "should")),
        price_words=("cost", "costs", "charge", "charged", "pay", "paid", "fee", "fees", "price",
                     "fine", "rent", "deposit"),
        states_price=("euro", "euros", "pound", "pounds", "dollar", "dollars", "franc", "francs",
                      "pence", "centime", "centimes", "free", "nothing", "no charge"),
    ),
    "fr": AmountRules(
        openers=("à", "a", "en", "dans", "depuis", "pour", "jusqu'à"),
        asks_amount=(
            "combien",
            *phrases(("quel", "quelle"), ("heure", "âge", "température", "pourcentage", "année",
                                          "taille", "hauteur", "longueur", "distance", "durée",
                                          "superficie", "prix", "montant", "tarif", "délai")),
        ),
        states_amount=(
            "zéro", *phrases(("un", "une"), _FR_UNITS), "deux", "trois", "quatre", "cinq",
            "six", "sept", "huit", "neuf", "dix", "onze", "douze", "treize", "quatorze",
            "quinze", "seize", "vingt", "vingts", "trente", "quarante", "cinquante", "soixante",
            "cent", "cents", "mille", "million", "millions", "milliard", "milliards", "douzaine",
            "douzaines", "demi", "demie", "moitié", "quart", "midi", "minuit", "gratuit",
            "gratuite", "gratuits", "gratuites", "rien", "aucun", "aucune",
        ),
        asks_price=(
            *phrases(("combien",), ("coûte", "coûtent", "coûtait", "coûtera", "faut-il payer",
                                    "paie", "paye", "dois-je payer")),
            *phrases(("quel", "quelle"), ("", "est le", "est la"),
                     ("prix", "tarif", "montant", "coût", "cotisation")),
        ),
        price_words=(),
        states_price=("euro", "euros", "franc", "francs", "centime", "centimes", "gratuit",
                      "gratuite", "gratuits", "gratuites", "rien"),
    ),
}
# fmt: on


def _union(field: str) -> str:
    return either(word for rules in AMOUNTS.values() for word in getattr(rules, field))


def _asks_price(rules: AmountRules) -> str:
    if not rules.price_words:
        return rf"(?:{either(rules.asks_price)})"
    return rf"(?:{either(rules.asks_price)})\b.*\b(?:{either(rules.price_words)})\b"


_AMOUNT_ASKED = re.compile(
    rf"^\W*(?:(?:{_union('openers')})\s+)?(?:{_union('asks_amount')})\b", re.IGNORECASE
)
_AMOUNT_GIVEN = re.compile(rf"\d|\b(?:{_union('states_amount')})\b", re.IGNORECASE)
_PRICE_ASKED = re.compile(
    rf"^\W*(?:{'|'.join(_asks_price(rules) for rules in AMOUNTS.values())})", re.IGNORECASE
)
_PRICE_GIVEN = re.compile(rf"\d|[£€$¥]|\b(?:{_union('states_price')})\b", re.IGNORECASE)
_ASKED_GIVEN = ((_AMOUNT_ASKED, _AMOUNT_GIVEN), (_PRICE_ASKED, _PRICE_GIVEN))
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_MARKERS = re.compile(r"\[\d+\]")
# A thousands separator between digit groups ("117,000", "12 000", "35\u202f786"): the same
# number however it is written.
_GROUPING = re.compile(r"(?<=\d)[,\s\u00a0\u202f](?=\d{3}(?!\d))")
# A comma straight after a decimal number ("Full service,89.00,3 hr" in a CSV row) ends it: it
# is not a second decimal part.
_FIELD_AFTER_DECIMAL = re.compile(r"(\d\.\d+),(?=\d)")
# A time of day however it is written ("9:30", "09:30", "9h30", "9 h 30", "9.30am"): one number,
# "9.30", and its hour ("13 h" is the hour of "13:00").
_TIME = re.compile(
    r"(?<![\d.,:])0*(\d{1,2})(?:\s?[:hH]\s?|\.(?=\d\d\s?[aApP]\.?[mM]))([0-5]\d)(?!\d)"
)


def numbers_in(text: str) -> set[str]:
    """The numbers ``text`` states, each one way however it is written (thousands separators,
    times of day)."""
    fields = _FIELD_AFTER_DECIMAL.sub(r"\1; ", text)
    times = _TIME.findall(fields)
    read = {hour for hour, _ in times} | {f"{hour}.{minute}" for hour, minute in times}
    rest = _TIME.sub(" ; ", fields)
    return read | set(_NUMBER.findall(_GROUPING.sub("", rest)))


def asks_amount(question: str) -> bool:
    """The question asks for an amount, a time, a date or a price (at its start)."""
    return any(asked.search(question) for asked, _ in _ASKED_GIVEN)


def amount_missing(question: str, answer: str) -> bool:
    """The question asks for an amount (``asks_amount``) and the answer states none: no
    number, in digits or words, or for a price, no number, currency or "free"."""
    answer = _MARKERS.sub("", answer)
    return any(asked.search(question) and not given.search(answer) for asked, given in _ASKED_GIVEN)
