"""The API's routes, one module per resource. Each translates between OpenAI's request and
response shapes and the Gateway (serve/gateway.py): keys, budgets, admission, accounting and
the deployments live there.

Ray Serve serves a frozen copy of the FastAPI app (made when the Ingress class is decorated),
so state set on the module's ``app`` in the replica's constructor is not the state requests
see. The replica binds its Gateway and guard here instead: the routes and the middleware are
module-level functions, the same in every copy of the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serve.gateway import Gateway
    from serve.guard import RequestGuard

_bound: dict[str, object] = {}


def bind(gateway: Gateway, guard: RequestGuard) -> None:
    """Called once by the Ingress replica (one per process) when it starts."""
    _bound.update(gateway=gateway, guard=guard)


def gateway() -> Gateway:
    return _bound["gateway"]  # type: ignore[return-value]


def guard() -> RequestGuard | None:
    """The request guard (keys and sizes before a body is read); None before the replica
    has started (and in tests of the bare app)."""
    return _bound.get("guard")  # type: ignore[return-value]
