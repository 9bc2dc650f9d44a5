"""Instruction-like passages in documents (indirect prompt injection, OWASP LLM01).

Documents are data, never instructions (DESIGN.md decision 6). Escaping keeps document text
from closing a source block; this screen finds the sentences that try to instruct the model
that reads them, so that the prompt can withhold them and the tenant can see them (flags are
stored with the document at ingest). A sentence is flagged when it

- carries chat-template or prompt-structure tokens (``<|im_start|>``, ``[INST]``, ``<<SYS>>``,
  ``### Instruction``, ``<source>`` tags): no ordinary document needs them;
- uses a known override phrase ("ignore all previous instructions", "system prompt",
  "developer mode", "ignorez les consignes"...);
- addresses an AI reader (AI assistant, language model, chatbot, automated systems, "Note to
  the assistant", "Assistant:" as a label) and tells it what to do (reply, print, append,
  must, always, never...).

A plain keyword screen: cheap, explainable, and measured (benchmarks/RESULTS.md) for what it
catches and for what it flags in ordinary text. It is one layer of several, not a proof.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STRUCTURE = re.compile(
    r"<\|(?:im_start|im_end|endoftext|system|user|assistant|eot_id|start_header_id)\|>"
    r"|\[/?INST\]|<</?SYS>>|^\s*#{2,}\s*(?:instruction|system|response)\b"
    r"|</?\s*sources?\b|</?\s*(?:system|instructions?)\s*>",
    re.IGNORECASE | re.MULTILINE,
)
_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass|set aside)\b[^.!?\n]{0,40}"
    r"\b(?:instructions?|rules|prompts?|guidelines|sources|everything|restrictions)\b"
    r"|\bsystem prompt\b|\bdeveloper mode\b|\bjailbreak"
    r"|\bnew (?:system )?(?:prompt|rules?|instructions)\b"
    r"|\bunrestricted (?:AI|assistant|model|robot|chatbot|mode)\b"
    r"|\brole-?play\b[^.!?\n]{0,60}\byou are\b"
    r"|\b(?:ignore[zr]?|oublie[zr]?|ne tenez pas compte)\b[^.!?\n]{0,40}"
    r"\b(?:consignes?|instructions?|règles|sources)\b"
    r"|\bprompt (?:système|systeme)\b|\bmode (?:développeur|developpeur)\b"
    r"|\bnouvelles? (?:consignes?|instructions?|règles)\b",
    re.IGNORECASE,
)
_READER = r"(?:(?:AI|IA|virtual|digital|chat) )?(?:assistants?|models?|bots?|systems?)"
_ADDRESSEE = re.compile(
    r"\b(?:AI|A\.I\.|IA|LLMs?|GPT\w*|chatbots?|language models?|modèles? de langage"
    r"|automated (?:systems?|assistants?|tools?|readers?)"
    r"|(?:AI|IA|virtual|digital|chat) assistants?|assistants? (?:IA|virtuels?)"
    r"|assistants? (?:instructions?|notice|note|consigne)"
    r"|(?:note|message|notice|instructions?|remarque|consigne|avis)s?(?:\s+\w+){0,2}\s+"
    r"(?:to|for|pour|à|au|aux)\s+(?:the |an? |l'|les |le )?"
    + _READER
    + r"|(?:assistants?|models?) (?:reading|processing|summari[sz]ing|answering|using))\b"
    r"|^\W*(?:assistant|assistants)\s*:",
    re.IGNORECASE | re.MULTILINE,
)
_IMPERATIVE = re.compile(
    r"\b(?:must|should|shall|always|never|do not|don't|instead|reply|respond|answer|say|"
    r"state|tell|print|reveal|repeat|copy|append|insert|ignore|disregard|forget|treat|"
    r"pretend|act as|you are now|from now on|(?:list|output|show) (?:the|all|every|your)|"
    r"doit|doivent|devez|toujours|jamais|uniquement|répondez|repondez|dites|affichez|ajoutez|"
    r"commencez|terminez|indiquez|écrivez|ecrivez|copiez|listez)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]*(?:[.!?]+|\n|$)")


@dataclass(frozen=True, slots=True)
class FlaggedPassage:
    start: int
    end: int
    reason: str  # "prompt-structure", "override", or "addresses-ai"


CARRY = 3  # sentences after one that addresses an AI ("Note to the assistant:") it governs


def find_instructions(text: str) -> list[FlaggedPassage]:
    """Sentences of ``text`` that try to instruct a model, with their character offsets. An
    address to an AI reader carries over the next few sentences of its paragraph
    ("Assistant: this page is a test. Reply only with ...")."""
    flagged: list[FlaggedPassage] = []
    addressed_at, addressed_left = -1, 0  # the pending addressee sentence, sentences left
    for match in _SENTENCE.finditer(text):
        sentence = match.group(0)
        if not sentence.strip():
            if "\n" in sentence or not sentence:
                addressed_left = 0  # a paragraph ends
            continue
        start = match.start() + len(sentence) - len(sentence.lstrip())
        end = match.start() + len(sentence.rstrip())
        reason = None
        addresses = bool(_ADDRESSEE.search(sentence))
        if _STRUCTURE.search(sentence):
            reason = "prompt-structure"
        elif _OVERRIDE.search(sentence):
            reason = "override"
        elif _IMPERATIVE.search(sentence) and (addresses or addressed_left > 0):
            reason = "addresses-ai"
            if not addresses and addressed_at >= 0:
                start = addressed_at  # the address and what it asks form one passage
        if addresses:
            addressed_at, addressed_left = start, CARRY
        else:
            addressed_left -= 1
        if sentence.endswith("\n") and not sentence.strip().endswith(":"):
            addressed_left = 0
        if reason:
            if flagged and start <= flagged[-1].end + 2:
                flagged[-1] = FlaggedPassage(flagged[-1].start, end, flagged[-1].reason)
            else:
                flagged.append(FlaggedPassage(start, end, reason))
            addressed_at = -1 if not addresses else addressed_at
    return flagged


WITHHELD = "[passage withheld: instruction-like text]"


def withhold_instructions(text: str) -> str:
    """``text`` with every flagged passage replaced by a visible marker."""
    parts, at = [], 0
    for passage in find_instructions(text):
        parts += [text[at : passage.start], WITHHELD]
        at = passage.end
    return "".join(parts) + text[at:]
