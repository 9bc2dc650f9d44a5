"""Server-sent events of a streamed chat completion (plain Python: unit-tested without Ray).

A failure after the first event cannot change the HTTP status any more, so it must be visible
in the stream itself: an OpenAI error event (the openai SDK raises it as an APIError), never a
stream that simply stops. A client that goes away cancels the stream (not an error).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from index.errors import GroundedError
from serve.http import api
from serve.query.generation import GeneratorUnavailableError
from serve.query.pipeline import Answer

log = logging.getLogger("grounded")


def stream_failure(request_id: str) -> GeneratorUnavailableError:
    """The error a stream ends with when something other than a refusal broke it (logged
    here with the traceback of the exception being handled)."""
    log.exception("request %s: the stream failed", request_id)
    return GeneratorUnavailableError(
        f"the answer stopped before it was complete: a server component failed "
        f"(request {request_id}); retry the request"
    )


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


async def chat_events(
    first: str,
    stream: AsyncIterator[str | Answer],
    *,
    request_id: str,
    created: int,
    final_chunks: Callable[[Answer], Awaitable[list[dict[str, Any]]]],
    on_end: Callable[[Answer | None], Awaitable[None]],
    model: str = api.MODEL_ID,
) -> AsyncIterator[str]:
    """The role chunk, a chunk per text delta (``first`` is the first one), ``final_chunks``
    of the answer (citations, usage), ``[DONE]``; or an error event when the pipeline fails.
    ``on_end`` runs last in every case, with the answer or None (settles usage)."""
    answer = None
    try:
        yield sse(api.chunk(request_id, created, {"role": "assistant", "content": ""}, model=model))
        item: str | Answer = first
        while not isinstance(item, Answer):
            if item:  # "" only marks that the generation has started
                yield sse(api.chunk(request_id, created, {"content": item}, model=model))
            item = await anext(stream)
        answer = item
        for final in await final_chunks(answer):
            yield sse(final)
        yield sse("[DONE]")
    except GroundedError as exc:
        yield sse(api.error_body(exc))
    except Exception:  # a replica died, a connection broke: say so, never stop silently
        yield sse(api.error_body(stream_failure(request_id)))
    finally:
        await stream.aclose()  # settles the budget lease if the client went away
        await on_end(answer)
