"""``/v1/responses``: OpenAI's Responses API, translated onto the appliance's one answering path
(``Gateway.ask``: budgets, fair admission, accounting, metrics and tracing as for chat
completions). What a response is, and its events: serve/http/responses.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from serve.http import api, objects, openapi
from serve.http.responses import (
    MAX_RESULTS,
    ResponseRequest,
    ResponseShape,
    conversation,
    new_id,
    response_events,
)
from serve.http.routes import Querying, gateway
from serve.query.pipeline import Answer, QueryOptions
from serve.query.prompt import Turn
from serve.state.database import off_loop

router = APIRouter()


def _input_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's input as stored and listed: message items with ids and text parts."""
    listed = []
    for item in items:
        if item.get("type", "message") != "message":
            continue
        content = item.get("content")
        parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
        listed.append({"type": "message", "id": item.get("id") or new_id("msg"),
                       "role": item["role"], "status": "completed", "content": parts})  # fmt: skip
    return listed


@router.post("/v1/responses", response_model=None, responses=openapi.RESPONSE)
async def create_response(request: Request, caller: Querying, body: ResponseRequest):
    service = gateway(request)
    model = service.model_for(body.model)
    question, turns = conversation(body.items())
    quoted: list[str] = []  # the documents the conversation has quoted so far
    if body.previous_response_id:
        earlier, quoted = await service.stored_response(
            caller, body.previous_response_id, "history"
        )
        turns = [Turn(role, text) for role, text in earlier] + turns
    tool = body.file_search()
    options, attributes = QueryOptions(), {}
    if tool is not None:
        search_filter, attributes = await service.stores_filter(
            caller, tool.vector_store_ids, tool.filters
        )
        threshold = tool.ranking_options.score_threshold if tool.ranking_options else None
        options = QueryOptions(top_k=tool.max_num_results or MAX_RESULTS,
                               search_filter=search_filter, score_threshold=threshold)  # fmt: skip
    shape = ResponseShape(
        id=new_id("resp"),  # the server's own: a client's X-Request-Id may hold anything
        created_at=api.now(),
        request=body,
        search_id=new_id("fs") if tool is not None else None,
    )
    asked = await service.ask(
        caller,
        question,
        turns,
        body.max_output_tokens,
        options,
        shape.id,
        streaming=body.stream,
        endpoint="responses",
        model=model,
    )

    async def finish(answer: Answer) -> dict[str, Any]:
        cost = await asked.finish(answer)
        response = shape.completed(question, answer, attributes, cost)
        if body.store:
            history = [(t.role, t.content) for t in turns]
            history += [("user", question), ("assistant", answer.text)]
            documents = [*quoted, *(s.hit.doc_id for s in answer.sources)]
            await off_loop(service.responses.save, caller.tenant, response,
                                    _input_items(body.items()), history, caller.identity,
                                    documents)  # fmt: skip
        return response

    if not body.stream:
        return JSONResponse(await finish(asked.first))
    events = response_events(shape, question, asked.first, asked.stream, finish=finish,
                             on_end=asked.on_end)  # fmt: skip
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})  # fmt: skip


@router.get("/v1/responses/{response_id}", response_model=None, responses=openapi.RESPONSE)
async def get_response(request: Request, caller: Querying, response_id: str) -> dict[str, Any]:
    service = gateway(request)
    return (await service.stored_response(caller, response_id, "body"))[0]


@router.delete(
    "/v1/responses/{response_id}", response_model=None, responses=openapi.RESPONSE_DELETED
)
async def delete_response(request: Request, caller: Querying, response_id: str) -> dict[str, Any]:
    service = gateway(request)
    await off_loop(service.responses.delete, caller.tenant, caller.owner, response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.get(
    "/v1/responses/{response_id}/input_items", response_model=None, responses=openapi.INPUT_ITEMS
)
async def input_items(
    request: Request,
    caller: Querying,
    response_id: str,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    service = gateway(request)
    items, _ = await service.stored_response(caller, response_id, "input_items")
    return objects.cursor_page(items, limit=limit, order=order, after=after)
