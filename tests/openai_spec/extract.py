"""Cut OpenAI's published OpenAPI document down to the endpoints Grounded implements.

    python tests/openai_spec/extract.py PATH/TO/openai-openapi/openapi.json COMMIT

writes tests/openai_spec/openapi-subset.json: for each implemented operation its success
response's schema (and, for streams, the event schema), with every component schema those
reach. The upstream document (github.com/openai/openai-openapi, MIT) is 3.4 MB; the subset
keeps the test suite's copy small and says which upstream commit it was cut from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("openapi-subset.json")
# (method, path) of each operation Grounded serves, as the spec spells the path.
OPERATIONS = [
    ("get", "/models"),
    ("post", "/embeddings"),
    ("post", "/chat/completions"),
    ("post", "/files"),
    ("get", "/files"),
    ("get", "/files/{file_id}"),
    ("delete", "/files/{file_id}"),
    ("post", "/vector_stores"),
    ("get", "/vector_stores"),
    ("get", "/vector_stores/{vector_store_id}"),
    ("post", "/vector_stores/{vector_store_id}"),
    ("delete", "/vector_stores/{vector_store_id}"),
    ("post", "/vector_stores/{vector_store_id}/files"),
    ("get", "/vector_stores/{vector_store_id}/files"),
    ("get", "/vector_stores/{vector_store_id}/files/{file_id}"),
    ("post", "/vector_stores/{vector_store_id}/files/{file_id}"),
    ("delete", "/vector_stores/{vector_store_id}/files/{file_id}"),
    ("get", "/vector_stores/{vector_store_id}/files/{file_id}/content"),
    ("post", "/vector_stores/{vector_store_id}/file_batches"),
    ("get", "/vector_stores/{vector_store_id}/file_batches/{batch_id}"),
    ("post", "/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel"),
    ("get", "/vector_stores/{vector_store_id}/file_batches/{batch_id}/files"),
    ("post", "/vector_stores/{vector_store_id}/search"),
    ("post", "/responses"),
    ("get", "/responses/{response_id}"),
    ("delete", "/responses/{response_id}"),
    ("get", "/responses/{response_id}/input_items"),
]
# Errors are a response of their own in the document.
EXTRA = ["ErrorResponse"]


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"].rsplit("/", 1)[-1]} if "$ref" in value else set()
        return found.union(*(_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value))
    return set()


def _success_schemas(operation: dict[str, Any]) -> dict[str, str | None]:
    """The schema of the success body, JSON and streamed (None where the spec gives none: its
    DELETE /responses/{id} documents no body)."""
    content = operation.get("responses", {}).get("200", {}).get("content", {})

    def name(media: str) -> str | None:
        ref = content.get(media, {}).get("schema", {}).get("$ref")
        return ref.rsplit("/", 1)[-1] if ref else None

    return {"json": name("application/json"), "stream": name("text/event-stream")}


def main() -> None:
    source, commit = Path(sys.argv[1]), sys.argv[2]
    spec = json.loads(source.read_text())
    schemas = spec["components"]["schemas"]
    operations = {
        f"{method.upper()} {path}": _success_schemas(spec["paths"][path][method])
        for method, path in OPERATIONS
    }
    named = [n for schemas in operations.values() for n in schemas.values() if n]
    wanted, todo = set(), [*named, *EXTRA]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(_refs(schemas[name]))
    subset = {
        "source": f"https://github.com/openai/openai-openapi/blob/{commit}/openapi.json",
        "openapi": spec["openapi"],
        "operations": operations,
        "components": {"schemas": {name: schemas[name] for name in sorted(wanted)}},
    }
    OUT.write_text(json.dumps(subset, indent=None, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"{OUT}: {len(operations)} operations, {len(wanted)} schemas")


if __name__ == "__main__":
    main()
