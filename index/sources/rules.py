"""Who may read a source's files, from their paths: rules ``glob=access``, the first that
matches a file's path deciding (``hr/**=group:hr``, ``public/**=tenant``), then the source's
default. A glob is matched against the path below the source's root; ``**`` crosses folders,
``*`` does not."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from index.access import Access, parse_access
from index.errors import InvalidRequestError


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

    def access(self, path: str) -> Access:
        for rule in self.rules:
            if rule.pattern.fullmatch(path):
                return rule.access
        return self.default

    def json(self) -> dict:
        return {"rules": [[r.glob, list(r.access) if r.access else None] for r in self.rules],
                "default": list(self.default) if self.default else None}  # fmt: skip

    @classmethod
    def of_json(cls, stored: dict) -> AccessRules:
        rules = tuple(Rule(glob, tuple(a) if a else None) for glob, a in stored["rules"])
        default = stored["default"]
        return cls(rules, tuple(default) if default else None)

    @classmethod
    def parse(cls, default: str | None, rules: list[str]) -> AccessRules:
        """``default``: an access value (index/access.py) or None (the tenant); ``rules``:
        ``glob=access`` strings, in order."""
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
        return cls(tuple(parsed), parse_access(default) if default is not None else None)


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
