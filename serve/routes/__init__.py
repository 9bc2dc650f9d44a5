"""The API's routes, one module per resource. Each translates between OpenAI's request and
response shapes and the Gateway (serve/gateway.py): keys, budgets, admission, accounting and
the deployments live there. The app (serve/app.py) carries its Gateway in ``app.state``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from serve.gateway import Gateway


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway
