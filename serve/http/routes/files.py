"""``/v1/files``: uploads into the caller's tenant (ingested once; a vector store only names
them), their listing, their content as uploaded or as stored text, and their deletion."""

from __future__ import annotations

import mimetypes
import urllib.parse
from pathlib import Path
from typing import Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import PlainTextResponse, Response

from index.errors import InvalidRequestError
from serve.http import api, objects, openapi
from serve.http.routes import Ingesting, Querying, gateway

router = APIRouter()


FILES_LIMIT = 10_000  # OpenAI's default and maximum page for GET /v1/files


@router.post("/v1/files", response_model=None, responses=openapi.FILE)
async def upload(
    request: Request,
    caller: Ingesting,
    file: UploadFile = File(...),  # noqa: B008
    purpose: str = Form("assistants"),  # accepted as OpenAI clients send it; not used
    access: str | None = Form(None),  # Grounded's: who may read it (index/access.py)
) -> dict[str, Any]:
    service = gateway(request)
    readers = api.upload_access(access, sent="access" in await request.form())
    limit = service.config.index.limits.max_bytes
    data = await file.read(limit + 1)
    name = Path(file.filename or "").name
    if not name:
        raise InvalidRequestError("the upload has no file name", param="file")
    if len(data) > limit:
        error = InvalidRequestError(
            f"{name}: larger than the limit of {limit:,} bytes (index.limits.max_bytes)",
            param="file",
        )
        error.status = 413
        raise error
    wait_s = service.config.serve.upload_wait_s
    result, record = await service.shards_for(caller.tenant).upload(
        caller.reader, name, data, wait_s, readers
    )
    if result is not None and result.status == "refused":
        raise objects.refusal(result)
    return objects.file_object(record)  # processed, or still being ingested ("uploaded")


@router.get("/v1/files", response_model=None, responses=openapi.FILES)
async def files(
    request: Request,
    caller: Querying,
    after: str | None = None,
    limit: int = FILES_LIMIT,
    order: str = "desc",
    purpose: str | None = None,
) -> dict[str, Any]:
    """OpenAI's file list: newest first by default, up to 10,000 a page (the spec's bounds).
    Every file here is an ``assistants`` file: another ``purpose`` lists none."""
    service = gateway(request)
    stored = await service.shards_for(caller.tenant).files(caller.reader)
    restricted = [r.doc_id for r in stored if r.access is not None]
    if restricted:  # their names were shown: one audit entry for the page
        await service.record(caller, "files.list", None, restricted)
    listed = [objects.file_object(r) for r in stored]
    listed = [f for f in listed if purpose in (None, f["purpose"])]
    listed.sort(key=lambda f: f["created_at"])  # oldest first; stable for equal times
    return objects.cursor_page(listed, limit=limit, order=order, after=after, max_limit=FILES_LIMIT)


@router.get("/v1/files/{file_id}", response_model=None, responses=openapi.FILE)
async def file(request: Request, caller: Querying, file_id: str) -> dict[str, Any]:
    service = gateway(request)
    record = await service.shards_for(caller.tenant).file(caller.reader, file_id)
    await service.record(caller, "files.get", None, [file_id])
    return objects.file_object(record)


@router.get("/v1/files/{file_id}/content", response_model=None, responses=openapi.CONTENT)
async def file_content(request: Request, caller: Querying, file_id: str, format: str = "original"):
    """The file as uploaded; ``?format=text``: its text as stored (extracted from PDF and
    HTML), of which citation URLs give character ranges (``#char=start,end``)."""
    service = gateway(request)
    if format not in ("original", "text"):
        raise InvalidRequestError(f"format {format!r}: use original or text", param="format")
    shards = service.shards_for(caller.tenant)
    kind, *found = await shards.content(caller.reader, file_id, format == "text")
    await service.record(caller, "files.content", None, [file_id])
    if kind == "text":
        return PlainTextResponse(found[0])
    name, data = found
    media = mimetypes.guess_type(name)[0] or "application/octet-stream"
    disposition = f"attachment; filename*=UTF-8''{urllib.parse.quote(name)}"
    return Response(data, media_type=media, headers={"content-disposition": disposition})


@router.post("/v1/files/{file_id}/access", response_model=None, responses=openapi.FILE)
async def set_access(
    request: Request, caller: Ingesting, file_id: str, body: api.AccessUpdate
) -> dict[str, Any]:
    """Grounded's: who may read a stored file, from the next request on (nothing is embedded
    again). Needs the ingest scope, and the file's owner or an admin (403 for a file the
    caller reads but does not own; 404 for one it may not read)."""
    service = gateway(request)
    shards = service.shards_for(caller.tenant)
    record = await shards.set_access(caller.reader, file_id, body.readers())
    await service.record(caller, "files.access", None, [file_id])
    # As changed, even when the list no longer names the caller (it reads it no more).
    return objects.file_object(record)


@router.delete("/v1/files/{file_id}", response_model=None, responses=openapi.DELETED)
async def delete(request: Request, caller: Ingesting, file_id: str) -> dict[str, Any]:
    """Needs the ingest scope, and the file's owner or an admin (as for its access)."""
    service = gateway(request)
    await service.shards_for(caller.tenant).delete(caller.reader, file_id)
    await service.record(caller, "files.delete", None, [file_id])
    return {"id": file_id, "object": "file", "deleted": True}
