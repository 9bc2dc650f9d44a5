"""Generator models from a Hugging Face hub, for machines that are online (GPU users).

A model is named ``hf:Org/Name``, or ``hf:Org/Name@revision`` (a branch, tag or commit), and the
same string serves `grounded models fetch` and ``generator.model``: the revision is part of the
name, not an option, so a config says exactly what was fetched. Each name has its own folder,
``<data_dir>/models/Org--Name`` or ``Org--Name@revision``; a fetched name is never downloaded
again (delete the folder, or pin another revision, to update it).

Only what a vLLM/transformers folder loads is downloaded (``ALLOW_PATTERNS``), through
``huggingface_hub.snapshot_download`` pinned to the commit the revision pointed at, into a
temporary folder under ``models/`` that is renamed into place once complete. Tokens are used,
never stored.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from index.errors import ConfigError, GroundedError

PREFIX = "hf:"
SOURCE_FILE = ".grounded-hub.json"  # in each fetched folder: what it is, from where

ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "*.tiktoken",
    "chat_template.json",
    "chat_template.jinja",
    "preprocessor_config.json",  # multimodal models
    "processor_config.json",
    "hf_quant_config.json",  # FP8 (ModelOpt), GPTQ and AWQ checkpoints
    "quantize_config.json",
    "quant_config.json",
]
# Mistral-format copies of the same weights, which vLLM does not load from a transformers folder.
IGNORE_PATTERNS = ["original/*", "consolidated*.safetensors"]

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_]")
_REVISION = re.compile(r"[\w.-]+(/[\w.-]+)*")
TOKEN_HINT = "with --token or the HF_TOKEN environment variable"


class HubUnavailableError(GroundedError):
    """The hub could not be reached, or failed: nothing the name or token can fix."""

    status = 503
    type = "server_error"


@dataclass(frozen=True, slots=True)
class HubRef:
    """``hf:Org/Name[@revision]``; ``revision`` None is the repository's default branch."""

    repo_id: str
    revision: str | None = None

    @classmethod
    def parse(cls, value: str, param: str = "name") -> HubRef | None:
        """The reference ``value`` names; None when it does not start with ``hf:``."""
        if not value.startswith(PREFIX):
            return None
        repo_id, at, revision = value.removeprefix(PREFIX).partition("@")
        valid_repo = _REPO_ID.fullmatch(repo_id) and "--" not in repo_id and ".." not in repo_id
        valid_revision = not at or (_REVISION.fullmatch(revision) and ".." not in revision)
        if not (valid_repo and valid_revision):
            raise ConfigError(
                f"{value!r} is not a Hugging Face model reference: write hf:Org/Name or "
                "hf:Org/Name@revision (a branch, tag or commit), e.g. hf:Qwen/Qwen2.5-7B-Instruct",
                param=param,
            )
        return cls(repo_id, revision or None)

    def __str__(self) -> str:
        return PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "")

    @property
    def folder_name(self) -> str:
        # Repository ids never contain "--", so the folder name maps back to one repository.
        name = self.repo_id.replace("/", "--")
        return f"{name}@{self.revision.replace('/', '--')}" if self.revision else name


@dataclass(frozen=True, slots=True)
class HubInstall:
    """A fetched hub model, as its ``SOURCE_FILE`` records it."""

    ref: HubRef
    commit: str
    endpoint: str
    folder: Path


def installed(models: Path) -> list[HubInstall]:
    """The hub models fetched into ``models``, by folder name."""
    found = []
    for record in sorted(Path(models).glob(f"*/{SOURCE_FILE}")):
        source = json.loads(record.read_text(encoding="utf-8"))
        ref = HubRef(source["repo_id"], source["revision"])
        found.append(HubInstall(ref, source["commit"], source["endpoint"], record.parent))
    return found


def fetch(ref: HubRef, models: Path, *, token: str | None = None) -> Path:
    """Download ``ref`` into ``models/<ref.folder_name>`` unless it is there (idempotent).

    ``token`` None uses the HF_TOKEN variable or the token saved by ``hf auth login``."""
    output = Path(models) / ref.folder_name
    if (output / "config.json").is_file():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".fetch-") as tmp:
        staging = Path(tmp) / "model"
        commit, endpoint = _download(ref, staging, Path(tmp) / "cache", token)
        shutil.rmtree(staging / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping
        if not (staging / "config.json").is_file() or not any(staging.rglob("*.safetensors")):
            raise ConfigError(
                f"{ref} (commit {commit}) has no config.json with safetensors weights: Grounded "
                "serves transformers-format models; choose a repository or revision that has them",
                param="name",
            )
        source = {"repo_id": ref.repo_id, "revision": ref.revision, "commit": commit,
                  "endpoint": endpoint}  # fmt: skip
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        if not (output / "config.json").is_file():  # else a concurrent fetch finished first
            shutil.rmtree(output, ignore_errors=True)
            staging.rename(output)
    return output


def _download(ref: HubRef, folder: Path, cache: Path, token: str | None) -> tuple[str, str]:
    """Resolve the revision to a commit, then download the allowed files of that commit;
    returns (commit, endpoint). Hub errors become Grounded errors that say what to do."""
    import httpx2
    from huggingface_hub import HfApi, constants, errors, snapshot_download

    endpoint = constants.ENDPOINT
    try:
        with _online(constants):
            api = HfApi(token=token)
            info = api.model_info(
                ref.repo_id, revision=ref.revision, timeout=constants.HF_HUB_ETAG_TIMEOUT
            )
            snapshot_download(
                ref.repo_id,
                revision=info.sha,  # the commit: every file from the same one
                local_dir=folder,
                cache_dir=cache,  # nothing written outside the data directory
                allow_patterns=ALLOW_PATTERNS,
                ignore_patterns=IGNORE_PATTERNS,
                token=token,
            )
    except errors.RevisionNotFoundError as exc:
        raise ConfigError(
            f"{ref.repo_id} has no revision {ref.revision!r} on {endpoint}: give a branch, tag "
            f"or commit that exists, e.g. hf:{ref.repo_id}@main",
            param="name",
        ) from exc
    except errors.GatedRepoError as exc:
        raise ConfigError(
            f"{ref.repo_id} is gated on {endpoint}: accept its conditions on the model's page, "
            f"then give a token of that account {TOKEN_HINT}",
            param="name",
        ) from exc
    except errors.RepositoryNotFoundError as exc:
        raise ConfigError(
            f"{ref.repo_id} was not found on {endpoint}: check the name; if the repository is "
            f"private or gated, give a token {TOKEN_HINT}",
            param="name",
        ) from exc
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise ConfigError(
                f"{endpoint} refused access to {ref.repo_id} (HTTP {status}): give a token that "
                f"can read this repository {TOKEN_HINT}",
                param="token",
            ) from exc
        raise HubUnavailableError(
            f"{endpoint} failed while sending {ref} (HTTP {status}); nothing was kept: try again"
        ) from exc
    except (httpx2.TransportError, errors.LocalEntryNotFoundError) as exc:
        raise HubUnavailableError(
            f"cannot reach {endpoint} ({type(exc).__name__}): this machine looks offline. Fetch "
            f"{ref} on a machine that is online and copy models/{ref.folder_name} into this data "
            "directory, or fetch a local model folder: `grounded models fetch /path/to/folder`"
        ) from exc
    return info.sha, endpoint


@contextlib.contextmanager
def _online(constants):
    """Grounded sets HF_HUB_OFFLINE (CLI, images) so that nothing on the serving path downloads;
    huggingface_hub reads it once, at import. This explicit fetch is the one download, so the
    switch is lifted for its duration."""
    offline = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = offline
