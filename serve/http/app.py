"""The HTTP application: ``create_app(gateway)`` builds the FastAPI app (the routers of
serve/http/routes/, OpenAI's error shape for every failure, request ids, per-route metrics) over a
Gateway and nothing else. The Ingress deployment (serve/deployments/ingress.py) builds it in
its replica from the deployments' handles; tests build it in-process over a Gateway of fakes.
"""

from __future__ import annotations

import logging
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from index.errors import GroundedError, InvalidRequestError
from serve.http import api, openapi
from serve.http.gateway import Gateway
from serve.http.guard import RequestGuard
from serve.http.routes import chat, embeddings, files, responses, sources, vector_stores
from serve.metrics import metrics
from serve.query.generation import GeneratorUnavailableError
from serve.state.database import off_loop

log = logging.getLogger("grounded")


def create_app(gateway: Gateway | None, guard: RequestGuard | None = None) -> FastAPI:
    """The API over ``gateway``; ``guard`` checks the key and the body's size before the body
    is read. Without a gateway (the OpenAPI document alone) every /v1 route fails."""
    app = FastAPI(
        title="Grounded",
        description="Answers from your own documents, with checked citations (OpenAI-compatible).",
    )
    app.state.gateway, app.state.guard = gateway, guard
    for resource in (chat, responses, files, vector_stores, embeddings, sources):
        app.include_router(resource.router)
    openapi.install(app)
    app.add_exception_handler(GroundedError, _grounded_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.middleware("http")(_request_id)
    return app


async def _grounded_error(request: Request, exc: GroundedError) -> JSONResponse:
    # Raised in another deployment, it arrives wrapped (a RayTaskError that is also an
    # instance of the original class); answer with the original.
    cause = getattr(exc, "cause", None)
    if isinstance(cause, GroundedError):
        exc = cause
    return api.error_response(exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        return api.error_response(InvalidRequestError("the request body is not valid JSON"))
    field = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    message = first["msg"].removeprefix("Value error, ")
    return api.error_response(InvalidRequestError(f"{field}: {message}", param=field))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Unknown paths and methods answer with OpenAI's error object too."""
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; the API is described at /docs"
    else:
        message = f"{request.method} {request.url.path}: {exc.detail}"
    error = InvalidRequestError(message)
    error.status = exc.status_code
    return api.error_response(error)


def _replica_failed(exc: BaseException) -> bool:
    """A deployment's replica died or is restarting (Serve brings it back)."""
    try:
        from ray.exceptions import ActorUnavailableError, RayActorError
    except ImportError:  # in-process, without Ray
        return False
    return isinstance(exc, RayActorError | ActorUnavailableError)


async def _request_id(request: Request, call_next):
    request_id = request.headers.get("x-request-id") or "req-" + uuid.uuid4().hex[:24]
    request.state.request_id = request_id
    started = time.perf_counter()
    try:
        guard = request.app.state.guard
        if guard is not None and not guard.public(request.url.path):
            # The key and the size, before the body is read; in a thread, so that a slow
            # key store (the state server's, an identity provider) never stalls the event
            # loop, which serves /health and every stream under way.
            request.state.api_key = await off_loop(
                guard.check, request.method, request.url.path, request.headers
            )
        response = await call_next(request)
    except GroundedError as exc:
        response = api.error_response(exc, request_id)
    except Exception as exc:  # unexpected: logged with the id, never a traceback to clients
        log.exception("request %s %s failed", request_id, request.url.path)
        error = GroundedError(f"internal error; see the server log for request {request_id}")
        if _replica_failed(exc):
            error = GeneratorUnavailableError(
                f"a server component is restarting; retry shortly (request {request_id})"
            )
            error.retry_after = 5
        response = api.error_response(error, request_id)
    # A bounded label: the route's template, never the raw path (a scanner's random paths).
    route = request.scope.get("route")
    label = route.path if route is not None else "unmatched"
    metrics().requests.inc(tags={"route": label, "status": str(response.status_code)})
    metrics().latency.observe(time.perf_counter() - started, tags={"route": label})
    log.info("%s %s %s %d", request_id, request.method, label, response.status_code)
    return response
