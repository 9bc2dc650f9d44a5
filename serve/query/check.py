"""The answer check: does the cited source state this answer to this question? The
generator's P(yes), asked in a fresh conversation with the cited source. Two other checks were
measured against it and not adopted (benchmarks/results/routing.md, "Other checks of the small
model's answers"): every source of the prompt in view, and the question asked after the answer's
own conversation."""

from __future__ import annotations

from collections.abc import Sequence

from serve.query.generation import Generator
from serve.query.judging import yes_no_tokens, yes_probability
from serve.query.prompt import PromptBuilder, Source, source_text

CHECK_SYSTEM = "You check answers against a source. Reply with one word: yes or no."
CHECK_USER = """Source:
{source}

Question: {question}
Proposed answer: {answer}

Does the source state this answer to this question? Reply yes or no."""


class AnswerCheck:
    """Does the cited source state this answer to this question? The generator's P(yes), asked
    in a fresh conversation with the source's text as the prompt shows it (withheld passages
    stay withheld). Answers under ``min_support`` are withheld ("not found"): the threshold
    is the generator's own (``python -m benchmarks.answer_check --sweep`` chose it for
    qwen2.5-1.5b: benchmarks/results/answer-check.md)."""

    def __init__(self, generator: Generator, min_support: float, withhold: bool = True) -> None:
        self.generator, self.min_support, self.withhold = generator, min_support, withhold
        self._choices: tuple[frozenset[int], frozenset[int]] | None = None

    def messages(
        self, question: str, answer: str, source: Source, *more: Source
    ) -> list[dict[str, str]]:
        """The check's conversation; an answer that quotes two sources (``also``) is checked
        against both texts, one after the other, as one source."""
        escape = PromptBuilder(self.generator.special_tokens).escape
        texts = [source_text(s.hit, self.withhold) for s in (source, *more)]
        user = CHECK_USER.format(source=escape("\n\n".join(texts)), question=escape(question),
                                 answer=escape(answer.strip()))  # fmt: skip
        return [{"role": "system", "content": CHECK_SYSTEM}, {"role": "user", "content": user}]

    def prompt(self, question: str, answer: str, source: Source, *more: Source) -> list[int]:
        """The check's prompt tokens."""
        return self.generator.render(self.messages(question, answer, source, *more))

    def reservation(
        self, question: str, sources: Sequence[Source], max_tokens: int, also: bool = False
    ) -> int:
        """The most tokens the check of an answer of up to ``max_tokens`` tokens can use: its
        prompt with the longest source (twice, when the answer may quote a second sentence,
        which may come from the same source), the answer, and the one token it reads."""
        if not sources:
            return max_tokens + 1
        copies = 2 if also else 1
        longest = max(len(self.prompt(question, "", *[s] * copies)) for s in sources)
        return longest + max_tokens + 1

    async def support(self, token_ids: list[int], cache_salt: str) -> float:
        """P(yes) for the check's prompt (``prompt``)."""
        if self._choices is None:
            self._choices = yes_no_tokens(self.generator)
        return await yes_probability(self.generator, token_ids, self._choices, cache_salt)
