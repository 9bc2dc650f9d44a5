"""The real default model (Qwen2.5-Coder-0.5B-Instruct) on the sample corpus: a correct answer
with a citation of the right document, and a correct abstention.

The model is fetched into the repository's data directory the first time (about 1.5 minutes,
`grounded models fetch qwen2.5-0.5b`); later runs reuse it.
"""

from __future__ import annotations

import asyncio

import pytest

from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.generator import VllmGenerator
from serve.models import MODELS, fetch, models_dir
from serve.query.gate import NOT_FOUND
from serve.query.pipeline import QueryPipeline
from serve.query.retrieval import LocalSearcher
from tests.conftest import CORPUS, REPO, with_judge

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def model_folder():
    data_dir = REPO / "data"
    name = "qwen2.5-0.5b"
    folder = models_dir(data_dir) / name
    if not (folder / "config.json").is_file():
        fetch(name, data_dir)
    assert MODELS[name].gguf_sha256  # fetched only after its hash matched
    return folder


def test_default_model_answers_with_a_citation_and_abstains(model_folder, tmp_path, minilm):
    config = with_judge(load_config(REPO / "configs" / "cpu.yaml", data_dir=tmp_path))
    service = IndexService(config.index, tmp_path, embedder=minilm).start()
    files, _ = discover([CORPUS / "acme"])
    list(service.pipeline("acme").ingest(files))
    generator_config = config.generator.model_copy(update={"model": str(model_folder)})

    async def ask_both():
        generator = VllmGenerator(generator_config).start()
        try:
            pipeline = QueryPipeline(LocalSearcher(service), generator, config.query)
            leave = await pipeline.answer(
                "acme", "How many days of paid annual leave do employees get per year?",
                max_tokens=80,
            )  # fmt: skip
            absent = await pipeline.answer("acme", "Who won the 1998 football world cup?")
            return leave, absent
        finally:
            generator.shutdown()

    leave, absent = asyncio.run(ask_both())
    service.close()
    assert not leave.abstained and "27" in leave.text, leave.text
    cited = {c.source.hit.file_name for c in leave.cited}
    assert "employee-handbook.md" in cited, (leave.text, cited)
    assert all(c.support >= 0.5 for c in leave.cited)
    if config.query.answer_format == "quoted":  # the shipped default: a checked quote
        (cited,) = leave.cited
        assert cited.verified and cited.quote and cited.quote in cited.source.hit.text
        assert leave.text.endswith(f"[{cited.source.number}]")
    assert absent.abstained and absent.text == NOT_FOUND["en"] and absent.cited == ()
