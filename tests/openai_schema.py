"""Strict checks of Grounded's wire objects against the `openai` package's own types.

``conforms`` validates in pydantic's strict mode (no coercion) and then refuses any field the
type does not define, except Grounded's extension ``grounded``: a field of another shape is what
strict clients (the Vercel AI SDK) reject, while the Python SDK silently keeps it as an extra.
"""

from __future__ import annotations

from typing import Any, TypeVar

from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_message import Annotation
from pydantic import BaseModel

EXTENSION = "grounded"
Model = TypeVar("Model", bound=BaseModel)


def conforms(model: type[Model], payload: dict[str, Any]) -> Model:
    parsed = model.model_validate(payload, strict=True)
    _defined_fields_only(parsed, model.__name__)
    return parsed


def chunk_conforms(payload: dict[str, Any]) -> ChatCompletionChunk:
    """A chat completion chunk. OpenAI's streaming deltas carry ``annotations`` (of the same
    type as a message's), which the Python SDK's ChoiceDelta does not declare: checked here."""
    choices = []
    for choice in payload.get("choices", []):
        delta = dict(choice.get("delta") or {})
        for annotation in delta.pop("annotations", None) or []:
            conforms(Annotation, annotation)
        choices.append({**choice, "delta": delta})
    return conforms(ChatCompletionChunk, {**payload, "choices": choices})


def _defined_fields_only(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        unknown = set(value.model_extra or {}) - {EXTENSION}
        assert not unknown, f"{path}: fields OpenAI's schema does not define: {sorted(unknown)}"
        for name in type(value).model_fields:
            _defined_fields_only(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _defined_fields_only(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _defined_fields_only(item, f"{path}.{key}")
