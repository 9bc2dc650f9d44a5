"""`grounded models fetch hf:Org/Name` against a stand-in hub on 127.0.0.1 serving the tiny model:
the real huggingface_hub download code runs, in a `grounded` subprocess as a user would run it
(huggingface_hub reads HF_ENDPOINT when it is imported). HF_HUB_OFFLINE=1 is set, as the CLI and
the images set it: the explicit fetch must download all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from index.errors import ConfigError
from serve.cli import app
from serve.engine.models import resolve_model
from tests.conftest import CORPUS
from tests.hub_standin import Request, StandinHub, commit_id, repo_from_folder
from tests.tiny_model import build_tiny_model

pytestmark = pytest.mark.integration

GROUNDED = Path(sys.executable).with_name("grounded")
TOKEN = "hf_standin_secret"
NOT_NEEDED = {  # in the repository, not in a model folder
    "README.md": b"# tiny\n",
    ".gitattributes": b"*.safetensors filter=lfs\n",
    "pytorch_model.bin": b"pickle" * 100,
    "original/consolidated.safetensors": b"copy" * 100,
}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md"))
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", text)


@pytest.fixture(scope="module")
def hub(model):
    revisions = {"main": commit_id("main"), "v1": commit_id("v1")}
    bin_only = repo_from_folder(model, {"pytorch_model.bin": b"w" * 64})
    del bin_only.files["model.safetensors"]
    repos = {
        "tiny-org/tiny-model": repo_from_folder(model, NOT_NEEDED, revisions=revisions),
        "private-org/tiny-model": repo_from_folder(model, token=TOKEN),
        "broken-org/tiny-model": repo_from_folder(model, failing=("model.safetensors",)),
        "bin-org/tiny-model": bin_only,
    }
    with StandinHub(repos) as standin:
        yield standin


def fetch(data_dir: Path, ref: str, *args: str, endpoint: str, env: dict | None = None):
    """`grounded --data-dir DATA models fetch REF ...` in a subprocess pointed at ``endpoint``."""
    environment = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    environment.update(HF_ENDPOINT=endpoint, HF_HOME=str(data_dir.parent / "hf-home"))
    environment.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1", **(env or {}))
    command = [str(GROUNDED), "--data-dir", str(data_dir), "models", "fetch", ref, *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)


def downloading(requests: list[Request]) -> list[Request]:
    """The requests of the download itself: huggingface_hub 2.4 also asks the hub for its
    registry of AI agents (for its user agent), which the stand-in answers 404."""
    return [r for r in requests if r.path != "/api/agent-harnesses"]


def entries(data_dir: Path) -> list[str]:
    models = data_dir / "models"
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


@pytest.fixture(scope="module")
def fetched(hub, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("fetched") / "data"
    before = len(hub.requests)
    done = fetch(data_dir, "hf:tiny-org/tiny-model", endpoint=hub.endpoint)
    assert done.returncode == 0, done.stderr
    return data_dir, done, hub.requests[before:]


def test_the_model_files_arrive_intact_and_nothing_else(fetched, model):
    data_dir, done, _ = fetched
    folder = data_dir / "models" / "tiny-org--tiny-model"
    assert entries(data_dir) == ["tiny-org--tiny-model"]  # no temporary folder left
    wanted = {p.name for p in model.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= wanted
    assert {p.name for p in folder.iterdir()} == wanted | {".grounded-hub.json"}
    for name in wanted:
        assert (folder / name).read_bytes() == (model / name).read_bytes(), name
    source = json.loads((folder / ".grounded-hub.json").read_text())
    assert source["commit"] == commit_id("main") and source["revision"] is None
    assert "set generator.model: hf:tiny-org/tiny-model" in done.stdout


def test_the_fetched_model_is_what_the_generator_config_resolves_to(fetched):
    data_dir, _, _ = fetched
    folder = resolve_model("hf:tiny-org/tiny-model", data_dir)
    assert folder == str(data_dir / "models" / "tiny-org--tiny-model")
    from safetensors import safe_open

    with safe_open(Path(folder) / "model.safetensors", framework="numpy") as weights:
        assert any(key.endswith("embed_tokens.weight") for key in weights.keys())  # noqa: SIM118 (no __iter__)


def test_the_download_asks_only_for_model_files_over_plain_http(fetched, hub):
    _, _, requests = fetched
    requests = downloading(requests)
    hub_paths = [(r.method, r.path) for r in requests if r.origin == "hub"]
    commit = commit_id("main")
    assert hub_paths[:2] == [("GET", "/api/models/tiny-org/tiny-model"),
                             ("GET", f"/api/models/tiny-org/tiny-model/tree/{commit}")]  # fmt: skip
    asked = {path.rsplit("/", 1)[1] for _, path in hub_paths[2:]}
    assert asked == {p for p in hub.repos["tiny-org/tiny-model"].files if p not in NOT_NEEDED}
    assert all(f"/resolve/{commit}/" in path for _, path in hub_paths[2:])  # pinned commit
    assert not any("xet" in r.path for r in requests)
    cdn = [r for r in requests if r.origin == "cdn"]
    assert [(r.method, r.authorization) for r in cdn] == [("GET", None)]  # the safetensors


def test_a_second_fetch_downloads_nothing(fetched, hub):
    data_dir, _, _ = fetched
    before = len(hub.requests)
    again = fetch(data_dir, "hf:tiny-org/tiny-model", endpoint=hub.endpoint)
    assert again.returncode == 0, again.stderr
    assert hub.requests[before:] == []


def test_models_list_shows_the_fetched_hub_model(fetched):
    data_dir, _, _ = fetched
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "models", "list"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("hf:tiny-org/tiny-model"))
    assert "installed" in line and commit_id("main")[:12] in line
    assert "qwen2.5-0.5b" in result.stdout  # the named models are still listed


def test_a_pinned_revision_gets_a_folder_of_its_own(hub, tmp_path):
    data_dir = tmp_path / "data"
    done = fetch(data_dir, "hf:tiny-org/tiny-model@v1", endpoint=hub.endpoint)
    assert done.returncode == 0, done.stderr
    folder = Path(resolve_model("hf:tiny-org/tiny-model@v1", data_dir))
    assert folder.name == "tiny-org--tiny-model@v1"
    assert json.loads((folder / ".grounded-hub.json").read_text())["commit"] == commit_id("v1")
    with pytest.raises(ConfigError, match=r"run `grounded models fetch hf:tiny-org/tiny-model`"):
        resolve_model("hf:tiny-org/tiny-model", data_dir)  # another name, not fetched


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("hf:nobody/nothing", "nobody/nothing was not found on http://127.0.0.1:"),
        ("hf:tiny-org/tiny-model@nope", "tiny-org/tiny-model has no revision 'nope'"),
        ("hf:bin-org/tiny-model", "has no config.json with safetensors weights"),
        ("hf:broken-org/tiny-model", "failed while sending hf:broken-org/tiny-model (HTTP 500)"),
    ],
)
def test_a_failed_fetch_says_why_and_leaves_no_folder(hub, tmp_path, ref, message):
    data_dir = tmp_path / "data"
    done = fetch(data_dir, ref, endpoint=hub.endpoint)
    assert done.returncode == 1
    assert message in done.stderr
    assert entries(data_dir) == []


def test_a_private_repository_needs_a_token_and_gets_it_from_the_option(hub, tmp_path):
    ref, data_dir = "hf:private-org/tiny-model", tmp_path / "data"
    anonymous = fetch(data_dir, ref, endpoint=hub.endpoint)
    assert anonymous.returncode == 1
    assert "give a token with --token or the HF_TOKEN environment variable" in anonymous.stderr
    wrong = fetch(data_dir, ref, "--token", "hf_wrong", endpoint=hub.endpoint)
    assert wrong.returncode == 1 and "refused access to private-org/tiny-model (HTTP 401)" in (
        wrong.stderr
    )
    assert entries(data_dir) == []
    before = len(hub.requests)
    done = fetch(data_dir, ref, "--token", TOKEN, endpoint=hub.endpoint)
    assert done.returncode == 0, done.stderr
    assert (data_dir / "models" / "private-org--tiny-model" / "model.safetensors").is_file()
    sent = downloading(hub.requests[before:])
    assert sent and all(r.authorization == f"Bearer {TOKEN}" for r in sent if r.origin == "hub")
    assert TOKEN not in (data_dir / "models" / "private-org--tiny-model" /
                         ".grounded-hub.json").read_text()  # fmt: skip


def test_a_private_repository_takes_the_token_from_hf_token(hub, tmp_path):
    data_dir = tmp_path / "data"
    done = fetch(data_dir, "hf:private-org/tiny-model", endpoint=hub.endpoint,
                 env={"HF_TOKEN": TOKEN})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert entries(data_dir) == ["private-org--tiny-model"]


def test_an_unreachable_hub_says_the_machine_looks_offline(tmp_path):
    closed = StandinHub({}).start()
    endpoint = closed.endpoint
    closed.stop()  # nothing listens on that port any more
    done = fetch(tmp_path / "data", "hf:tiny-org/tiny-model", endpoint=endpoint)
    assert done.returncode == 1
    assert f"cannot reach {endpoint}" in done.stderr and "looks offline" in done.stderr
    assert "grounded models fetch /path/to/folder" in done.stderr
    assert entries(tmp_path / "data") == []


def test_a_local_folder_is_checked_and_used_where_it_is(model, tmp_path):
    data_dir = tmp_path / "data"
    runner = CliRunner()
    result = runner.invoke(app, ["--data-dir", str(data_dir), "models", "fetch", str(model)])
    assert result.exit_code == 0, result.output
    assert f"set generator.model: {model.resolve()}" in result.stdout
    assert entries(data_dir) == []  # nothing copied
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    refused = runner.invoke(app, ["--data-dir", str(data_dir), "models", "fetch", str(empty)])
    assert refused.exit_code == 1
    assert "has no config.json" in refused.output


def test_a_malformed_hub_reference_is_refused_before_any_download(tmp_path):
    for value in ("hf:no-organisation", "hf:a/b@", "hf:a--b/c"):
        with pytest.raises(ConfigError, match="is not a Hugging Face model reference"):
            resolve_model(value, tmp_path)
