"""The OpenAI-compatible surface: request models, response shapes and the error mapping.

Plain Python (no Ray): the appliance's ingress parses requests with these models and shapes
every response and error here, so the wire format is defined and tested in one place.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from index.access import KEEP, Access, parse_access
from index.errors import GroundedError, InvalidRequestError
from index.types import SearchHit
from serve.query.pipeline import Answer, QueryOptions
from serve.query.prompt import Turn
from serve.query.relevance import relevance
from serve.query.retrieval import SearchFilter
from serve.query.routing import MODEL_ID

MODEL_DESCRIPTION = (
    "grounded (the default: routed between the configured models where there are several), "
    "or a model GET /v1/models lists; another name is answered 404 model_not_found"
)


class ModelNotFoundError(GroundedError):
    status = 404
    type = "invalid_request_error"
    param = "model"
    code = "model_not_found"


def content_text(content: Any, kinds: tuple[str, ...], param: str) -> str:
    """A message's text: a string, or a list of text parts (of a type in ``kinds``); any other
    content is refused, naming ``param``."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequestError(
            f"a message's content must be a string or a list of text parts, "
            f"not {type(content).__name__}",
            param=param,
        )
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise InvalidRequestError(
                f"message content of type {kind!r} is not supported; send text (Grounded "
                "answers from the documents already uploaded)",
                param=param,
            )
        text = part.get("text", "")
        if not isinstance(text, str):
            raise InvalidRequestError(
                f"the text of a {kind} part must be a string, not {type(text).__name__}",
                param=param,
            )
        parts.append(text)
    return "\n".join(parts)


def _text(content: str | list[dict[str, Any]] | None) -> str:
    return content_text(content, ("text",), "messages")


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class Filters(BaseModel):
    """Extension: narrows retrieval to the caller's documents matching every condition."""

    model_config = ConfigDict(extra="forbid")

    file_ids: list[str] | None = None
    filenames: list[str] | None = None
    attributes: dict[str, str] = {}

    def search_filter(self) -> SearchFilter:
        return SearchFilter(
            doc_ids=tuple(self.file_ids) if self.file_ids is not None else None,
            file_names=tuple(self.filenames) if self.filenames is not None else None,
            attributes=dict(self.attributes),
        )


class ChatRequest(BaseModel):
    """OpenAI's chat completion request; unknown OpenAI parameters are accepted and ignored.
    Extensions: top_k, filters, score_threshold (on the relevance in [0, 1] that search results
    show), rerank."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description=MODEL_DESCRIPTION)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    n: int = Field(1, ge=1, le=1)
    user: str | None = None
    # Validated as OpenAI does, not used: answers are decoded greedily (generator.temperature).
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    top_k: int | None = Field(None, gt=0, le=50)
    filters: Filters | None = None
    score_threshold: float | None = Field(None, ge=0, le=1)  # on the relevance shown, in [0, 1]
    rerank: bool | None = None
    # The sources listed after the answer in its text (serve/http/readable.py); None: the
    # key's default (`keys create --sources-in-text`).
    sources_in_text: bool | None = None

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if tools:
            raise ValueError(
                "tools (function calling) are not supported: Grounded answers from the "
                "caller's documents only; send the request without tools"
            )
        return tools

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, messages: list[Message]) -> list[Message]:
        if messages[-1].role != "user" or not _text(messages[-1].content).strip():
            raise ValueError("the last message must be the user's question (role 'user', text)")
        return messages

    def question(self) -> str:
        return _text(self.messages[-1].content).strip()

    def history(self) -> list[Turn]:
        """Earlier user and assistant turns. System and developer messages are not used: the
        appliance's grounding rules are the system prompt."""
        return [
            Turn(m.role, _text(m.content))
            for m in self.messages[:-1]
            if m.role in ("user", "assistant") and _text(m.content).strip()
        ]

    def answer_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def options(self) -> QueryOptions:
        return QueryOptions(
            top_k=self.top_k,
            search_filter=self.filters.search_filter() if self.filters else None,
            score_threshold=self.score_threshold,
            rerank=self.rerank,
        )

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class AccessUpdate(BaseModel):
    """``POST /v1/files/{id}/access``: who may read a file (index/access.py)."""

    model_config = ConfigDict(extra="forbid")

    access: list[str] | str  # principals (user:<name>, group:<name>), or "tenant"

    def readers(self) -> Access:
        return parse_access(self.access)


def upload_access(value: str | None, sent: bool) -> Access | str:
    """An upload's ``access`` form field: KEEP (a new file is the tenant's, a stored one
    keeps its list) when not sent; sent empty (which FastAPI reads as absent), a 400."""
    if value is None and not sent:
        return KEEP
    return parse_access(value or "")


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    input: str | list[str] = Field(min_length=1)
    model: str = MODEL_ID
    encoding_format: Literal["float", "base64"] = "float"

    def texts(self) -> list[str]:
        texts = [self.input] if isinstance(self.input, str) else list(self.input)
        if len(texts) > 2048 or any(not t.strip() for t in texts):
            raise InvalidRequestError(
                "input must be 1 to 2048 non-empty strings (token arrays are not supported)",
                param="input",
            )
        return texts


class RankingOptions(BaseModel):
    """OpenAI's ranking options (vector-store search, the file_search tool): the threshold is
    on the relevance a result shows, in [0, 1] (serve/query/relevance.py)."""

    model_config = ConfigDict(extra="allow")

    ranker: str | None = None  # accepted; Grounded ranks with its configured pipeline
    score_threshold: float | None = Field(None, ge=0, le=1)


class SearchRequest(BaseModel):
    """OpenAI's vector store search. ``filters``: OpenAI's comparison and compound filters on
    a vector store's file attributes, or for ``vs_<tenant>`` (every document of the tenant)
    Grounded's extension shape (file_ids, filenames, upload attributes)."""

    model_config = ConfigDict(extra="allow")

    query: str | list[str]
    max_num_results: int = Field(10, ge=1, le=50)
    filters: Filters | dict[str, Any] | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False
    # Extension: each result also carries ``grounded`` (chunk id, offsets, page, heading path,
    # raw score); ``extra_body={"grounded": True}`` from openai-python.
    grounded: bool = False

    def text(self) -> str:
        text = self.query if isinstance(self.query, str) else " ".join(self.query)
        if not text.strip():
            raise InvalidRequestError("query must not be empty", param="query")
        return text


def parse(model: type[BaseModel], payload: Any) -> Any:
    """Validate a request body; errors name the field (400, never 500)."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        message = first["msg"].removeprefix("Value error, ")
        raise InvalidRequestError(f"{field}: {message}", param=field) from None


def error_body(exc: GroundedError) -> dict[str, Any]:
    return {
        "error": {
            "message": exc.message,
            "type": exc.type,
            "param": exc.param,
            "code": exc.code,
        }
    }


def error_response(exc: GroundedError, request_id: str | None = None) -> JSONResponse:
    """OpenAI's error object with the error's status; 429 and 503 carry Retry-After."""
    headers = {"x-request-id": request_id} if request_id else {}
    retry_after = getattr(exc, "retry_after", None)  # 429, and 503 while a replica restarts
    if retry_after is not None:
        headers["retry-after"] = str(max(1, round(retry_after)))
    return JSONResponse(error_body(exc), status_code=exc.status, headers=headers)


def _annotations(answer: Answer, files_url: str) -> list[dict[str, Any]]:
    """OpenAI's chat ``url_citation`` annotations, one per (citing sentence, cited source):
    ``start_index``/``end_index`` mark the sentence in the answer text; ``url`` is the cited
    file's text (``GET /v1/files/{id}/content?format=text``) with the chunk's character range
    as an RFC 5147 fragment (``#char=start,end``); ``title`` names the file, its page and
    section."""
    return [
        {"type": "url_citation", "url_citation": {
            "start_index": start, "end_index": end,
            "url": f"{files_url}/{hit.doc_id}/content?format=text#char={hit.start},{hit.end}",
            "title": citation_title(hit),
        }}
        for (start, end), hit in citing(answer)
    ]  # fmt: skip


def citing(answer: Answer) -> list[tuple[tuple[int, int], SearchHit]]:
    """Each (citing sentence's span in the answer text, the source it cites), in order: what
    every annotation shape (chat's url_citation, Responses' file_citation) is made of."""
    cited = {citation.source.number: citation.source.hit for citation in answer.cited}
    return [(statement.span, cited[number]) for statement in answer.statements
            for number in statement.numbers if number in cited]  # fmt: skip


def citation_title(hit: SearchHit) -> str:
    """ "handbook.pdf, page 3: Leave > Carry-over"."""
    title = hit.file_name + (f", page {hit.page}" if hit.page else "")
    return title + (f": {' > '.join(hit.heading_path)}" if hit.heading_path else "")


def extension(answer: Answer, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``grounded`` field: what standard clients ignore and Grounded's clients read;
    ``cost`` is the estimate from the configured prices ({"amount", "currency"})."""
    return {
        **({"cost": cost} if cost is not None else {}),
        "abstained": answer.abstained,
        "citations": [
            {
                "number": c.source.number,
                "file_id": c.source.hit.doc_id,
                "filename": c.source.hit.file_name,
                "chunk_id": c.source.hit.chunk_id,
                "start": c.source.hit.start,
                "end": c.source.hit.end,
                "page": c.source.hit.page,
                "heading_path": list(c.source.hit.heading_path),
                "score": score_of(c.source.hit),
                "sentences": list(c.sentences),
                "support": c.support,
                "inferred": c.inferred,
                "quote": c.quote,
                "verified": c.verified,
            }
            for c in answer.cited
        ],
        "sources": [
            {
                "number": s.number,
                "file_id": s.hit.doc_id,
                "filename": s.hit.file_name,
                "chunk_id": s.hit.chunk_id,
                "score": score_of(s.hit),
            }
            for s in answer.sources
        ],
        "citations_written": answer.citations_written,
        "invalid_citations_removed": answer.invalid_citations_removed,
        "supported_share": answer.supported_share,
        "answer_support": answer.answer_support,
        "timings": answer.timings,
        "route": answer.route.as_dict(),
    }


def shown_score(hit: SearchHit) -> float:
    """The relevance in [0, 1] that OpenAI's objects show (serve/query/relevance.py): the
    pipeline's, or mapped here for a hit that did not pass through it."""
    return hit.relevance if hit.relevance is not None else relevance(hit)


def score_of(hit: SearchHit) -> float | None:
    """The raw score that ranked ``hit`` (Grounded's extension fields)."""
    for score in (hit.rerank_score, hit.dense_score, hit.bm25_score):
        if score is not None:
            return float(score)
    return None


def usage(answer: Answer) -> dict[str, Any]:
    u = answer.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _finish(answer: Answer) -> str:
    return "length" if answer.finish_reason == "length" else "stop"


def chat_completion(
    answer: Answer,
    request_id: str,
    created: int,
    files_url: str,
    cost: dict[str, Any] | None = None,
    model: str = MODEL_ID,
    after: str = "",
) -> dict[str, Any]:
    """OpenAI's chat completion; ``files_url`` is this server's ``.../v1/files`` (citations
    link to it); ``model``, the name the request asked for; ``after``, text that follows the
    answer's (its sources, for a person to read: serve/http/readable.py)."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer.text + after,
                    "refusal": None,
                    "annotations": _annotations(answer, files_url),
                },
                "finish_reason": _finish(answer),
                "logprobs": None,
            }
        ],
        "usage": usage(answer),
        "grounded": extension(answer, cost),
    }


def chunk(
    request_id: str, created: int, delta: dict, finish: str | None = None,
    model: str = MODEL_ID, **extra,
) -> dict:  # fmt: skip
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }


def final_chunks(
    answer: Answer,
    request_id: str,
    created: int,
    include_usage: bool,
    files_url: str,
    cost: dict[str, Any] | None = None,
    model: str = MODEL_ID,
) -> list:
    """After the text deltas: the citations (with the finish reason), then the usage chunk."""
    chunks = [
        chunk(
            request_id,
            created,
            {"annotations": _annotations(answer, files_url)},
            _finish(answer),
            model,
            grounded=extension(answer, cost),
        )
    ]
    if include_usage:
        chunks.append({**chunk(request_id, created, {}, model=model), "choices": [],
                       "usage": usage(answer)})  # fmt: skip
    return chunks


def now() -> int:
    return int(time.time())
