"""``/v1/chat/completions``: OpenAI's chat completions over the Gateway's answering path."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from serve.http import api, openapi
from serve.http.readable import sources_text
from serve.http.routes import Querying, gateway
from serve.http.streaming import chat_events
from serve.query.pipeline import Answer

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None, responses=openapi.CHAT)
async def chat(request: Request, caller: Querying, body: api.ChatRequest):
    service = gateway(request)
    model = service.model_for(body.model)
    request_id = "chatcmpl-" + request.state.request_id.removeprefix("req-")
    created, files_url = api.now(), f"{request.base_url}v1/files"
    asked = await service.ask(
        caller, body.question(), body.history(), body.answer_tokens(), body.options(),
        request_id, streaming=body.stream, model=model,
    )  # fmt: skip
    readable = caller.sources_in_text if body.sources_in_text is None else body.sources_in_text

    def after(answer: Answer) -> str:
        return sources_text(answer, body.question()) if readable else ""

    if not body.stream:
        cost = await asked.finish(asked.first)
        return JSONResponse(api.chat_completion(asked.first, request_id, created, files_url, cost,
                                                body.model, after(asked.first)))  # fmt: skip

    async def final_chunks(answer: Answer) -> list[dict[str, Any]]:
        cost = await asked.finish(answer)
        listed = after(answer)  # the sources, streamed as the last text
        text = [api.chunk(request_id, created, {"content": listed}, model=body.model)]
        return [*(text if listed else []),
                *api.final_chunks(answer, request_id, created, body.include_usage(),
                                  files_url, cost, body.model)]  # fmt: skip

    events = chat_events(asked.first, asked.stream, request_id=request_id, created=created,
                         final_chunks=final_chunks, on_end=asked.on_end,
                         model=body.model)  # fmt: skip
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )
