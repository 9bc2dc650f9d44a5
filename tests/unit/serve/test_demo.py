"""`make demo`'s script (serve/ops/demo.py) finds the sample corpus it uploads: it moved into
serve/ops/ on 2026-12-07 and looked for serve/samples/corpus, which does not exist, so the demo
stopped at its first upload. Every tenant it asks has its folder of documents."""

from __future__ import annotations

import pytest

from serve.ops.demo import CORPUS, QUESTIONS
from tests.conftest import CORPUS as TESTS_CORPUS

pytestmark = pytest.mark.unit


def test_the_demo_uploads_the_repositorys_sample_corpus_for_every_tenant_it_asks():
    assert CORPUS == TESTS_CORPUS
    for tenant in QUESTIONS:
        assert any((CORPUS / tenant).iterdir()), tenant
