"""OpenAI attribute filters for vector-store search: a validated parser and an evaluator.

The shapes are OpenAI's ``ComparisonFilter`` (``{"type": "eq", "key": ..., "value": ...}``) and
``CompoundFilter`` (``{"type": "and", "filters": [...]}``), tested against the ``attributes`` of
a vector-store file (strings, numbers and booleans). Where OpenAI does not document the
behaviour, Grounded chooses, so that one rule covers every operator:

- A comparison matches only an attribute that is present and of the same type as its value
  (string, number or boolean; ints and floats are both numbers, a boolean is never a number, and
  nothing is coerced: ``"2024"`` is not ``2024``). An absent key or another type never matches,
  whatever the operator, ``ne`` and ``nin`` included: ``ne`` means "present and different".
- ``gt``, ``gte``, ``lt`` and ``lte`` compare numbers only; a string or boolean value is refused
  (400) rather than compared lexicographically, where "10" sorts before "9". Store dates as Unix
  timestamps, as OpenAI's examples do.
- ``in`` and ``nin`` take a non-empty list of strings and numbers; an attribute matches against
  the list's values of its own type (``nin`` needs at least one such value to match).
- ``and`` and ``or`` take a non-empty list of filters, nested at most ``MAX_DEPTH`` levels.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from index.errors import InvalidRequestError

MAX_DEPTH = 8

_ORDERING = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}
_LISTS = ("in", "nin")


def value_kind(value: object) -> Literal["boolean", "number", "string"] | None:
    """The attribute type of a value (``bool`` is checked first: it subclasses ``int``)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


class ComparisonFilter(BaseModel):
    """Compare the attribute ``key`` with ``value``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    key: str = Field(min_length=1)
    value: Any

    @field_validator("value")
    @classmethod
    def _value_fits_operator(cls, value: Any, info: ValidationInfo) -> Any:
        op, kind = info.data.get("type"), value_kind(value)
        if op in _LISTS:
            if not isinstance(value, list) or not value:
                raise ValueError(f"'{op}' needs a non-empty list of strings and numbers")
            if any(value_kind(v) not in ("string", "number") for v in value):
                raise ValueError(f"the values of '{op}' must be strings or numbers")
            if any(isinstance(v, float) and not math.isfinite(v) for v in value):
                raise ValueError("numbers in filters must be finite")
            return value
        if kind is None:
            raise ValueError(
                f"'{op}' needs a single string, number or boolean value"
                + (" (use 'in' or 'nin' for a list)" if isinstance(value, list) else "")
            )
        if kind == "number" and not math.isfinite(value):
            raise ValueError("numbers in filters must be finite")
        if op in _ORDERING and kind != "number":
            raise ValueError(
                f"'{op}' compares numbers only, not a {kind}: store ordered values such "
                "as dates as numbers (Unix timestamps)"
            )
        return value

    def matches(self, attributes: Mapping[str, object]) -> bool:
        if self.key not in attributes:
            return False
        actual = attributes[self.key]
        kind = value_kind(actual)
        if self.type in _LISTS:
            same = [v for v in self.value if value_kind(v) == kind]
            return bool(same) and (actual in same) == (self.type == "in")
        if kind != value_kind(self.value):
            return False
        if self.type == "eq":
            return actual == self.value
        if self.type == "ne":
            return actual != self.value
        return _ORDERING[self.type](actual, self.value)


class CompoundFilter(BaseModel):
    """All (``and``) or any (``or``) of ``filters``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["and", "or"]
    filters: list[Filter] = Field(min_length=1)

    def matches(self, attributes: Mapping[str, object]) -> bool:
        combine = all if self.type == "and" else any
        return combine(f.matches(attributes) for f in self.filters)


Filter = Annotated[ComparisonFilter | CompoundFilter, Field(discriminator="type")]
CompoundFilter.model_rebuild()
_ADAPTER: TypeAdapter[ComparisonFilter | CompoundFilter] = TypeAdapter(Filter)
_TAGS = frozenset(("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "and", "or"))


def parse_filter(raw: object, *, param: str = "filters") -> ComparisonFilter | CompoundFilter:
    """A validated filter from its JSON form (or a pydantic model of it, such as the openai
    package's); a malformed one is an ``InvalidRequestError`` whose ``param`` points at the
    faulty part, e.g. ``filters.filters[1].value``."""
    if isinstance(raw, ComparisonFilter | CompoundFilter):
        return raw
    if isinstance(raw, BaseModel):
        raw = raw.model_dump()
    try:
        parsed = _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = param + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}"
            for part in error["loc"]
            if part not in _TAGS  # the union's tag, which pydantic adds to the path
        )
        message = error["msg"].removeprefix("Value error, ")
        raise InvalidRequestError(
            f"invalid filter at {where}: {message}. A filter is "
            '{"type": "eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin", "key": ..., "value": ...} '
            'or {"type": "and"|"or", "filters": [...]}',
            param=where,
        ) from None
    if _depth(parsed) > MAX_DEPTH:
        raise InvalidRequestError(
            f"filters nest {_depth(parsed)} levels deep; at most {MAX_DEPTH} are allowed",
            param=param,
        )
    return parsed


def _depth(node: ComparisonFilter | CompoundFilter) -> int:
    if isinstance(node, ComparisonFilter):
        return 1
    return 1 + max(_depth(child) for child in node.filters)
