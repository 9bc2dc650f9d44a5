"""Who may read a document inside its tenant.

A document's access list is None (the whole tenant: every key of the tenant reads it, as
before access lists existed) or a set of principals: ``user:<name>`` (a user, as an API key
or an identity provider names them) and ``group:<name>``. An identity reads a document when
one of its principals is on the list; an identity with the ``admin`` scope reads every
document of its tenant. Retrieval filters by access before it ranks (index/store/shard.py
``visible_doc_ids``), so a restricted document never takes a place in anyone's top k.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from index.errors import InvalidRequestError

KINDS = ("user", "group")
_PRINCIPAL = re.compile(r"^(user|group):[^\s,;]{1,200}$")
EVERYONE = "tenant"  # the word that gives a document back to the whole tenant
KEEP = "keep"  # given for a file being ingested: a stored document keeps its list

Access = tuple[str, ...] | None


def parse_access(values: Iterable[str] | str | None, param: str = "access") -> Access:
    """An access list from what a user wrote: principals separated by commas (or given as a
    list); "tenant" (or nothing) for the whole tenant. Refuses a malformed principal."""
    if values is None:
        return None
    if isinstance(values, str):
        values = values.split(",")
    chosen = tuple(dict.fromkeys(v.strip() for v in values if v.strip()))
    if not chosen or chosen == (EVERYONE,):
        return None
    bad = [v for v in chosen if not _PRINCIPAL.match(v)]
    if bad:
        raise InvalidRequestError(
            f"{param}: {', '.join(repr(b) for b in bad)} is not a principal; write "
            "user:<name> or group:<name>, separated by commas, or 'tenant' for everyone in "
            "the tenant",
            param=param,
        )
    return tuple(sorted(chosen))


def principals_of(user: str | None, groups: Iterable[str]) -> frozenset[str]:
    """The principals an identity holds: its user and its groups."""
    held = {f"group:{g}" for g in groups}
    return frozenset(held | ({f"user:{user}"} if user else set()))


def may_read(access: Access, principals: frozenset[str] | None) -> bool:
    """``principals`` None: an identity that reads everything in its tenant (admin)."""
    return access is None or principals is None or not principals.isdisjoint(access)
