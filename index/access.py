"""Who may read a document inside its tenant.

A document's access list is None (the whole tenant: every key of the tenant reads it, as
before access lists existed) or a set of principals: ``user:<name>`` (a user, as an API key
or an identity provider names them) and ``group:<name>``. A document also has an owner: the
identity that created it (``user:<name>``, or ``key:<id>`` for a key that names no user);
None for a document ingested from a path by an operator.

Every read and write of a shard takes a ``Reader``, the identity the server established for
the request; there is no default that means "everything" (an admin's Reader says so itself).
A Reader reads a document when one of its principals is on the list, or when the list is the
whole tenant; it writes (a new version, a new list, a delete) a document it owns and reads
(an owner that took itself off the list reads it no more: an admin gives it back); an admin
reads and writes every document of its tenant. What one reads depends on its principals only,
so identities with the same principals share cached prompts (serve/query/prompt.py).
Retrieval filters by access before it ranks (index/store/shard.py ``visible_doc_ids``), so a
restricted document never takes a place in anyone's top k.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

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
    if not chosen:  # "", [], "  ", ",": a slip, never a way to open a document
        raise InvalidRequestError(
            f"{param} is empty: name its readers (user:<name> or group:<name>, separated by "
            "commas), or write 'tenant' to open it to everyone in the tenant",
            param=param,
        )
    if chosen == (EVERYONE,):
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


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads or writes a tenant's documents: ``identity`` (``user:<name>``, ``key:<id>``:
    the owner of what it creates), the principals it holds, and whether it is an admin."""

    identity: str
    principals: frozenset[str] = frozenset()
    admin: bool = False

    @property
    def readers(self) -> frozenset[str] | None:
        """The principals its reads are limited to; None: every document (an admin)."""
        return None if self.admin else self.principals

    def may_read(self, access: Access) -> bool:
        return self.admin or access is None or not self.principals.isdisjoint(access)

    def may_write(self, access: Access, owner: str | None) -> bool:
        """A new version, a new access list, a delete: its owner's (while it reads it), or
        an admin's."""
        return self.admin or (owner == self.identity and self.may_read(access))


# The tenant's operator (the CLI on the machine, a replay of what was already allowed).
OPERATOR = Reader("operator", admin=True)
