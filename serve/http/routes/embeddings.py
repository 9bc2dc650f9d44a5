"""``/v1/embeddings``, ``/v1/models`` and ``/health``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from serve.http import api, objects, openapi
from serve.http.routes import Querying, gateway

router = APIRouter()


@router.get("/health", response_model=None, responses={200: {"model": openapi.Health}})
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/models", response_model=None, responses=openapi.MODELS)
async def models(request: Request, caller: Querying) -> dict[str, Any]:
    service = gateway(request)
    return objects.models_list(service.models, service.embedding_model)


@router.post("/v1/embeddings", response_model=None, responses=openapi.EMBEDDINGS)
async def embeddings(
    request: Request, caller: Querying, body: api.EmbeddingRequest
) -> dict[str, Any]:
    service = gateway(request)
    objects.check_embedding_model(body.model, service.embedding_model)
    vectors, tokens = await service.embed(caller, body.texts())
    return objects.embeddings(vectors, body.encoding_format, tokens, body.model)
