"""Citations are checked, not trusted (DESIGN.md decision 8).

The model cites sources as [n] (or [n, m]). A number that was not one of the prompt's sources is
removed from the answer and counted; the answer lists each source actually cited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from serve.query.prompt import Source

_CITATION = re.compile(r"\s?\[(\d+(?:\s*,\s*\d+)*)\]")


@dataclass(frozen=True, slots=True)
class CheckedAnswer:
    text: str
    cited: tuple[Source, ...]  # in order of first citation
    invalid_removed: int


def check_citations(text: str, sources: Sequence[Source]) -> CheckedAnswer:
    by_number = {source.number: source for source in sources}
    cited: dict[int, Source] = {}
    removed = 0

    def keep_valid(match: re.Match[str]) -> str:
        nonlocal removed
        numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
        valid = [n for n in numbers if n in by_number]
        removed += len(numbers) - len(valid)
        for number in valid:
            cited.setdefault(number, by_number[number])
        if not valid:
            return ""
        space = " " if match.group(0).startswith((" ", "\t", "\n")) else ""
        return space + "[" + ", ".join(str(n) for n in valid) + "]"

    checked = _CITATION.sub(keep_valid, text)
    return CheckedAnswer(checked, tuple(cited.values()), removed)
