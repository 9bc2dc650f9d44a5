"""Grounded's payloads checked against OpenAI's published OpenAPI document.

``openapi-subset.json`` is the part of github.com/openai/openai-openapi (its ``source`` field
names the commit) that the implemented endpoints reach, cut by ``extract.py``. Payloads are
validated with ``jsonschema`` (OpenAPI 3.1 schemas are JSON Schema 2020-12), read two ways:

- A field is ``null`` only where its type says so (``nullable``, or ``null`` in its type), an
  optional one included: a client generated from the spec refuses a null string. (Reading
  optional fields as nullable, as openai-python does, is ``OPTIONAL_NULLABLE``.)
- No field outside the spec. JSON Schema lets an object hold fields its schema does not list
  unless the schema says ``additionalProperties: false``; OpenAI's document says so on some
  objects (the vector-store search page and its results) and not on others. Grounded's one
  extension, ``grounded``, is accepted only where the spec leaves the object open; any other
  unlisted field fails, as it would in a client generated from the spec.
- One field the spec does not list is accepted where a strict client reads it (``TOLERATED``):
  ``annotations`` on a streamed chat delta. The delta's schema leaves it open, OpenAI's own
  search models stream their citations there, and the Vercel AI SDK (which validates every
  chunk with its own schema) reads them as the stream's sources
  (tests/integration/test_clients.py checks that it does).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

SUBSET = Path(__file__).with_name("openapi-subset.json")
EXTENSION = "grounded"
_PREFIX = "#/components/schemas/"
# The issue's reading takes an optional field's null as absent. Grounded's payloads meet the
# stricter one (null only where the spec's type has it), so that is what the suite checks.
OPTIONAL_NULLABLE = False
# Fields outside a schema that a strict client accepts: schema name -> field -> its schema.
TOLERATED = {
    "ChatCompletionStreamResponseDelta": {
        "annotations": {"$ref": _PREFIX + "ChatCompletionResponseMessage/properties/annotations"}
    }
}


class NotConforming(AssertionError):
    """A payload the spec does not admit; the message names the path and the rule."""


@cache
def _document() -> dict[str, Any]:
    return json.loads(SUBSET.read_text())


@cache
def _strict_schemas() -> dict[str, Any]:
    schemas = copy.deepcopy(_document()["components"]["schemas"])
    for name, fields in TOLERATED.items():
        schemas[name]["properties"].update(copy.deepcopy(fields))
    return {name: _strict(schema, schemas) for name, schema in schemas.items()}


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema and len(schema) == 1:
        schema = schemas[schema["$ref"].removeprefix(_PREFIX)]
    return schema


def _merge_all_of(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """``allOf`` of object schemas as one object schema, so that closing it to unlisted fields
    sees every member's properties (a closed member would refuse its siblings' fields)."""
    members = [_resolve(m, schemas) for m in schema["allOf"]]
    members = [_merge_all_of(m, schemas) if "allOf" in m else m for m in members]
    if not all("properties" in m or m.get("type") == "object" for m in members):
        return schema
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    merged["type"] = "object"
    merged["properties"] = {k: v for m in members for k, v in m.get("properties", {}).items()}
    merged["required"] = sorted({r for m in members for r in m.get("required", [])})
    if any(m.get("additionalProperties") is False for m in members):
        merged["additionalProperties"] = False
    return merged


def _strict(schema: Any, schemas: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        return [_strict(item, schemas) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "allOf" in schema:
        schema = _merge_all_of(schema, schemas)
    schema = {k: _strict(v, schemas) for k, v in schema.items()}
    nullable = schema.pop("nullable", False)  # OpenAPI 3.0's spelling, left in the 3.1 file
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required = set(schema.get("required", []))
        schema["properties"] = {
            name: (sub if name in required or not OPTIONAL_NULLABLE else _or_null(sub))
            for name, sub in properties.items()
        }
        if "additionalProperties" not in schema:
            # Open in the spec: only Grounded's extension may be added.
            schema["properties"].setdefault(EXTENSION, {"type": "object"})
            schema["additionalProperties"] = False
    return _or_null(schema) if nullable else schema


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _validator(name: str) -> Draft202012Validator:
    schemas = _strict_schemas()
    return Draft202012Validator({"$ref": _PREFIX + name, "components": {"schemas": schemas}})


def documented_operations() -> set[str]:
    """The implemented operations for which the spec documents a JSON body."""
    return {op for op, schemas in _document()["operations"].items() if schemas["json"]}


def schema_for(operation: str, stream: bool = False) -> str | None:
    """The spec's schema name for an operation ("POST /chat/completions"), or its streamed
    event; None where the spec documents no body."""
    return _document()["operations"][operation]["stream" if stream else "json"]


def conforms_to(name: str, payload: Any) -> Any:
    """``payload`` (parsed JSON) is valid under the spec's schema ``name``; returns it."""
    error = best_match(_validator(name).iter_errors(payload))
    while error is not None and error.context:  # a union: the branch that got furthest
        error = max(error.context, key=lambda e: len(e.absolute_path))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise NotConforming(f"{name} at {where}: {error.message}"[:2000])
    return payload


def spec_conforms(operation: str, payload: Any, stream: bool = False) -> Any:
    """``payload`` is what OpenAI's spec says ``operation`` returns (each streamed event with
    ``stream``)."""
    name = schema_for(operation, stream)
    assert name is not None, f"the spec documents no body for {operation}"
    return conforms_to(name, payload)
