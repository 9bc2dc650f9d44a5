"""Numbers in answers, and questions that ask for one: the rules grounded answers are held to
(serve/query/quotes.py). An answer's numbers must be in its sources (``numbers_in``), however
they are written; a question that asks how many, what time or what price is not answered by
words without one (``amount_missing``)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A question that asks for an amount, a time or a date (at its start, after a preposition: "By
# what time ...", "Depuis quelle année ...") is answered with one: a number, or a word that
# states one ("fourteen", "une heure", "free", "midi"); one that asks a price, with a number, a
# currency or "free" ("une heure et demie" does not say what a ticket costs).
_MARKERS = re.compile(r"\[\d+\]")
_AMOUNT_ASKED = re.compile(
    r"^\W*(?:(?:by|at|in|for|from|since|until|à|a|en|dans|depuis|pour|jusqu'à)\s+)?"
    r"(?:how\s+(?:much|many|long|old|far|tall|high|big|large|deep|wide|heavy)"
    r"|(?:what|which)\s+(?:time|temperature|percentage|year|age)\b"
    r"|combien|quel(?:le)?\s+(?:heure|âge|température|pourcentage|année|taille|hauteur"
    r"|longueur|distance|durée|superficie|prix|montant|tarif|délai)\b)",
    re.IGNORECASE,
)
_AMOUNT_GIVEN = re.compile(
    r"\d|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|(?:thir|four|fif|six|seven|eigh|nine)teen"
    r"|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?"
    r"|billions?|trillions?|dozens?|half|once|twice|an?\s+(?:second|minute|hour|day|week"
    r"|fortnight|month|year|decade|century)|noon|midnight|free|nothing|none|no\s+charge"
    r"|zéro|une?\s+(?:seconde|minute|heure|journée|jour|semaine|quinzaine|mois|an|année"
    r"|décennie|siècle|fois)|deux|trois|quatre|cinq|six|sept|huit|neuf|dix|onze|douze"
    r"|treize|quatorze|quinze|seize|vingts?|trente|quarante|cinquante|soixante|cents?|mille"
    r"|millions?|milliards?|douzaines?|demie?|moitié|quart|midi|minuit|gratuite?s?|rien"
    r"|aucune?)\b",
    re.IGNORECASE,
)
_PRICE_ASKED = re.compile(
    r"^\W*(?:how\s+much\s+(?:does|do|did|is|are|was|were|will|would|should)\b.*\b(?:cost|costs"
    r"|charge|charged|pay|paid|fee|fees|price|fine|rent|deposit)\b|combien\s+(?:coûte|coûtent"
    r"|coûtait|coûtera|faut-il\s+payer|paie|paye|dois-je\s+payer)|quel(?:le)?\s+(?:est\s+"
    r"(?:le|la)\s+)?(?:prix|tarif|montant|coût|cotisation))",
    re.IGNORECASE,
)
_PRICE_GIVEN = re.compile(
    r"\d|[£€$¥]|\b(?:euros?|pounds?|dollars?|francs?|pence|centimes?|free|gratuite?s?|nothing"
    r"|rien|no\s+charge)\b",
    re.IGNORECASE,
)
_ASKED_GIVEN = ((_AMOUNT_ASKED, _AMOUNT_GIVEN), (_PRICE_ASKED, _PRICE_GIVEN))
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
