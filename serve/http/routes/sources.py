"""``/grounded/v1/sources``, Grounded's own: a tenant's sources (folders, WebDAV, S3) declared,
listed, run and removed by its admins (serve/shards/sources.py does the work)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from index.sources.state import no_source
from serve.http import openapi
from serve.http.routes import Administering, gateway
from serve.shards.sources import SourceFields

router = APIRouter()
PREFIX = "/grounded/v1/sources"


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confirm_deletes: bool = False  # the source was emptied on purpose: delete its documents


def _source(view: dict[str, Any]) -> dict[str, Any]:
    return {"object": "grounded.source", **view}


@router.get(PREFIX, response_model=None, responses=openapi.SOURCES)
async def list_sources(request: Request, caller: Administering) -> dict[str, Any]:
    shards = gateway(request).shards_for(caller.tenant)
    return {"object": "list",
            "data": [_source(v) for v in await shards.source(caller.reader, "listed")]}  # fmt: skip


@router.post(PREFIX, response_model=None, responses=openapi.SOURCE)
async def declare(request: Request, caller: Administering, body: SourceFields) -> dict[str, Any]:
    """A source, listed once before it is kept (one that cannot be reached is refused now);
    its location must be under the appliance's ``sources.allowed_locations``."""
    service = gateway(request)
    view = await service.shards_for(caller.tenant).source(caller.reader, "declare", body)
    await service.record(caller, "sources.add", body.name, [])
    return _source(view)


@router.get(f"{PREFIX}/{{name}}", response_model=None, responses=openapi.SOURCE)
async def get_source(request: Request, caller: Administering, name: str) -> dict[str, Any]:
    views = await gateway(request).shards_for(caller.tenant).source(caller.reader, "listed")
    for view in views:
        if view["name"] == name:
            return _source(view)
    raise no_source(name)


@router.post(f"{PREFIX}/{{name}}/sync", response_model=None, responses=openapi.SOURCE)
async def sync(
    request: Request, caller: Administering, name: str, body: SyncRequest | None = None
) -> dict[str, Any]:
    """A run begun now, in the background (409 while one goes on): the source is answered at
    once, its ``last_run`` tells when the run has ended."""
    service = gateway(request)
    confirm = body is not None and body.confirm_deletes
    view = await service.shards_for(caller.tenant).source(caller.reader, "start", name, confirm)
    await service.record(caller, "sources.sync", name, [])
    return _source(view)


@router.delete(f"{PREFIX}/{{name}}", response_model=None, responses=openapi.SOURCE_DELETED)
async def remove(
    request: Request, caller: Administering, name: str, keep_documents: bool = False
) -> dict[str, Any]:
    """The source forgotten; its documents deleted, or kept as the tenant's."""
    service = gateway(request)
    held = await service.shards_for(caller.tenant).source(
        caller.reader, "remove", name, keep_documents
    )
    await service.record(caller, "sources.remove", name, [])
    return {"object": "grounded.source", "name": name, "deleted": True, "documents": held}
