"""The API's routes, one module per resource. Each translates between OpenAI's request and
response shapes and the Gateway (serve/http/gateway.py): keys, budgets, admission, accounting and
the deployments live there. The app (serve/http/app.py) carries its Gateway in ``app.state``.

A route names who may call it by its caller's type: ``caller: Querying``, ``caller:
Ingesting`` or ``caller: Administering`` (the Caller of serve/identity/caller.py, with that
scope, built once per request).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from serve.identity.caller import Caller

if TYPE_CHECKING:
    from serve.http.gateway import Gateway


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _querying(request: Request) -> Caller:
    return gateway(request).caller(request, "query")


def _ingesting(request: Request) -> Caller:
    return gateway(request).caller(request, "ingest")


def _administering(request: Request) -> Caller:
    return gateway(request).caller(request, "admin")


Querying = Annotated[Caller, Depends(_querying)]
Ingesting = Annotated[Caller, Depends(_ingesting)]
Administering = Annotated[Caller, Depends(_administering)]
