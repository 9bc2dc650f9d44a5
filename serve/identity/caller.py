"""Who is asking, for one request: the Caller.

Built once per request by the routes' ``Querying`` and ``Ingesting`` dependencies (serve/
routes/__init__.py) from the identity the request guard established (an API key, or the
identity provider's token: serve/identity/oidc.py), with the scope the route needs, and passed
explicitly from there on: the Gateway's budgets and accounting, the shards (as its ``reader``:
index/access.py), the audit trail. Nothing a client sends besides its credential changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from serve.identity.keys import ApiKey


@dataclass(frozen=True, slots=True)
class Caller(ApiKey):
    """An identity (tenant, user, groups, scopes: an ApiKey's fields, also for a token) and
    the id of the request it made."""

    request_id: str = ""

    @classmethod
    def asking(cls, identity: ApiKey, request_id: str) -> Caller:
        return cls(**{f.name: getattr(identity, f.name) for f in fields(ApiKey)},
                   request_id=request_id)  # fmt: skip

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes
