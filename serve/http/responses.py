"""OpenAI's Responses API over Grounded's answers: the request model, the response object and
its stream of events (plain Python: unit-tested without Ray).

A response is one grounded answer. With the ``file_search`` tool, retrieval is narrowed to the
named vector stores (and their ``filters``) and the output starts with a ``file_search_call``
item; without it, the tenant's whole document set is searched, as chat completions do. The
answer is a ``message`` whose ``output_text`` carries a ``file_citation`` annotation per cited
source and sentence. ``instructions`` and system messages are kept with the response but not
put in the prompt: the appliance's grounding rules are the system prompt (as in chat
completions). Grounded's own fields (citations with quotes, abstention, timings) are in the
``grounded`` extension field.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from index.errors import GroundedError, InvalidRequestError
from serve.http import api
from serve.http.streaming import stream_failure
from serve.query.pipeline import Answer
from serve.query.prompt import Turn

FILE_SEARCH_RESULTS = "file_search_call.results"
MAX_RESULTS = 50


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


class FileSearchTool(BaseModel):
    """The ``file_search`` tool: which of the caller's vector stores to search, and how."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["file_search"]
    vector_store_ids: list[str] = Field(min_length=1)
    max_num_results: int | None = Field(None, ge=1, le=MAX_RESULTS)
    filters: dict[str, Any] | None = None
    ranking_options: api.RankingOptions | None = None


class ResponseRequest(BaseModel):
    """``POST /v1/responses``. Unknown OpenAI parameters are accepted and ignored; features
    Grounded does not have (function and other tools, images and files as input, reasoning,
    structured text formats) are refused with 400."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description=api.MODEL_DESCRIPTION)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] = []
    tool_choice: str | dict[str, Any] | None = None
    # null is accepted as not given (as OpenAI does): documented nullable, never None after
    include: list[str] | None = []
    max_output_tokens: int | None = Field(None, gt=0)
    previous_response_id: str | None = None
    store: bool | None = True
    stream: bool | None = False
    metadata: dict[str, str] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("include", "store", "stream", mode="before")
    @classmethod
    def _null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """OpenAI's API takes null for these as not given (LlamaIndex sends
        ``"include": null``); its defaults are Grounded's: no includes, stored, not streamed."""
        if value is None:
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)
        return value

    @field_validator("tools")
    @classmethod
    def _only_file_search(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kinds = [t.get("type") for t in tools]
        unsupported = sorted({str(k) for k in kinds if k != "file_search"})
        if unsupported:
            raise ValueError(
                f"tools of type {', '.join(unsupported)} are not supported: Grounded answers "
                "from the caller's documents only; use the file_search tool or none"
            )
        if len(kinds) > 1:
            raise ValueError("give at most one file_search tool (list several vector stores in it)")
        return tools

    @field_validator("include")
    @classmethod
    def _known_includes(cls, include: list[str]) -> list[str]:
        unknown = sorted(set(include) - {FILE_SEARCH_RESULTS})
        if unknown:
            raise ValueError(f"include {unknown} is not supported; only {FILE_SEARCH_RESULTS!r}")
        return include

    @field_validator("reasoning")
    @classmethod
    def _no_reasoning(cls, reasoning: dict[str, Any] | None) -> dict[str, Any] | None:
        if reasoning and any(v is not None for v in reasoning.values()):
            raise ValueError("reasoning options are not supported by Grounded's model")
        return reasoning

    @field_validator("text")
    @classmethod
    def _plain_text(cls, text: dict[str, Any] | None) -> dict[str, Any] | None:
        form = (text or {}).get("format") or {}
        if not isinstance(form, dict):
            raise ValueError(f"text.format must be an object such as {{'type': 'text'}}: {form!r}")
        kind = form.get("type", "text")
        if kind != "text":
            raise ValueError(
                f"text.format {kind!r} is not supported: answers are text with citations"
            )
        return text

    def file_search(self) -> FileSearchTool | None:
        return api.parse(FileSearchTool, self.tools[0]) if self.tools else None

    def items(self) -> list[dict[str, Any]]:
        """The input as items (a string is one user message)."""
        if isinstance(self.input, str):
            return [{"type": "message", "role": "user", "content": self.input}]
        return self.input


def _item_text(item: dict[str, Any]) -> str:
    """A message item's text: a string, or its input_text / output_text parts."""
    return api.content_text(item.get("content"), ("input_text", "output_text", "text"), "input")


def conversation(items: list[dict[str, Any]]) -> tuple[str, list[Turn]]:
    """The question (the last user message) and the earlier user and assistant turns.
    Earlier tool items (file_search_call) are context the answer already used: skipped."""
    turns: list[Turn] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "file_search_call":
            continue
        if kind != "message":
            raise InvalidRequestError(
                f"input items of type {kind!r} are not supported; send messages",
                param="input",
            )
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise InvalidRequestError(f"input message role {role!r} is not valid", param="input")
        if role in ("user", "assistant") and (text := _item_text(item).strip()):
            turns.append(Turn(role, text))
    if not turns or turns[-1].role != "user":
        raise InvalidRequestError(
            "the input must end with the user's question (a user message with text)",
            param="input",
        )
    return turns[-1].content, turns[:-1]


def output_turns(response: dict[str, Any]) -> list[Turn]:
    """The assistant turns of a stored response's output (for previous_response_id)."""
    return [
        Turn("assistant", "".join(p.get("text", "") for p in item.get("content", [])))
        for item in response.get("output", [])
        if item.get("type") == "message"
    ]


@dataclass
class ResponseShape:
    """What a response object repeats from its request, and the ids of its items."""

    id: str
    created_at: int
    request: ResponseRequest
    search_id: str | None  # the file_search_call item, when the tool was given
    message_id: str = field(default_factory=lambda: new_id("msg"))

    def base(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        request = self.request
        body = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": request.model,
            "output": output,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "previous_response_id": request.previous_response_id,
            "tools": request.tools,
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "metadata": request.metadata or {},
            "error": None,
            "incomplete_details": None,
        }
        # The spec types these as a string and an object, never null: absent until known.
        if request.user is not None:
            body["user"] = request.user
        return body

    def search_call(self, question: str, status: str, answer: Answer | None = None,
                    attributes: dict[str, dict] | None = None) -> dict[str, Any]:  # fmt: skip
        results = None
        if answer is not None and FILE_SEARCH_RESULTS in self.request.include:
            results = [
                {"file_id": s.hit.doc_id, "filename": s.hit.file_name,
                 "score": api.shown_score(s.hit), "text": s.hit.text,
                 "attributes": (attributes or {}).get(s.hit.doc_id) or None}
                for s in answer.sources
            ]  # fmt: skip
        return {"type": "file_search_call", "id": self.search_id, "status": status,
                "queries": [question], "results": results}  # fmt: skip

    def message(self, text: str, annotations: list[dict], status: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [text_part(text, annotations)],
        }

    def completed(self, question: str, answer: Answer, attributes, cost=None) -> dict[str, Any]:
        """The finished response: complete, or incomplete when cut by max_output_tokens."""
        cut = answer.finish_reason == "length"
        status = "incomplete" if cut else "completed"
        output = []
        if self.search_id:
            output.append(self.search_call(question, "completed", answer, attributes))
        output.append(self.message(answer.text, file_citations(answer), status))
        response = self.base(status, output)
        response["usage"] = usage(answer)
        if cut:
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["grounded"] = api.extension(answer, cost)
        return response


def text_part(text: str, annotations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}


def file_citations(answer: Answer) -> list[dict[str, Any]]:
    """``file_citation`` annotations: one per (citing sentence, cited source), placed at the
    end of the sentence."""
    return [{"type": "file_citation", "file_id": hit.doc_id, "filename": hit.file_name,
             "index": end} for (_, end), hit in api.citing(answer)]  # fmt: skip


def usage(answer: Answer) -> dict[str, Any]:
    u = answer.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def event(kind: str, sequence: int, **fields: Any) -> str:
    payload = {"type": kind, "sequence_number": sequence, **fields}
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"


async def response_events(
    shape: ResponseShape,
    question: str,
    first: str,
    stream: AsyncIterator[str | Answer],
    *,
    finish: Callable[[Answer], Awaitable[dict[str, Any]]],
    on_end: Callable[[Answer | None], Awaitable[None]],
) -> AsyncIterator[str]:
    """The Responses stream: created, in_progress, the file_search_call item (in_progress,
    searching, completed: retrieval is done before the first delta), the message item with a
    delta per text piece, the annotations, the done events, then ``response.completed``
    (``finish`` returns the final response object). A failure midway is an ``error`` event
    and ``response.failed``, never a stream that just stops; ``on_end`` runs last."""
    sequence = iter(range(1_000_000_000))
    answer = None
    output_index = 0
    try:
        yield event("response.created", next(sequence), response=shape.base("in_progress", []))
        yield event("response.in_progress", next(sequence), response=shape.base("in_progress", []))
        if shape.search_id:
            item = shape.search_call(question, "in_progress")
            ids = {"item_id": shape.search_id, "output_index": output_index}
            yield event("response.output_item.added", next(sequence), item=item, output_index=0)
            for stage in ("in_progress", "searching", "completed"):
                yield event(f"response.file_search_call.{stage}", next(sequence), **ids)
            output_index += 1
        ids = {"item_id": shape.message_id, "output_index": output_index, "content_index": 0}
        yield event("response.output_item.added", next(sequence), output_index=output_index,
                    item=shape.message("", [], "in_progress"))  # fmt: skip
        yield event("response.content_part.added", next(sequence), **ids, part=text_part("", []))
        item: str | Answer = first
        while not isinstance(item, Answer):
            if item:  # "" only marks that the generation has started
                yield event("response.output_text.delta", next(sequence), **ids, delta=item,
                            logprobs=[])  # fmt: skip
            item = await anext(stream)
        answer = item
        final = await finish(answer)
        annotations = file_citations(answer)
        for number, annotation in enumerate(annotations):
            yield event("response.output_text.annotation.added", next(sequence), **ids,
                        annotation_index=number, annotation=annotation)  # fmt: skip
        yield event("response.output_text.done", next(sequence), **ids, text=answer.text,
                    logprobs=[])  # fmt: skip
        part = final["output"][-1]["content"][0]
        yield event("response.content_part.done", next(sequence), **ids, part=part)
        if shape.search_id:
            yield event("response.output_item.done", next(sequence), output_index=0,
                        item=final["output"][0])  # fmt: skip
        yield event("response.output_item.done", next(sequence), output_index=output_index,
                    item=final["output"][-1])  # fmt: skip
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield event(kind, next(sequence), response=final)
    except Exception as exc:  # say so, never stop silently (GroundedError or a dead replica)
        error = exc if isinstance(exc, GroundedError) else stream_failure(shape.id)
        body = api.error_body(error)["error"]
        yield event("error", next(sequence), code=body["code"] or body["type"],
                    message=body["message"], param=body["param"])  # fmt: skip
        failed = shape.base("failed", [])
        failed["error"] = {"code": "server_error", "message": body["message"]}
        yield event("response.failed", next(sequence), response=failed)
    finally:
        await stream.aclose()
        await on_end(answer)
