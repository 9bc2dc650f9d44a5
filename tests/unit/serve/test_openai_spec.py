"""The spec check itself (tests/openai_spec): it must refuse what a strict client refuses."""

import pytest

from tests.openai_spec import NotConforming, conforms_to, spec_conforms

pytestmark = pytest.mark.unit

FILE = {"id": "file-1", "object": "file", "bytes": 3, "created_at": 1, "filename": "a.txt",
        "purpose": "assistants", "status": "processed"}  # fmt: skip
CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "grounded",
         "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}  # fmt: skip


def test_a_conforming_payload_passes_with_the_extension_where_the_spec_leaves_it_open():
    assert spec_conforms("GET /files/{file_id}", {**FILE, "grounded": {"chunks": 2}})
    assert spec_conforms("POST /chat/completions", CHUNK, stream=True)  # nullable finish_reason


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({**FILE, "status_details": None}, "None is not of type 'string'"),  # optional, not null
        ({**FILE, "source": "upload"}, "'source' was unexpected"),  # outside the spec
        ({k: v for k, v in FILE.items() if k != "bytes"}, "'bytes' is a required property"),
        ({**FILE, "purpose": "answers"}, "'answers' is not one of"),
    ],
)
def test_a_deviation_fails_and_says_where(payload, says):
    with pytest.raises(NotConforming, match=says):
        spec_conforms("POST /files", payload)


def test_a_closed_object_refuses_even_the_extension():
    item = {"file_id": "f", "filename": "a", "score": 0.5, "attributes": {},
            "content": [{"type": "text", "text": "x"}]}  # fmt: skip
    page = {"object": "vector_store.search_results.page", "search_query": ["q"], "data": [item],
            "has_more": False, "next_page": None}  # fmt: skip
    assert conforms_to("VectorStoreSearchResultsPage", page)
    with pytest.raises(NotConforming, match="grounded"):
        conforms_to("VectorStoreSearchResultsPage", {**page, "data": [{**item, "grounded": {}}]})
    with pytest.raises(NotConforming, match="greater than the maximum"):
        conforms_to("VectorStoreSearchResultsPage", {**page, "data": [{**item, "score": 6.8}]})


def test_streamed_annotations_are_tolerated_only_in_their_own_shape():
    cited = {"type": "url_citation", "url_citation": {"url": "u", "title": "t",
             "start_index": 0, "end_index": 1}}  # fmt: skip
    delta = {"content": "x", "annotations": [cited]}
    chunk = {**CHUNK, "choices": [{**CHUNK["choices"][0], "delta": delta}]}
    assert spec_conforms("POST /chat/completions", chunk, stream=True)
    bad = {**delta, "annotations": [{"type": "file_citation", "index": 0}]}
    with pytest.raises(NotConforming):
        spec_conforms(
            "POST /chat/completions",
            {**CHUNK, "choices": [{**CHUNK["choices"][0], "delta": bad}]},
            stream=True,
        )
