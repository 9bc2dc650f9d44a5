from pathlib import Path

import pytest

from index.errors import ConfigError
from serve.config import AppConfig, load_config
from tests.conftest import REPO

pytestmark = pytest.mark.unit


GROUNDED_CONFIGS = [p for p in sorted((REPO / "configs").glob("*.yaml")) if p.name != "serve.yaml"]


@pytest.mark.parametrize("path", GROUNDED_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):  # serve.yaml: tests/integration/test_configs.py
    config = load_config(path)
    assert isinstance(config, AppConfig)


def test_gpu_config_selects_cuda_and_fp16():
    config = load_config(REPO / "configs" / "gpu.yaml")
    assert config.index.embedder.device == "cuda"
    assert config.index.embedder.dtype == "float16"
    assert config.index.vectors.device == "cuda"


def test_environment_overrides_the_file(monkeypatch):
    monkeypatch.setenv("GROUNDED_INDEX__CHUNKER__SIZE", "120")
    monkeypatch.setenv("GROUNDED_DATA_DIR", "/srv/grounded")
    config = load_config(REPO / "configs" / "cpu.yaml")
    assert config.index.chunker.size == 120
    assert config.data_dir == Path("/srv/grounded")


def test_explicit_override_beats_environment(monkeypatch):
    monkeypatch.setenv("GROUNDED_DATA_DIR", "/from/env")
    assert load_config(None, data_dir=Path("/from/flag")).data_dir == Path("/from/flag")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "index:\n  chunker:\n    size: 10\n    overlap: 12\n",
            "index.chunker: chunker.overlap (12) must be smaller",
        ),
        ("index:\n  embedder:\n    device: tpu\n", "index.embedder.device: Input should be"),
        ("index:\n  vectors:\n    nprobe: 0\n", "index.vectors.nprobe"),
        ("indx: {}\n", "indx: unknown field"),
        ("- a list\n", "must hold a mapping"),
        ("index: [unclosed\n", "not valid YAML"),
        ("state:\n  url: mysql://db/grounded\n", "state.url: url must look like postgresql://"),
        ("state:\n  url: postgresql://db:5432\n", "state.url: url names no database"),
    ],
)
def test_bad_files_name_the_field(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in caught.value.message


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")


def test_the_state_url_is_read_from_the_environment_and_never_printed(monkeypatch):
    from serve.config import check_file

    url = "postgresql://grounded:s3cret@db.internal:5432/grounded"
    monkeypatch.setenv("GROUNDED_STATE__URL", url)
    config = load_config(REPO / "configs" / "cpu.yaml")
    assert config.state.url.get_secret_value() == url
    assert "s3cret" not in repr(config) and "s3cret" not in str(config.model_dump(mode="json"))
    assert "s3cret" not in str(check_file(REPO / "configs" / "cpu.yaml"))
