"""Who may read a source's files: rules ``glob=access``, the first that matches a file's path
deciding (``hr/**=group:hr``, ``public/**=tenant``), then, for a folder read with
``access_from: posix``, the file's own permissions (index/sources/posix.py, names mapped
through ``names``), else the source's default. A glob is matched against the path below the
source's root; ``**`` crosses folders, ``*`` does not."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from index.access import Access, parse_access
from index.errors import InvalidRequestError
from index.sources.kinds import Entry
from index.sources.posix import readers


@dataclass(frozen=True)
class Rule:
    glob: str
    access: Access  # None: the whole tenant

    @cached_property
    def pattern(self) -> re.Pattern:
        return glob_pattern(self.glob)


@dataclass(frozen=True)
class AccessRules:
    rules: tuple[Rule, ...] = ()
    default: Access = None
    posix: bool = False  # the file system's permissions before the default
    names: tuple[tuple[str, str], ...] = ()  # principal -> the identity provider's name

    def access(self, entry: Entry | str) -> Access:
        path = entry if isinstance(entry, str) else entry.path
        for rule in self.rules:
            if rule.pattern.fullmatch(path):
                return rule.access
        if self.posix and not isinstance(entry, str) and entry.permissions is not None:
            return readers(entry.permissions, dict(self.names))
        return self.default

    def json(self) -> dict:
        return {"rules": [[r.glob, _listed(r.access)] for r in self.rules],
                "default": _listed(self.default), "posix": self.posix,
                "names": dict(self.names)}  # fmt: skip

    @classmethod
    def of_json(cls, stored: dict) -> AccessRules:
        rules = tuple(Rule(glob, _access(a)) for glob, a in stored["rules"])
        names = tuple(stored.get("names", {}).items())
        return cls(rules, _access(stored["default"]), stored.get("posix", False), names)

    @classmethod
    def parse(
        cls,
        default: str | None,
        rules: list[str],
        posix: bool = False,
        names: list[str] = (),  # type: ignore[assignment]
    ) -> AccessRules:
        """``default``: an access value (index/access.py) or None (the tenant); ``rules``:
        ``glob=access`` strings, in order; ``names``: ``principal=principal`` pairs."""
        parsed = []
        for text in rules:
            glob, sep, value = text.partition("=")
            if not sep or not glob.strip():
                raise InvalidRequestError(
                    f"access rule {text!r}: write it as glob=access, e.g. 'hr/**=group:hr' or "
                    "'public/**=tenant'",
                    param="rule",
                )
            parsed.append(Rule(glob.strip(), parse_access(value)))
        mapped = []
        for text in names:
            local, _, remote = text.partition("=")
            pair = parse_access(local or "-", "name"), parse_access(remote or "-", "name")
            if any(p is None or len(p) != 1 for p in pair) or pair[0][0][:5] != pair[1][0][:5]:
                raise InvalidRequestError(
                    f"name mapping {text!r}: write it as user:local=user:remote (or group:...)",
                    param="name",
                )
            mapped.append((pair[0][0], pair[1][0]))
        default_access = parse_access(default) if default is not None else None
        return cls(tuple(parsed), default_access, posix, tuple(mapped))


def _listed(access: Access) -> list[str] | None:
    return None if access is None else list(access)


def _access(stored: list[str] | None) -> Access:
    return None if stored is None else tuple(stored)


def glob_pattern(glob: str) -> re.Pattern:
    """``**`` any characters (folders too), ``*`` and ``?`` within one path segment."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out))
